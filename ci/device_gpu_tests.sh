#!/usr/bin/env bash
# Run on the GPU machine (the device tool) from the repository root: build, GPU tests, accuracy report.
# Logs go under $OUT (or ./device-out). Uses the machine's python3/torch; fusedgemm from pkg/.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/pkg PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache}
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)" | tee -a "$OUT/device.txt"
( time python3 -m fusedgemm.runtime.build --arch sm_90a ) 2>&1 | tail -4 | tee "$OUT/build.txt"
python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_gemm_a8.py "$@" 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
python3 ci/gpu_report.py 2>&1 | tee "$OUT/accuracy.txt"
