#!/usr/bin/env bash
# Run on the GPU machine from the repository root: the GPU tests that clear fusedgemm/pending.py's paths, one pytest
# per path in order of need (each one's log under $OUT, so a run cut short keeps what finished), no ahead-of-time
# build (each test compiles what it launches). For a short device budget; held_paths.sh adds the benches.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache} PYTHONPATH=$PWD/pkg
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
T0=$(date +%s)
i=0
for t in "tests/test_gpu_grouped.py -k persistent" tests/test_gpu_out_groups.py \
         "tests/test_gpu_blockscale.py -k gate_up_pair" "tests/test_gpu_grouped.py -k block_scales" \
         "tests/test_gpu_gemm_a8.py -k four_codes_one_store_or_pairs"; do
  i=$((i + 1))
  left=$(( ${BUDGET_S:-560} - ($(date +%s) - T0) ))
  if [ "$left" -lt 30 ]; then echo "[$i] $t: skipped ($left s left)"; continue; fi
  timeout "$left" python3 -m pytest -q -p no:cacheprovider $t > "$OUT/tests_$i.log" 2>&1
  echo "[$i] $t: rc $? at $(( $(date +%s) - T0 )) s: $(tail -1 "$OUT/tests_$i.log")"
done
grep -h "^FAILED\|Error" "$OUT"/tests_*.log | head -20
