#!/usr/bin/env bash
# Run on the GPU machine from the repository root: GPU tests for both ops, then both benchmarks.
# Extra arguments go to the gemm_a8 benchmark. Logs and JSON under $OUT.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/pkg PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache}
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 -m fusedgemm.runtime.build --arch sm_90a > "$OUT/build.txt" 2>&1 || { cat "$OUT/build.txt"; exit 1; }
python3 -m pytest -q -p no:cacheprovider tests/test_gpu_gemm_a8.py tests/test_gpu_bmm.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -4
python3 -m fusedgemm.bench bmm_tiny --json "$OUT/bench_bmm.json" 2>&1 | tee "$OUT/bench_bmm.txt" | grep -v "it/s"
python3 -m fusedgemm.bench gemm_a8 --json "$OUT/bench_gemm_a8.json" --plot "$OUT/gemm_a8.png" "$@" 2>&1 | tee "$OUT/bench_gemm_a8.txt" | grep -v "it/s"
