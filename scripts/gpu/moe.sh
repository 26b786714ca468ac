#!/usr/bin/env bash
# Run on the GPU machine from the repository root: the MoE benchmark (python -m fusedgemm.bench moe, the grouped
# GEMMs and fg.nn.FusedMoE beside torch's grouped GEMMs and the transformers blocks), then GPU test files given as
# arguments with the time left of BUDGET_S. Logs under $OUT; the bench's tables last.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache} PYTHONPATH=$PWD/pkg
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/device.txt"
timeout ${BENCH_TIMEOUT:-300} python3 -m fusedgemm.bench moe ${MOE_ARGS:---routing uniform --tokens 1 64 1024 4096 --module} \
  --json "$OUT/moe.json" > "$OUT/moe.txt" 2>&1; echo "bench rc $?" >> "$OUT/moe.txt"
if [ $# -gt 0 ]; then
  python3 -m fusedgemm.runtime.build --arch sm_90a > "$OUT/build.txt" 2>&1
  LEFT=$(( ${BUDGET_S:-560} - ($(date +%s) - T0) ))
  timeout $LEFT python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$OUT/gpu_tests.log" \
    | grep -E "passed|failed|FAILED|Error" | tail -20
fi
cat "$OUT/moe.txt" | tail -80
