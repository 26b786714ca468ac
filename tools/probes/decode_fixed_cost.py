"""Decode time against weight bytes: fixed cost and streaming rate of gemm_a8 and of a plain read.

Run on a GPU machine: python3 tools/probes/decode_fixed_cost.py [--M 1] [--plans swap_16x128:1 ...] [--out FILE]. For N in --N and
K in --K it takes the kernel time (profiler, L2 flushed before each call; bench/common.kernel_us) of
  - gemm_a8 fp8 bias_silu at M = --M on the heuristic's plan and on each of --plans forced (default: swap_16x128 at
    split-K 1, 2 and 4; for M 17-64, e.g. tile_64x128:1 tile_64x128:2 tile_64x128:4);
  - a plain read of the same weight bytes (a float32 sum over them: one pass, nothing written);
  - a device-to-device copy of them (bytes counted twice: read and written);
then fits time = fixed + bytes / rate by least squares over K for each. A decode row's time over its floor is
(fixed + bytes / rate) / (bytes / copy bandwidth): the fixed term is what keeps small weights (o_proj, moe_dn)
far from the floor even when the rate is the copy bandwidth's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pkg"))

import fusedgemm as fg  # noqa: E402
from fusedgemm.bench.common import Timer, copy_bandwidth_gbs, kernel_us  # noqa: E402
from fusedgemm.plan import with_plan  # noqa: E402


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept us, slope us per MB) of (MB, us) points."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--N", type=int, nargs="+", default=[4096, 6144])
    p.add_argument("--K", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--M", type=int, default=1, help="activation rows (default 1)")
    p.add_argument("--plans", nargs="*", default=["swap_16x128:1", "swap_16x128:2", "swap_16x128:4"],
                   help="CONFIG:SPLITS plans to force beside the heuristic's")
    p.add_argument("--out", help="write the points and fits as JSON here")
    args = p.parse_args()
    timer = Timer(reps=20)
    bw = copy_bandwidth_gbs(timer)
    variants = {"heuristic": None}
    for plan in args.plans:
        name, splits = plan.split(":")
        variants[plan] = (name, int(splits))
    points: dict[str, list[tuple[float, float]]] = {name: [] for name in (*variants, "plain read", "copy")}
    print(f"{torch.cuda.get_device_name()}  copy {bw:.0f} GB/s  M = {args.M}  (kernel time, us)")
    print(f"{'N':>6} {'K':>6} {'MB':>7} {'floor':>7} " + " ".join(f"{n:>11}" for n in points))
    for n in args.N:
        for k in args.K:
            x = torch.randn(args.M, k, device="cuda").to(torch.float8_e4m3fn)
            w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
            wq = fg.preshuffle(w)
            sa, sb = torch.rand(args.M, device="cuda"), torch.rand(n, device="cuda")
            bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(args.M, n, device="cuda", dtype=torch.bfloat16)

            def ours():
                return fg.gemm_a8(x, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)

            def plain_read():
                return torch.sum(w.view(torch.float32))

            dst = torch.empty_like(w)

            def copy():
                return dst.copy_(w)

            mb = n * k / 1e6
            row = {}
            for name, plan in variants.items():
                fn = ours if plan is None else with_plan(ours, *plan)
                row[name] = kernel_us(fn, timer)
            row["plain read"] = kernel_us(plain_read, timer)
            row["copy"] = kernel_us(copy, timer)
            for name, us in row.items():
                points[name].append((2 * mb if name == "copy" else mb, us))
            print(f"{n:6d} {k:6d} {mb:7.1f} {mb * 1e6 / (bw * 1e3):7.1f} "
                  + " ".join(f"{row[name]:11.1f}" for name in points))
    print("fit over all points: time = fixed + MB / rate")
    fits = {}
    for name, pts in points.items():
        fixed, slope = fit(pts)
        fits[name] = {"fixed_us": fixed, "rate_gbs": 1e3 / slope}
        print(f"  {name:>11}: fixed {fixed:5.1f} us, rate {1e3 / slope:6.0f} GB/s ({1e3 / slope / bw * 100:.0f}% of copy)")
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_gbs": bw,
                                              "points": points, "fits": fits}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
