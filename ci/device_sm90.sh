#!/usr/bin/env bash
# Run on the GPU machine from the repository root: build the sm_90a units, the gemm_a8 GPU tests, then the
# gemm_a8 benchmark (arguments go to the benchmark). Logs under $OUT. A short summary is printed last.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/pkg PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache}
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"
( time python3 -m fusedgemm.runtime.build --arch sm_90a ) > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
tail -3 "$OUT/build.txt"
timeout 120 python3 ci/smoke_gemm_a8.py > "$OUT/smoke.txt" 2>&1; rc=$?; tail -4 "$OUT/smoke.txt"
if [ $rc -ne 0 ]; then grep -v " ok$" "$OUT/smoke.txt" | tail -30; exit 1; fi
timeout 400 python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_gemm_a8.py ${TESTS_K:+-k "$TESTS_K"} 2>&1 \
  | tee "$OUT/gpu_tests.log" | tail -15
[ -n "${NO_BENCH:-}" ] || python3 -m fusedgemm.bench gemm_a8 --json "$OUT/bench_gemm_a8.json" "$@" 2>&1 \
  | tee "$OUT/bench_gemm_a8.txt" | grep -v "it/s" | grep -v "^W1"
