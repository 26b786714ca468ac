#!/bin/bash
# GPU machine: the kernels' GPU tests, then the descriptor change A/B (ci/probe_sm90.py variants, timed rep by rep).
# Logs in $OUT.
source ci/device_env.sh
timeout 200 python3 ci/smoke_gemm_a8.py > "$OUT/smoke.txt" 2>&1; tail -1 "$OUT/smoke.txt"
run_gpu_tests 330 tests/test_gpu_gemm_a8.py tests/test_gpu_matmul.py tests/test_gpu_epilogue.py
timeout 200 python3 ci/probe_sm90.py --configs p128n128 v16n128 w128n192 \
  --cases "M=8192 p128n128" "M=1 v16n128" "M=1024 w128n192" > "$OUT/probe_desc.txt" 2>&1
tail -8 "$OUT/probe_desc.txt"
