#!/usr/bin/env bash
# Run on the GPU machine from the repository root: matmul_fused's GPU tests, then its bench
# (python -m fusedgemm.bench matmul_fused $BENCH_ARGS, when BENCH_ARGS is set).
# Logs under $OUT; a short summary last.
source "$(dirname "$0")/env.sh"
files=${TESTS:-tests/test_gpu_matmul.py}
run_gpu_tests "${TEST_TIMEOUT:-300}" -x $files
if [ -n "${BENCH_ARGS:-}" ]; then
  timeout ${BENCH_TIMEOUT:-240} python3 -m fusedgemm.bench matmul_fused $BENCH_ARGS 2>&1 | tee "$OUT/bench.txt" | tail -60
fi
