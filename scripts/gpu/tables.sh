#!/usr/bin/env bash
# Run on the GPU machine from the repository root: the benchmark tables of docs/benchmarks.md, one step per argument,
# each under its own timeout, in the order given:
#   fp8_sweep fp8_grid int8_sweep int8_grid bf16_grid   python -m fusedgemm.bench ... (--no-compile) -> $OUT/<step>.txt
#                                                       (+ .json for the grids)
#   fp8_decode int8_decode                              the grid's M <= 64 rows with --kernel-time (the profiler's
#                                                       per-call setup makes it slow on all rows)
#   fp8_sweep_tune fp8_grid_tune fp8_decode_tune        --tune (every plan rep by rep) on the sweep / the grid at
#   int8_sweep_tune int8_grid_tune int8_decode_tune     M >= 256 / the grid at M <= 64 -> $OUT/<step>.txt, entries
#                                                       merged into $OUT/tuned_<dtype>.json (two runs of the same
#                                                       steps, then scripts/gpu/merge_tuned.py, update the shipped
#                                                       table)
#   decode                                              tools/probes/decode_fixed_cost.py -> $OUT/decode.txt
#   tests                                               the gemm_a8 + epilogue + matmul_fused GPU tests -> $OUT/tests.txt
# Plan comparisons (--compare-plans CONFIG:SPLITS ...) take the config names FUSEDGEMM_PRINT_CONFIGS=1 prints; run
# them directly with python -m fusedgemm.bench gemm_a8 (docs/benchmarks.md).
# On a fresh machine the first step that calls gemm_a8 builds the sm_90a unit (FUSEDGEMM_JIT_VERBOSE prints how long).
# Each step's exit status and seconds, then the tables' summary lines, last.
source "$(dirname "$0")/env.sh"
export FUSEDGEMM_JIT_VERBOSE=1
step() {  # step NAME SECONDS COMMAND...
  local name=$1 secs=$2 t0=$SECONDS; shift 2
  timeout "$secs" "$@" > "$OUT/$name.txt" 2>&1
  echo "$name: rc $? in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
a8() { step "$1" "$2" python3 -m fusedgemm.bench gemm_a8 --no-compile "${@:3}"; }
for s in "$@"; do
  case $s in
    fp8_sweep) a8 fp8_sweep 300 --sweep ;;
    fp8_grid) a8 fp8_grid 200 --json "$OUT/fp8_grid.json" ;;
    fp8_decode) a8 fp8_decode 150 --kernel-time --M 1 16 64 ;;
    int8_decode) a8 int8_decode 150 --dtype int8 --kernel-time --M 1 16 64 ;;
    fp8_sweep_tune) a8 fp8_sweep_tune 240 --sweep --tune "$OUT/tuned_fp8.json" ;;
    fp8_grid_tune) a8 fp8_grid_tune 240 --M 256 1024 4096 8192 --tune "$OUT/tuned_fp8.json" ;;
    fp8_decode_tune) a8 fp8_decode_tune 150 --M 1 16 64 --tune "$OUT/tuned_fp8.json" ;;
    int8_grid_tune) a8 int8_grid_tune 240 --dtype int8 --M 256 1024 4096 8192 --tune "$OUT/tuned_int8.json" ;;
    int8_sweep_tune) a8 int8_sweep_tune 240 --dtype int8 --sweep --tune "$OUT/tuned_int8.json" ;;
    int8_decode_tune) a8 int8_decode_tune 150 --dtype int8 --M 1 16 64 --tune "$OUT/tuned_int8.json" ;;
    int8_sweep) a8 int8_sweep 200 --dtype int8 --sweep ;;
    int8_grid) a8 int8_grid 200 --dtype int8 --json "$OUT/int8_grid.json" ;;
    bf16_grid) step bf16_grid 240 python3 -m fusedgemm.bench matmul_fused --no-compile --json "$OUT/bf16_grid.json" ;;
    decode) step decode 120 python3 tools/probes/decode_fixed_cost.py ;;
    tests) step tests 480 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_gemm_a8.py tests/test_gpu_epilogue.py \
             tests/test_gpu_matmul.py ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done
for s in "$@"; do
  case $s in
    tests) grep -E "passed|failed" "$OUT/tests.txt" | tail -3 ;;
    decode) sed -n '/^fit/,$p' "$OUT/decode.txt" ;;
    *tune) grep -E "^--tune" "$OUT/$s.txt" ;;
    *) grep -E "^(sweep|geomean|  kernel time)|compile " "$OUT/$s.txt" | sed "s/^/$s | /" ;;
  esac
done
