#!/usr/bin/env bash
# Run on the GPU machine from the repository root : decode (M = 1) kernel times of an earlier tree
# ($BEFORE, e.g. `git archive` of a commit unpacked into an ignored folder and carried) against this one, one GPU, one
# session. First scripts/gpu/core.sh with BEFORE (both sm_90a units built, this tree's smoke check and GPU tests: the
# files given, else its default); then tools/probes/decode_fixed_cost.py $DECODE_ARGS (e.g. "--M 64 --plans tile_64x128:4"; both
# trees' script must take them) of each tree in turn, ROUNDS (2) times, into
# $OUT/decode_ab.txt; then, if .probe holds this tree's probe cubins (`python3 tools/probes/probe_sm90.py --build-only .probe
# --configs swap_16x128 --variants default`), the decode tiles' per-CTA timeline into $OUT/probe.txt. Fits last.
source scripts/gpu/env.sh
BEFORE=$(cd "$BEFORE" && pwd) bash scripts/gpu/core.sh "$@" || exit 1
for r in $(seq 1 "${ROUNDS:-2}"); do
  for tree in before after; do
    dir=$PWD cache=$FUSEDGEMM_CACHE_DIR
    [ $tree = before ] && dir=$BEFORE cache=/tmp/fgcache_before
    echo "== $tree, round $r" >> "$OUT/decode_ab.txt"
    ( cd "$dir" && PYTHONPATH=$dir/pkg FUSEDGEMM_CACHE_DIR=$cache timeout 120 python3 tools/probes/decode_fixed_cost.py ${DECODE_ARGS:-} ) 2>&1 \
      | grep -v -i warn >> "$OUT/decode_ab.txt"
  done
done
if [ -f .probe/probe_stamps.cubin ]; then
  timeout 120 python3 tools/probes/probe_sm90.py --cubins .probe --configs swap_16x128 --variants default --stamps --cases "M=1" \
    > "$OUT/probe.txt" 2>&1
  sed -n '/per-CTA timeline/,$p' "$OUT/probe.txt"
fi
grep -E "^==|fixed" "$OUT/decode_ab.txt"
