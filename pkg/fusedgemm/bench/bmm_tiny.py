"""python -m fusedgemm.bench bmm_tiny: fusedgemm.bmm_tiny against torch.bmm with the memory floor."""
from __future__ import annotations

import argparse
import json

import torch

from .common import Timer, copy_bandwidth_gbs, device_info, geomean, print_table, progress

SHAPES = [(12, 12, 64), (12, 64, 12), (64, 64, 64), (16, 16, 16), (3, 7, 5)]
BATCHES = [1024, 16384]


def run(argv=None) -> int:
    import fusedgemm as fg

    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench bmm_tiny", description=__doc__)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--batches", type=int, nargs="+", default=BATCHES)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--flush", choices=["read", "write"], default="read",
                   help="how L2 is flushed before each timed run (see bench/common.py Timer)")
    p.add_argument("--json", help="write the rows as JSON here")
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    timer = Timer(reps=args.reps, flush=args.flush)
    bw = copy_bandwidth_gbs(timer)
    info = device_info()
    print(f"{info['gpu']}  torch {info['torch']}  copy bandwidth {bw:.0f} GB/s (read+write)  dtype {args.dtype}")
    rows = []
    cases = [(bt, s) for bt in args.batches for s in SHAPES]
    for batch, (m, n, k) in progress(cases, len(cases), "bmm_tiny"):
        a = torch.randn(batch, m, k, device="cuda", dtype=dtype)
        b = torch.randn(batch, k, n, device="cuda", dtype=dtype)
        ours = fg.bmm_tiny(a, b)
        ref = torch.bmm(a.double(), b.double())
        err = ((ours.double() - ref).norm() / ref.norm()).item()
        t_fg = timer(lambda: fg.bmm_tiny(a, b))
        t_torch = timer(lambda: torch.bmm(a, b))
        floor = (a.numel() + b.numel() + batch * m * n) * a.element_size() / (bw * 1e9) * 1e6
        rows.append(dict(batch=batch, m=m, n=n, k=k, fg_us=t_fg, torch_us=t_torch, floor_us=floor,
                         floor_ratio=t_fg / floor, speedup=t_torch / t_fg, rel_err=err))
    print_table(rows, [("batch", "batch", "d"), ("m", "m", "d"), ("n", "n", "d"), ("k", "k", "d"),
                       ("fg_us", "fusedgemm us", ".2f"), ("torch_us", "torch.bmm us", ".2f"),
                       ("floor_us", "floor us", ".2f"), ("floor_ratio", "x floor", ".2f"),
                       ("speedup", "speedup", ".2f"), ("rel_err", "rel err", ".1e")])
    print(f"geomean speedup over torch.bmm: {geomean(r['speedup'] for r in rows):.2f}x")
    for bt in args.batches:
        sel = [r for r in rows if r["batch"] == bt]
        print(f"  batch {bt}: geomean speedup {geomean(r['speedup'] for r in sel):.2f}x, worst x floor "
              f"{max(r['floor_ratio'] for r in sel):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "copy_gbs": bw, "rows": rows}, f, indent=1)
    return 0
