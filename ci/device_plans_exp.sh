#!/bin/bash
# GPU machine: after a kernel change, its GPU tests and the bench tables for the notes (fp8 and int8 grids, the
# off-grid sweep, bf16 persistent plans). Logs in $OUT.
source ci/device_env.sh
timeout 150 python3 ci/smoke_gemm_a8.py > "$OUT/smoke.txt" 2>&1; tail -1 "$OUT/smoke.txt"
run_gpu_tests 100 tests/test_gpu_gemm_a8.py -k "persistent or s128n128"
B="python3 -m fusedgemm.bench gemm_a8 --no-compile"
timeout 170 $B --json "$OUT/fp8.json" > "$OUT/bench_fp8.txt" 2>&1; grep "geomean" "$OUT/bench_fp8.txt" | head -4
timeout 110 $B --sweep > "$OUT/bench_fp8_sweep.txt" 2>&1; grep "sweep:" "$OUT/bench_fp8_sweep.txt"
timeout 130 $B --dtype int8 > "$OUT/bench_int8.txt" 2>&1; grep "geomean" "$OUT/bench_int8.txt" | head -4
timeout 60 python3 ci/matmul_plans.py --configs p128n128,cp128n128,s128n128,w128n256,c128n256 \
  --shapes moe_dn:2048,moe_dn:8192,qkv:4096 > "$OUT/matmul_bf16_persistent.txt" 2>&1; tail -8 "$OUT/matmul_bf16_persistent.txt"
