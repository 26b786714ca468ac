#!/usr/bin/env python3
"""Append benchmark results to the results file of their GPU kind: docs/results/<gpu>.jsonl, one JSON object a line
{date, commit, gpu, command, source, shape, M, N, K, metric, value}.

    python3 scripts/gpu/results.py append --command "python -m fusedgemm.bench gemm_a8 --no-compile" OUT.txt [OUT.json]

Reads what `python -m fusedgemm.bench gemm_a8 / matmul_fused / bmm_tiny` print (the table under a header line
`shape M N K ...` or `batch m n k ...`) or write with --json, and appends one line per (row, metric): the times in
microseconds (`ours_us`, the baselines `a_us`, `b_us`, ... as each bench's --help names them, `floor_us`) and
TFLOP/s. The GPU kind (h100, h200, mi300x, ...) comes from the output's first line or --gpu; the date from a --json
file, else today; the commit from `git rev-parse --short HEAD`; each unless given. Raw logs the docs cite stay beside it (docs/results/README.md).
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
# A column is kept when its normalised name is a time or a rate; ratios (x_a, ...) follow from the times.
KEEP = re.compile(r"^(ours_us|[a-f]_us|floor_us|copy_us|torch_us|tflops|[a-z_]*kern(el)?_us)$")


def gpu_kind(name: str) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; 'NVIDIA H200' -> 'h200'; 'AMD Instinct MI300X' -> 'mi300x'."""
    m = re.search(r"\b(H100|H200|H20|B200|GB200|MI300X|MI325X|MI350X|MI355X)\b", name, re.I)
    return m.group(1).lower() if m else None


def metric_name(col: str) -> str:
    c = col.strip().lower().replace("tflop/s", "tflops")
    c = re.sub(r"^(fg|ours) ", "ours ", c)
    c = re.sub(r"^\(([a-f])\) ", r"\1 ", c)
    c = re.sub(r"^x\(([a-f])\)$", r"x_\1", c)
    c = c.replace("fg_", "ours_").replace("fg ", "ours ")
    return re.sub(r"[^a-z0-9]+", "_", c).strip("_")


def _number(tok):
    try:
        v = float(tok)
    except (TypeError, ValueError):
        return None
    return v if v == v else None  # NaN is no value


def rows_from_text(text: str):
    """(row dict of metric -> value, shape fields) for each table row under a `shape M N K` / `batch m n k` header."""
    cols = None
    for line in text.splitlines():
        stripped = line.strip()
        head = re.split(r"\s{2,}", stripped)
        if len(head) > 4 and [h.lower() for h in head[:4]] in (["shape", "m", "n", "k"], ["batch", "m", "n", "k"]):
            cols = head
            continue
        if cols is None:
            continue
        toks = stripped.split()
        if len(toks) != len(cols) or _number(toks[1]) is None:
            if not stripped or not toks[0][:1].isalnum():
                cols = None if not stripped else cols
            continue
        shape = toks[0] if cols[0].lower() == "shape" else f"batch {toks[0]}"
        yield shape, int(float(toks[1])), int(float(toks[2])), int(float(toks[3])), {
            metric_name(c): _number(t) for c, t in zip(cols[4:], toks[4:])}


def rows_from_json(data):
    rows = data.get("rows", []) if isinstance(data, dict) else data
    for r in rows:
        if not isinstance(r, dict):
            continue
        if "shape" in r and "M" in r:
            shape, m, n, k = r["shape"], r["M"], r.get("N"), r.get("K")
        elif "batch" in r:
            shape, m, n, k = f"batch {r['batch']}", r.get("m"), r.get("n"), r.get("k")
        elif "model" in r:
            shape, m, n, k = f"{r['model']} {r.get('shape', '')}".strip(), None, None, None
            yield shape, m, n, k, {f"{key}_us": v for key, v in r.items() if key in
                                   ("eager", "fuse", "compile", "fg_backend", "fp8", "mlp_eager", "mlp_fuse",
                                    "mlp_fp8") and isinstance(v, (int, float))}
            continue
        else:
            continue
        yield shape, m, n, k, {metric_name(key): v for key, v in r.items() if isinstance(v, (int, float))
                               and not isinstance(v, bool) and key not in ("M", "N", "K", "m", "n", "k", "batch")}


