#!/usr/bin/env bash
# Run on the GPU machine from the repository root: gemm_a8's host overhead per eager call on this tree and on an
# older tree BEFORE (a `git archive <commit>` unpacked into an ignored folder and carried), alternating twice in one
# process order, then pytest on the GPU test files given. Logs under $OUT; the two trees' figures last.
#   BEFORE=.old_tree bash scripts/gpu/host_overhead_vs.sh tests/test_gpu_matmul.py ...
# BEFORE's own host-overhead script is `ci/host_overhead.py` before the ci/ sort (670b4cb) and
# `python -m fusedgemm.bench host_overhead` after it.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/device.txt"
( FUSEDGEMM_CACHE_DIR=/tmp/fgcache PYTHONPATH=$PWD/pkg python3 -m fusedgemm.runtime.build --arch sm_90a > "$OUT/build.txt" 2>&1 ) &
( cd "$BEFORE" && FUSEDGEMM_CACHE_DIR=/tmp/fgcache_before PYTHONPATH=$PWD/pkg python3 -m fusedgemm.runtime.build --arch sm_90a \
    > "$OUT/build_before.txt" 2>&1 ) &
wait
before_cmd="python3 -m fusedgemm.bench host_overhead --op gemm_a8 --batches 10"
[ -f "$BEFORE/ci/host_overhead.py" ] && before_cmd="python3 ci/host_overhead.py --batches 10"
for i in 1 2; do
  FUSEDGEMM_CACHE_DIR=/tmp/fgcache PYTHONPATH=$PWD/pkg timeout 90 \
    python3 -m fusedgemm.bench host_overhead --op gemm_a8 --batches 10 > "$OUT/host_new_$i.txt" 2>&1
  ( cd "$BEFORE" && FUSEDGEMM_CACHE_DIR=/tmp/fgcache_before PYTHONPATH=$PWD/pkg timeout 90 $before_cmd \
      > "$OUT/host_before_$i.txt" 2>&1 )
done
if [ $# -gt 0 ]; then
  LEFT=$(( ${BUDGET_S:-560} - ($(date +%s) - T0) ))
  FUSEDGEMM_CACHE_DIR=/tmp/fgcache PYTHONPATH=$PWD/pkg timeout $LEFT python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 \
    | tee "$OUT/gpu_tests.log" | grep -E "passed|failed|FAILED|Error" | tail -30
fi
for i in 1 2; do echo "--- this tree, run $i"; tail -8 "$OUT/host_new_$i.txt"; echo "--- $BEFORE, run $i"; tail -8 "$OUT/host_before_$i.txt"; done
