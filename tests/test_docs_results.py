"""docs/results stays an index, not a heap: one JSON-lines file per GPU kind with the documented fields, every raw
output listed in docs/results/README.md (and every listed one present), and scripts/gpu/results.py reads what the
benches print."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
FIELDS = {"date", "commit", "gpu", "command", "source", "shape", "M", "N", "K", "metric", "value"}


def results_module():
    spec = importlib.util.spec_from_file_location("gpu_results", ROOT / "scripts" / "gpu" / "results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.jsonl")), ids=lambda p: p.name)
def test_results_files_have_the_documented_fields(path):
    lines = path.read_text().splitlines()
    assert lines
    for i, line in enumerate(lines, 1):
        row = json.loads(line)
        assert set(row) == FIELDS, f"{path.name}:{i}"
        assert row["gpu"] == path.stem and re.fullmatch(r"\d{4}-\d\d-\d\d", row["date"]), f"{path.name}:{i}"
        assert isinstance(row["value"], (int, float)) and row["metric"], f"{path.name}:{i}"


def test_every_raw_output_is_indexed_and_every_indexed_one_exists():
    index = (RESULTS / "README.md").read_text()
    listed = set(re.findall(r"`(h\d{3}_[\w.-]+\.(?:txt|log|json))`", index))
    present = {p.name for p in RESULTS.iterdir() if p.suffix in (".txt", ".log", ".json")}
    assert present == listed, f"not indexed: {present - listed}; indexed but absent: {listed - present}"


def test_results_script_reads_a_bench_table(tmp_path):
    mod = results_module()
    out = tmp_path / "bench.txt"
    out.write_text(
        "NVIDIA H200 (sm_90a)  torch 2.11.0+cu130  copy 4270 GB/s  peak fp8 1979 TFLOP/s (datasheet)  epilogue "
        "bias_silu  out bfloat16\n"
        "  shape     M      N      K   fg us  (a) us  (b) us  (c) us  (d) us  floor us  % floor  TFLOP/s  GB/s  x(a)\n"
        "    qkv     1   6144   4096    13.1    27.3    25.3    21.9       -       5.9       45        4  1939  2.08\n"
        "\ngeomean M<=64       : x(a) 1.85\n")
    recs = mod.records(out, None, "abc1234", None, None)
    got = {r["metric"]: r["value"] for r in recs}
    assert got == {"ours_us": 13.1, "a_us": 27.3, "b_us": 25.3, "c_us": 21.9, "floor_us": 5.9, "tflops": 4.0}
    r = recs[0]
    assert (r["gpu"], r["shape"], r["M"], r["N"], r["K"], r["commit"]) == ("h200", "qkv", 1, 6144, 4096, "abc1234")
    assert r["command"] == "python -m fusedgemm.bench gemm_a8 --dtype fp8 --epilogue bias_silu --out-dtype bf16"
    counts = mod.append(recs, tmp_path)
    assert counts == {"h200": 6} and len((tmp_path / "h200.jsonl").read_text().splitlines()) == 6
