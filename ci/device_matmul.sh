#!/usr/bin/env bash
# Run on the GPU machine from the repository root (the device tool): matmul_fused's GPU tests, then its bench
# (python -m fusedgemm.bench matmul_fused ARGS from $BENCH_ARGS, or a quick table if the CLI is absent).
# Logs under $OUT; a short summary last.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache} PYTHONPATH=$PWD/pkg
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/device.txt"
files=${TESTS:-tests/test_gpu_matmul.py}
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -x -p no:cacheprovider $files 2>&1 | tee "$OUT/gpu_tests.log" \
  | grep -E "passed|failed|Error|error|FAILED|assert" | tail -30
if [ -n "${BENCH_ARGS:-}" ]; then
  timeout ${BENCH_TIMEOUT:-240} python3 -m fusedgemm.bench matmul_fused $BENCH_ARGS 2>&1 | tee "$OUT/bench.txt" | tail -60
fi
