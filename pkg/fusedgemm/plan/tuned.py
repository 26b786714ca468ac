"""Tuned plans: the fastest (tile config, split-K) measured for a (GPU, input kind, N, K, M bucket), where it beat
the heuristic. `python -m fusedgemm.bench gemm_a8 --tune FILE` times every plan per shape and merges such rows into
FILE; the package ships `tuned_plans.json`. plan_for takes an entry when the GPU's name, the kind, N and K match
exactly and M falls in the entry's bucket (M_bucket / 2 < M <= M_bucket); everything else keeps the heuristic
(sm90.py / cdna.py), which is the fallback, not a default to be overridden wholesale.
FUSEDGEMM_TUNED=0 ignores the table; FUSEDGEMM_PRINT_CONFIGS=1 says which of the two decided.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

TABLE_FILE = Path(__file__).with_name("tuned_plans.json")
_TABLE: dict | None = None  # (gpu, kind, N, K, M bucket) -> (config name, splits), loaded on first use


def m_bucket(m: int) -> int:
    """The smallest power of two >= m (1 for m <= 1): the M range an entry covers."""
    return 1 << max(0, m - 1).bit_length()


def read(path: Path) -> list[dict]:
    """The entries of a table file ([] when it does not exist)."""
    if not Path(path).exists():
        return []
    return json.loads(Path(path).read_text())["entries"]


def _key(e: dict) -> tuple:
    return e["gpu"], e["kind"], e["N"], e["K"], e["M_bucket"]


def _table() -> dict:
    global _TABLE
    if _TABLE is None:
        table = {}
        for e in read(TABLE_FILE):
            name, splits = e["plan"].split(":")
            table[_key(e)] = (name, int(splits))
        _TABLE = table
    return _TABLE


def lookup(gpu: str, kind: str, n: int, k: int, m: int) -> tuple[str, int] | None:
    """The tuned (config name, splits) for this GPU and problem, or None (then the heuristic decides)."""
    if os.environ.get("FUSEDGEMM_TUNED", "1") == "0":
        return None
    return _table().get((gpu, kind, n, k, m_bucket(m)))


def agreed(first: list[dict], second: list[dict]) -> list[dict]:
    """The entries two --tune runs agree on: the same key, the same winning plan over the same heuristic plan; each
    kept entry holds both runs' times as pairs. One run's 2% margin is about the bench's rep-to-rep noise, so the
    shipped table takes only what won twice."""
    again = {_key(e): e for e in second}
    out = []
    for e in first:
        f = again.get(_key(e))
        if f is not None and (f["plan"], f["heuristic"]) == (e["plan"], e["heuristic"]):
            out.append(dict(e, us=[e["us"], f["us"]], heuristic_us=[e["heuristic_us"], f["heuristic_us"]]))
    return out


def merge(path: Path, entries: list[dict]) -> int:
    """Write `entries` into the table file at `path`, replacing those with the same (gpu, kind, N, K, M_bucket);
    -> how many the file holds now. Entries are sorted so that a re-tune gives a readable diff."""
    by_key = {_key(e): e for e in read(path)}
    by_key.update({_key(e): e for e in entries})
    rows = sorted(by_key.values(), key=_key)
    about = ("Plans measured faster than the heuristic's choice (fusedgemm/plan/tuned.py): per GPU, input kind, N, K "
             "and M bucket (M_bucket / 2 < M <= M_bucket). Written by python -m fusedgemm.bench gemm_a8 --tune.")
    Path(path).write_text(json.dumps({"about": about, "entries": rows}, indent=1) + "\n")
    return len(rows)