def command_from(text: str, data) -> str | None:
    """The bench command that printed `text` (or wrote `data`), from its header / recorded args."""
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    if isinstance(data, dict) and isinstance(data.get("args"), dict):
        a = data["args"]
        sub = "matmul_fused" if "layout" in a or "activation" in a else "gemm_a8"
        flags = [f"--{k.replace('_', '-')} {short.get(v, v)}" for k, v in a.items()
                 if k in ("dtype", "epilogue", "activation", "layout", "out_dtype") and v is not None]
        flags += [f"--{k.replace('_', '-')}" for k, v in a.items()
                  if k in ("sweep", "kernel_time", "no_compile") and v is True]
        return f"python -m fusedgemm.bench {sub} {' '.join(flags)}".strip()
    if isinstance(data, dict) and data.get("rows") and "batch" in data["rows"][0]:
        return "python -m fusedgemm.bench bmm_tiny"
    if isinstance(data, dict) and data.get("rows") and "model" in data["rows"][0]:
        return "python -m fusedgemm.bench models"
    extra = (" --sweep" if re.search(r"^sweep:", text, re.M) else "") + \
            (" --kernel-time" if "kernel time only" in text else "")
    first = "\n".join(text.splitlines()[:3])
    m = re.search(r"peak (fp8|int8) .*epilogue (\w+)\s+out (\w+)", first)
    if m:
        return f"python -m fusedgemm.bench gemm_a8 --dtype {m.group(1)} --epilogue {m.group(2)} " \
               f"--out-dtype {short.get(m.group(3), m.group(3))}{extra}"
    m = re.search(r"y = (\w+)\(.*dtype (\w+)\s+layout (\w+)", first.replace("\n", " "))
    if m:
        return f"python -m fusedgemm.bench matmul_fused --dtype {m.group(2)} --activation {m.group(1)} " \
               f"--layout {m.group(3)}{extra}"
    if re.search(r"batch\s+m\s+n\s+k", text):
        return "python -m fusedgemm.bench bmm_tiny"
    return None


def records(path: Path, date: str | None, commit: str | None, command: str | None, gpu: str | None):
    text = path.read_text(errors="replace")
    data = None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return []
    dev = data.get("device") if isinstance(data, dict) else None
    gpu = gpu or gpu_kind(dev.get("gpu", "") if isinstance(dev, dict) else text.splitlines()[0] if text else "")
    if isinstance(dev, dict) and not date and dev.get("date"):
        date = dev["date"][:10]
    date = date or datetime.date.today().isoformat()
    rows = rows_from_json(data) if data is not None else rows_from_text(text)
    command = command or command_from(text, data)
    out = []
    for shape, m, n, k, metrics in rows:
        for metric, value in metrics.items():
            if value is None or not KEEP.match(metric) and not metric.endswith("_us"):
                continue
            out.append(dict(date=date, commit=commit, gpu=gpu, command=command, source=path.name, shape=shape, M=m,
                            N=n, K=k, metric=metric, value=round(float(value), 4)))
    return out


def append(recs, results_dir: Path = RESULTS) -> dict:
    counts = {}
    for r in recs:
        if not r["gpu"]:
            raise SystemExit(f"{r['source']}: no GPU name found; pass --gpu")
        counts[r["gpu"]] = counts.get(r["gpu"], 0) + 1
    for gpu in counts:
        with open(results_dir / f"{gpu}.jsonl", "a") as f:
            for r in recs:
                if r["gpu"] == gpu:
                    f.write(json.dumps(r, separators=(",", ":")) + "\n")
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("append", help="append the rows of bench outputs (text or --json files)")
    a.add_argument("files", nargs="+", type=Path, help="what a bench printed, or its --json file")
    a.add_argument("--command", help="the command that produced them (default: read from the output's header)")
    a.add_argument("--gpu", help="GPU kind, e.g. h200 (default: from the output's first line)")
    a.add_argument("--date", help="YYYY-MM-DD (default: the date a --json file records, else today)")
    a.add_argument("--commit", help="the commit measured (default: git rev-parse --short HEAD)")
    a.add_argument("--into", type=Path, default=RESULTS, help="the results folder (default docs/results)")
    args = p.parse_args(argv)
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True).stdout.strip() or None
    recs = [r for f in args.files for r in records(f, args.date, commit, args.command, args.gpu)]
    if not recs:
        print("no table rows found", file=sys.stderr)
        return 1
    for gpu, n in append(recs, args.into).items():
        print(f"{n} lines appended to {args.into / (gpu + '.jsonl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
