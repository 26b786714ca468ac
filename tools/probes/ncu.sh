#!/bin/bash
# Nsight Compute side by side of gemm_a8's large-M kernels and torch's fp8 GEMM (tools/probes/ncu_compare.py), on the GPU
# machine: bash tools/probes/ncu.sh [M N K] [--configs a,b]. Reports in $OUT: ncu_details.txt, ncu_raw.csv, and the
# per-instruction SASS view (warp stall samples) of each gemm_a8 kernel with the identity epilogue (SASS_KERNELS:
# another regex of kernel names, e.g. fg_matmul for --kinds bf16).
source scripts/gpu/env.sh
python3 tools/probes/ncu_compare.py "$@" 2>&1 | tee "$OUT/ncu_warmup.txt" | tail -8
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
"$NCU" --clock-control none --profile-from-start off --set full --import-source yes -f -o "$OUT/ncu_cmp" \
  python3 tools/probes/ncu_compare.py --profile "$@" > "$OUT/ncu_run.txt" 2>&1 || tail -20 "$OUT/ncu_run.txt"
"$NCU" -i "$OUT/ncu_cmp.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
"$NCU" -i "$OUT/ncu_cmp.ncu-rep" --page raw --csv > "$OUT/ncu_raw.csv" 2>&1
"$NCU" -i "$OUT/ncu_cmp.ncu-rep" --page source --print-source sass --csv -k regex:"${SASS_KERNELS:-_none_}" > "$OUT/ncu_sass.csv" 2>&1
rm -f "$OUT/ncu_cmp.ncu-rep"
grep -E "^  [a-z_]+.*\(|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Hit Rate|Issue Slots Busy|Eligible Warps" "$OUT/ncu_details.txt" | head -60
