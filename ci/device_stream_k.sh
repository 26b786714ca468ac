#!/usr/bin/env bash
# Stream-K on the GPU machine (from the repository root, the device tool): build (or take FUSEDGEMM_PREBUILT_DIR's
# code objects), a smoke check of every plan, the stream-K and persistent-kernel GPU tests, then the persistent
# plans with and without stream-K timed rep by rep on the fp8 grid (M from BENCH_M). Logs under $OUT.
source ci/device_env.sh
if [ -z "${FUSEDGEMM_PREBUILT_DIR:-}" ]; then
  ( time python3 -m fusedgemm.runtime.build --arch sm_90a --unit gemm_a8_sm90 ) > "$OUT/build.txt" 2>&1
  tail -3 "$OUT/build.txt"
fi
timeout 150 python3 ci/smoke_gemm_a8.py > "$OUT/smoke.txt" 2>&1; rc=$?; tail -2 "$OUT/smoke.txt"
if [ $rc -ne 0 ]; then grep -v " ok$" "$OUT/smoke.txt" | tail -20; echo "smoke failed (rc $rc): no tests"; exit 1; fi
run_gpu_tests "${TEST_TIMEOUT:-240}" tests/test_gpu_stream_k.py tests/test_gpu_gemm_a8.py \
  -k "${TEST_K:-stream_k or ks128n128 or persistent_ctas or graph or two_streams}"
timeout "${BENCH_TIMEOUT:-240}" python3 -m fusedgemm.bench gemm_a8 --M ${BENCH_M:-256 1024 4096 8192} --no-compile \
  --reps 20 --compare-plans ${BENCH_PLANS:-p128n128:1 s128n128:1 ks128n128:1} ${BENCH_ARGS:-} > "$OUT/bench.txt" 2>&1
tail -${BENCH_TAIL:-32} "$OUT/bench.txt"
