#!/usr/bin/env bash
# Run on the GPU machine from the repository root: quantize_rows / Linear8 / fg.quantize GPU
# tests (tests/test_gpu_quant.py, or $TESTS), then python -m fusedgemm.bench quantize_rows (bf16 -> fp8 and -> int8; skip
# with BENCH=0). Logs under $OUT; a short summary last.
source "$(dirname "$0")/env.sh"
files=${TESTS:-tests/test_gpu_quant.py}
run_gpu_tests "${TEST_TIMEOUT:-400}" $files
if [ "${BENCH:-1}" != "0" ]; then
  for code in fp8 int8; do
    timeout ${BENCH_TIMEOUT:-150} python3 -m fusedgemm.bench quantize_rows --code $code --json "$OUT/bench_quantize_rows_$code.json" \
      2>&1 | tee "$OUT/bench_quantize_rows_$code.txt" | tail -16
  done
fi
