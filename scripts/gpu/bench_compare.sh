#!/usr/bin/env bash
# Run on the GPU machine from the repository root: the gemm_a8 bench of an earlier tree ($BEFORE, e.g. a
# `git archive` of the commit to compare with) and of this one, in one session on one GPU, alternating
# before / after (ROUNDS times). Build both first (BEFORE=... scripts/gpu/core.sh, same FUSEDGEMM_CACHE_DIR).
# Extra arguments go to both benches. Logs and JSON under $OUT; the geomean lines of each run last.
set -u -o pipefail
OUT=${OUT:-device-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEDGEMM_CACHE_DIR=${FUSEDGEMM_CACHE_DIR:-/tmp/fgcache}
export FUSEDGEMM_NVCC=${FUSEDGEMM_NVCC:-$(command -v nvcc)}
for r in $(seq 1 "${ROUNDS:-1}"); do
  ( cd "$BEFORE" && PYTHONPATH=$PWD/pkg FUSEDGEMM_CACHE_DIR=/tmp/fgcache_before python3 -m fusedgemm.bench gemm_a8 \
      --json "$OUT/bench_before_$r.json" "$@" ) > "$OUT/bench_before_$r.txt" 2>&1
  PYTHONPATH=$PWD/pkg python3 -m fusedgemm.bench gemm_a8 --json "$OUT/bench_after_$r.json" "$@" \
      > "$OUT/bench_after_$r.txt" 2>&1
done
for f in "$OUT"/bench_before_*.txt "$OUT"/bench_after_*.txt; do echo "== $f"; grep -E "geomean|host us" "$f"; done
