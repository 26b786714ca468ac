# Sourced by the scripts/gpu/*.sh scripts and tools/probes/*.sh (run on the GPU machine from the repository root): the environment they
# share, the GPU's name and clocks into $OUT/device.txt, and run_gpu_tests.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache} PYTHONPATH=$PWD/pkg
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/device.txt"

# run_gpu_tests SECONDS [pytest options] FILES...: the log in $OUT/gpu_tests.log, its verdict lines on stdout.
run_gpu_tests() {
  local seconds=$1; shift
  timeout "$seconds" python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$OUT/gpu_tests.log" \
    | grep -E "passed|failed|Error|error|FAILED|assert" | tail -30
}
