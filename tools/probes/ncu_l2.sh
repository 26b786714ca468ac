#!/bin/bash
# Where the L2 sectors of gemm_a8's persistent kernels and torch's fp8 GEMM come from (one call each, ncu counters, no
# replay of the full set): bash tools/probes/ncu_l2.sh. Shapes: qkv at M = 8192 (persistent_128x128) and N 5120 K 768 M 16384
# (persistent_128x128_epi7_1chain). Writes $OUT/ncu_l2_<shape>.csv and prints one table per shape (tools/probes/ncu_l2_table.py).
source scripts/gpu/env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
"$NCU" --query-metrics --chip gh100 > "$OUT/ncu_metric_names.txt" 2>&1
METRICS=$(python3 tools/probes/ncu_l2_table.py --metrics "$OUT/ncu_metric_names.txt")
echo "metrics: $METRICS" | cut -c1-300
for shape in "8192 6144 4096 persistent_128x128" "16384 5120 768 persistent_128x128_epi7_1chain"; do
  set -- $shape
  python3 tools/probes/ncu_compare.py $1 $2 $3 --configs $4 2>&1 | tail -3   # builds / loads, checks the results
  "$NCU" --clock-control none --profile-from-start off --metrics "$METRICS" --csv --page raw \
    python3 tools/probes/ncu_compare.py $1 $2 $3 --configs $4 --profile > "$OUT/ncu_l2_$2_$3_$1.csv" 2> "$OUT/ncu_l2_err.txt" \
    || tail -5 "$OUT/ncu_l2_err.txt"
  python3 tools/probes/ncu_l2_table.py "$OUT/ncu_l2_$2_$3_$1.csv" "M $1 N $2 K $3"
done
