"""The DST wall-clock benchmark script runs end to end on tiny sizes (no timing asserted)."""

import json

from sparsebench.kernels import available_backends
from sparsebench.suite.pillars.classification import bench_dst


def test_bench_runs_on_tiny_sizes():
    backend = "cpu" if available_backends()["cpu"][0] else "torch_csr"
    result = bench_dst.run(
        sparsities=(0.9,),
        regrowth_repeats=1,
        batches=(4,),
        kernel_repeats=1,
        backend=backend,
        input_shape=(1, 16, 16),
        output_shape=(20, 64),
    )
    cht = result["cht_regrowth"]
    assert [r["layer"] for r in cht] == ["conv1", "conv2"]
    conv2 = cht[1]
    # The channel graph has kh * kw = 25 times fewer input nodes than the element graph.
    assert conv2["element_graph"] == [50, 500] and conv2["channel_graph"] == [50, 20]
    assert conv2["element_links"] == 2500 and conv2["channel_links"] == 100
    assert all(r["element_ms"] > 0 and r["channel_ms"] > 0 and r["ratio"] > 0 for r in cht)
    [haste] = result["haste_kernel"]
    # Linear(20, 64) at density 0.1: fan-in 2 per group of 16, 128 nonzeros in both masks.
    assert haste["batch"] == 4 and haste["fan_in"] == 2 and haste["nnz"] == 128
    assert haste["backend"] == backend
    assert all(haste[f"{k}_us"] > 0 for k in ("dense", "dense_mask", "haste", "masked"))
    text = bench_dst.markdown(result)
    assert "| conv2 | 0.9 | 50 x 500 (2500) |" in text and "HASTE / unstructured" in text
    json.dumps(result)  # the script prints it as JSON
