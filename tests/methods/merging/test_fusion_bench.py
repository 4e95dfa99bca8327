"""Cross-check against FusionBench (tanganke/fusion_bench) when it is installed (skipped
otherwise).

Definitional differences, accounted for below:

* TIES trim: FusionBench (like the official TIES code) keeps the entries >= the
  (d − int(d·K))-th smallest magnitude of the flattened vector, i.e. int(d·K) + 1 entries
  without ties, K in percent; ours keeps round(k·d). We pass k = (int(d·K) + 1) / d.
* FusionBench flattens the state dict in sorted key order; trimming is over the whole vector
  in both, so the order does not matter.
* Disjoint aggregation: FusionBench's configs default to ``merge_func: sum``; the paper (and
  ours) use the mean, so we ask FusionBench for ``dis-mean``.
* Task Arithmetic: FusionBench's ``task_arithmetic_merge`` works on nn.Modules, so each state
  dict is loaded into a module of the same names first, as buffers (0.2.33's state-dict
  arithmetic refuses to add a Tensor to a Parameter); nothing else differs.
"""

import torch

from sparsebench.methods.merging.base import MergeInputs
from sparsebench.methods.merging.task_arithmetic import TaskArithmetic
from sparsebench.methods.merging.ties import Ties
from tests.methods.merging.conftest import make_inputs
from tests.oracle import peer

fb = peer("fusion_bench.method.ties_merging.ties_merging_utils")
fb_ta = peer("fusion_bench.method.task_arithmetic.task_arithmetic")


def _flat(sd):
    return fb.state_dict_to_vector(sd)


def test_ties_matches_fusion_bench():
    inputs = make_inputs(data=False)
    tvs = inputs.task_vectors()
    flat = torch.vstack([_flat(tv) for tv in tvs])
    d, percent = flat.shape[1], 20
    ref = fb.ties_merging(flat, reset_thresh=percent, merge_func="dis-mean")
    k = (int(d * percent / 100) + 1) / d
    ours = Ties().merge(MergeInputs(inputs.base, inputs.experts), Ties.Params(k=k, lam=1.0))
    merged = {key: ours.state[key] - inputs.base[key] for key in inputs.base}
    torch.testing.assert_close(_flat(merged), ref, rtol=1e-5, atol=1e-6)


def _module(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A module whose state dict is ``state`` (dotted names become submodules)."""
    root = torch.nn.Module()
    for key, value in state.items():
        *path, leaf = key.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_buffer(leaf, value.clone())
    return root


def test_task_arithmetic_matches_fusion_bench():
    inputs = make_inputs(data=False)
    ref = fb_ta.task_arithmetic_merge(
        _module(inputs.base), [_module(e) for e in inputs.experts], scaling_factor=0.3
    ).state_dict()
    ours = TaskArithmetic().merge(inputs, TaskArithmetic.Params(lam=0.3))
    assert set(ref) == set(ours.state)
    for key in ref:
        torch.testing.assert_close(ours.state[key], ref[key].detach(), rtol=1e-5, atol=1e-6)
