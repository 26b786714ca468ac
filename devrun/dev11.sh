export PYTHONPATH=$PWD/pkg PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=/tmp/fgcache FUSEDGEMM_NVCC=$(command -v nvcc)
python3 -m fusedgemm.runtime.build --arch sm_90a --unit gemm_a8_sm90 > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
timeout 150 python3 -m pytest -q -x tests/test_gpu_gemm_a8.py > $OUT/gpu_tests.log 2>&1; tail -3 $OUT/gpu_tests.log
grep -q " passed" $OUT/gpu_tests.log && ! grep -q "failed" $OUT/gpu_tests.log || { grep -B30 "Error" $OUT/gpu_tests.log | head -60; exit 1; }
timeout 200 python3 -m fusedgemm.bench gemm_a8 --M 1 16 --kernel-time --no-compile > $OUT/dec.txt 2>&1
tr '\r' '\n' < $OUT/dec.txt | grep -v "it/s\]\|s/it\]\|warn" | tail -16
