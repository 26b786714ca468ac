#!/usr/bin/env bash
# Run on the GPU machine from the repository root: the first GPU run of the paths in fusedgemm/pending.py. Builds
# the sm_90a code objects, runs the tests that clear each pending path (core.sh), then, in the time left of
# BUDGET_S, the benches that measure them: out_group on the persistent kernels (channel and block scales), and the
# MoE grouped GEMMs with the plan's config, and tile_128x128, tile_64x128 and the persistent configs pinned (the short-K prefill
# question). TESTS=0: build only, no tests; BENCHES="...": which benches (names below). Logs under $OUT; summaries last.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache} PYTHONPATH=$PWD/pkg
T0=$(date +%s)
left() { echo $(( ${BUDGET_S:-570} - ($(date +%s) - T0) )); }
if [ "${TESTS:-1}" != 0 ]; then
  TEST_TIMEOUT=${TEST_TIMEOUT:-260} bash scripts/gpu/core.sh tests/test_gpu_out_groups.py tests/test_gpu_blockscale.py \
    tests/test_gpu_grouped.py "tests/test_gpu_gemm_a8.py::test_fp8_output_four_codes_one_store_or_pairs" \
    "tests/test_gpu_gemm_a8.py::test_persistent_ctas_loop_over_tiles" > "$OUT/core.txt" 2>&1
  echo "core rc $? at $(( $(date +%s) - T0 )) s"
else
  python3 -m fusedgemm.runtime.build --arch sm_90a > "$OUT/build.txt" 2>&1; echo "build rc $? at $(( $(date +%s) - T0 )) s"
fi
# the benches with the pending paths turned on (as the tests do), so that they measure them
BENCH='import sys, fusedgemm.pending as p; p.PENDING_GPU_RUN.clear(); from fusedgemm.bench.__main__ import main; sys.exit(main(sys.argv[1:]))'
run() {  # run NAME TIMEOUT ARGS...: one bench, skipped when less time is left than asked
  local name=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "$name: skipped ($(left) s left)"; return; fi
  timeout "$t" python3 -c "$BENCH" "$@" > "$OUT/$name.txt" 2>&1; echo "$name rc $? at $(( $(date +%s) - T0 )) s"
}
MOE="--models qwen3-30b-a3b mixtral-8x7b --routing uniform --tokens 1024 4096 --dtype bf16 fp8 --reps 15"
for b in ${BENCHES:-moe_plan moe_128 out_group out_group_block moe_64 moe_p moe_p7}; do
  case $b in
    out_group) run out_group 100 out_group --M 256 1024 4096 ;;
    out_group_block) run out_group_block 80 out_group --M 256 1024 4096 --scales block ;;
    moe_plan) run moe_plan 90 moe $MOE ;;
    moe_64) run moe_64 90 moe $MOE --config tile_64x128 ;;
    moe_128) run moe_128 90 moe $MOE --config tile_128x128 ;;
    moe_p) run moe_p 90 moe $MOE --config persistent_128x128 ;;
    moe_p7) run moe_p7 90 moe $MOE --config persistent_128x128_epi7_1chain ;;
  esac
done
[ -f "$OUT/core.txt" ] && tail -16 "$OUT/core.txt"
for f in ${BENCHES:-moe_plan moe_128 out_group out_group_block moe_64 moe_p moe_p7}; do
  [ -f "$OUT/$f.txt" ] && { echo "== $f"; tail -22 "$OUT/$f.txt"; }
done
