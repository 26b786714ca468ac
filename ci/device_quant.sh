#!/usr/bin/env bash
# Run on the GPU machine from the repository root (the device tool): quantize_rows / Linear8 / fg.quantize GPU
# tests (tests/test_gpu_quant.py, or $TESTS), then ci/bench_quantize_rows.py (bf16 -> fp8 and -> int8; skip
# with BENCH=0). Logs under $OUT; a short summary last.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache} PYTHONPATH=$PWD/pkg
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/device.txt"
files=${TESTS:-tests/test_gpu_quant.py}
timeout ${TEST_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider $files 2>&1 | tee "$OUT/gpu_tests.log" \
  | grep -E "passed|failed|Error|error|FAILED|assert" | tail -30
if [ "${BENCH:-1}" != "0" ]; then
  for code in fp8 int8; do
    timeout ${BENCH_TIMEOUT:-150} python3 ci/bench_quantize_rows.py --code $code --json "$OUT/bench_quantize_rows_$code.json" \
      2>&1 | tee "$OUT/bench_quantize_rows_$code.txt" | tail -16
  done
fi
