"""Merge into the shipped tuned table (fusedgemm/plan/tuned_plans.json) the entries that two `--tune` runs agree on.

    python3 scripts/gpu/merge_tuned.py RUN1.json RUN2.json [RUN1b.json RUN2b.json ...] [--into FILE]

Each pair is the --tune output of two runs of the same rows (e.g. scripts/gpu/tables.sh twice, OUT=/tmp/o1 and /tmp/o2):
an entry is kept when both runs found the same plan faster than the same heuristic plan by the 2% margin.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "pkg"))
from fusedgemm.plan import tuned  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="pairs of --tune files: run 1, run 2, ...")
    p.add_argument("--into", type=Path, default=tuned.TABLE_FILE)
    args = p.parse_args()
    if len(args.runs) % 2:
        p.error("the --tune files come in pairs (run 1, run 2)")
    kept = []
    for first, second in zip(args.runs[::2], args.runs[1::2]):
        kept += tuned.agreed(tuned.read(first), tuned.read(second))
    for e in kept:
        print(f"{e['gpu']} {e['kind']} N {e['N']} K {e['K']} M <= {e['M_bucket']}: {e['plan']} {e['us']} us "
              f"against {e['heuristic']} {e['heuristic_us']}")
    print(f"{len(kept)} entries agreed; {args.into} holds {tuned.merge(args.into, kept)}")


if __name__ == "__main__":
    main()
