#!/usr/bin/env bash
# Run on the GPU machine from the repository root: the fusion / 8-bit fusion / swiglu / quant / gated
# MLP GPU tests (~5 minutes on an H200), then
# `python -m fusedgemm.bench models $BENCH_ARGS`. Logs under $OUT; a short summary last.
source "$(dirname "$0")/env.sh"
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
files=${TESTS:-$(ls tests/test_gpu_fusion.py tests/test_gpu_fusion_a8.py tests/test_gpu_swiglu.py tests/test_gpu_quant.py \
  tests/test_gpu_gated_mlp.py 2>/dev/null)}
run_gpu_tests "${TEST_TIMEOUT:-420}" $files
if [ -n "${BENCH_ARGS:-}" ]; then
  eval timeout ${BENCH_TIMEOUT:-240} python3 -m fusedgemm.bench models $BENCH_ARGS 2>&1 | tee "$OUT/bench.txt" | tail -40
fi
