"""Every registered merging method runs on the fake problem, on CPU and (when present) CUDA,
returns trunks with the base's keys, shapes, dtypes and device, and leaves its inputs alone."""

import pytest
import torch

from sparsebench.methods.merging.base import MergeInputs
from sparsebench.suite import registry
from tests.methods.merging.conftest import FakeData, assert_unchanged, make_inputs, snapshot

RESOLVED = {  # small, resolved settings (no None left)
    "averaging": {},
    "task_arithmetic": {"lam": 0.3},
    "ties": {"k": 0.2, "lam": 1.0},
    "dare_ta": {"p": 0.5, "lam": 0.3},
    "dare_ties": {"p": 0.5, "k": 0.2, "lam": 1.0},
    "fisher": {"n_examples": 8},
    "regmean": {"n_examples": 16},
    "adamerging_task": {"steps": 3, "n_examples": 16},
    "adamerging_layer": {"steps": 3, "n_examples": 16},
    "tall_masks": {"n_examples": 16},
    "consensus": {"alpha": 0.3, "n_examples": 16},
    "cass": {"keep": 0.5, "lam": 0.3, "n_examples": 16},
    "cass_tuning": {"lam": 0.3},
}

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class DeviceData(FakeData):
    def __init__(self, device, *a, **kw):
        super().__init__(*a, **kw)
        self.heads = [h.to(device) for h in self.heads]
        self.splits = {k: (x.to(device), y.to(device)) for k, (x, y) in self.splits.items()}


def test_every_method_is_covered():
    assert set(RESOLVED) == set(registry.all_methods(("merging",)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(RESOLVED))
def test_runs_on_device(name, device):
    cpu = make_inputs()
    info = registry.all_methods(("merging",))[name]
    params = registry.build_params(info, RESOLVED[name])
    experts = [{k: v.to(device) for k, v in e.items()} for e in cpu.experts]
    # a method's own artefacts: trunk-shaped stand-ins on the device (perturbed experts)
    own = {
        r.kind: [{k: v * 1.01 for k, v in e.items()} for e in experts]
        for r in info.cls.artefacts(params, {"tasks": list(cpu.tasks)})
    }
    inputs = MergeInputs(
        base={k: v.to(device) for k, v in cpu.base.items()},
        experts=experts,
        tasks=cpu.tasks,
        groups=cpu.groups,
        data=DeviceData(device, 3, 0),
        artefacts=own,
    )
    snap = snapshot(inputs)
    res = info.cls().merge(inputs, params)
    trunks = res.per_task if res.per_task is not None else [res.state]
    for trunk in trunks:
        assert set(trunk) == set(inputs.base)
        for k, v in trunk.items():
            ref = inputs.base[k]
            assert (v.shape, v.dtype, v.device) == (ref.shape, ref.dtype, ref.device), k
            assert torch.isfinite(v).all(), k
    if res.task_vectors is not None:
        assert len(res.task_vectors) == 3
    assert_unchanged(inputs, snap)
