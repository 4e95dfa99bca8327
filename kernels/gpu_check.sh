#!/usr/bin/env bash
# The kernels benchmark on a CUDA GPU, in one command, from the repository root or anywhere:
#
#   bash kernels/gpu_check.sh            # full sweep (suite/benchmarks/kernels_gpu.yaml)
#   QUICK=1 bash kernels/gpu_check.sh    # only 4096 x 4096, batch 64, sparsities 0.5/0.95/0.99
#                                          (results/kernels_gpu_quick/)
#
# Sets up .venv like `make` (pip, pinned torch), checks that CUDA is visible, runs the Triton
# kernels' correctness tests on the GPU, then the benchmark, and prints the leaderboard's goals.
# Results: results/kernels_gpu/kernels/ (float32) and results/kernels_gpu_fp16/kernels/ (float16, 2:4):
# leaderboard.md, runs.parquet, speedup.png.
set -euo pipefail
cd "$(dirname "$0")/.."
make install >/dev/null
PY=.venv/bin/python
$PY - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA GPU here; run the CPU benchmark instead: "
             "snakemake --cores 2 --config spec=suite/benchmarks/kernels.yaml")
print("GPU:", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
PY
$PY -m pytest -q tests/kernels
run() {  # run one spec, then print its leaderboard's summary
  PATH="$PWD/.venv/bin:$PATH" snakemake --cores 1 --config spec="$1"
  .venv/bin/sparsebench leaderboard "results/$2"
}
if [[ "${QUICK:-0}" == "1" ]]; then
  mkdir -p results
  sed -e 's/^benchmark: .*/benchmark: kernels_gpu_quick/' \
      -e 's/^  shapes: .*/  shapes: [[4096, 4096]]/' \
      -e 's/^  sparsities: .*/  sparsities: [0.5, 0.95, 0.99]/' \
      -e 's/^  batches: .*/  batches: [64]/' \
      suite/benchmarks/kernels_gpu.yaml > results/kernels_gpu_quick.yaml
  run results/kernels_gpu_quick.yaml kernels_gpu_quick
else
  run suite/benchmarks/kernels_gpu.yaml kernels_gpu
  run suite/benchmarks/kernels_gpu_fp16.yaml kernels_gpu_fp16   # 2:4 tensor cores, float16
fi
