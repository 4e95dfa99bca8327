import pytest
import torch

from tests.methods.conftest import MaskWatcher


def test_oneshot_prunes_once_at_half_budget_by_global_magnitude(tiny_fit):
    watcher = MaskWatcher()
    module, method = tiny_fit("magnitude_oneshot", 0.75, epochs=4, extra_callbacks=[watcher])
    assert method.prune_epoch == 2
    # Dense for epochs 0-1 (10 batches each), sparse and fixed afterwards.
    assert all(m["0"] is None for m in watcher.masks[:20])
    assert all(torch.equal(watcher.masks[20]["0"], m["0"]) for m in watcher.masks[20:])
    assert module.masks.sparsity() == pytest.approx(0.75, abs=0.005)
