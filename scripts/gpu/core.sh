#!/usr/bin/env bash
# Run on the GPU machine from the repository root: build the sm_90a code objects, a smoke
# check of every plan, then the GPU test files given as arguments (default: gemm_a8, epilogue expressions,
# bmm_tiny). With BEFORE=<dir> (a copy of an earlier tree) its code objects are built too, in parallel, for a
# same-session before/after bench (scripts/gpu/bench_compare.sh). Logs under $OUT; a short summary last.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache}
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/device.txt"
( time PYTHONPATH=$PWD/pkg python3 -m fusedgemm.runtime.build --arch sm_90a ) > "$OUT/build.txt" 2>&1 &
if [ -n "${BEFORE:-}" ]; then
  ( cd "$BEFORE" && time PYTHONPATH=$PWD/pkg FUSEDGEMM_CACHE_DIR=/tmp/fgcache_before \
      python3 -m fusedgemm.runtime.build --arch sm_90a ) > "$OUT/build_before.txt" 2>&1 &
fi
wait
tail -3 "$OUT/build.txt"
export PYTHONPATH=$PWD/pkg
timeout 120 python3 ci/smoke_gemm_a8.py > "$OUT/smoke.txt" 2>&1; rc=$?; tail -2 "$OUT/smoke.txt"
if [ $rc -ne 0 ]; then grep -v " ok$" "$OUT/smoke.txt" | tail -20; echo "smoke failed (rc $rc): no tests"; exit 1; fi
files=${*:-tests/test_gpu_gemm_a8.py tests/test_gpu_epilogue.py tests/test_gpu_bmm.py}
timeout ${TEST_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider $files 2>&1 | tee "$OUT/gpu_tests.log" \
  | grep -E "passed|failed|Error|error|FAILED" | tail -25
