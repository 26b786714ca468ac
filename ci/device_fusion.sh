#!/usr/bin/env bash
# Run on the GPU machine from the repository root (the device tool): the fusion / swiglu / quant GPU tests, then
# `python -m fusedgemm.bench models $BENCH_ARGS`. Logs under $OUT; a short summary last.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache} PYTHONPATH=$PWD/pkg
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
files=${TESTS:-$(ls tests/test_gpu_fusion.py tests/test_gpu_swiglu.py tests/test_gpu_quant.py 2>/dev/null)}
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider $files 2>&1 | tee "$OUT/gpu_tests.log" \
  | grep -E "passed|failed|Error|error|FAILED|assert" | tail -30
if [ -n "${BENCH_ARGS:-}" ]; then
  eval timeout ${BENCH_TIMEOUT:-240} python3 -m fusedgemm.bench models $BENCH_ARGS 2>&1 | tee "$OUT/bench.txt" | tail -40
fi
