"""python -m fusedgemm.bench matmul_plans: matmul_fused under every (tile config, split-K) plan of sm_90a on a few
shapes, beside torch.mm, rep by rep in one process: which plan suits bf16 / fp16 / tf32 (whose K blocks hold half /
a quarter of fp8's values). --clocks S also runs each plan and torch.mm back to back for S seconds while nvidia-smi
reads the SM clock and board power (read only, never set) and prints cycles and energy per call.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from .cli import add_dtype, torch_dtype
from .common import Timer, gpu_problem, sustained
from ..plan import choose_config, plans, with_plan
from ..runtime.kernels import GEMM_CONFIGS

GRID = {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
        "moe_dn": (7168, 2048)}


def run(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench matmul_plans", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype(p, "--dtype", ["bf16", "fp16", "tf32"], "bf16", "input dtype (tf32: fp32 inputs, precision='tf32')")
    p.add_argument("--shapes", default="qkv:1,qkv:64,o_proj:256,qkv:1024,qkv:4096,down:4096,moe_dn:8192",
                   help="comma-separated NAME:M, NAME one of " + ", ".join(GRID) + " (default: %(default)s)")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON here")
    p.add_argument("--small-tiles-up-to", type=int, default=64,
                   help="also time the tiles of <= 64 rows for M up to this (default 64: decode sizes only)")
    p.add_argument("--configs", default=None,
                   help="comma-separated config names to time (default: every plan; the names are those "
                        "FUSEDGEMM_PRINT_CONFIGS=1 prints)")
    p.add_argument("--act", default="silu", help="the epilogue's activation (default silu; 'none' and --no-bias: "
                                                  "the identity epilogue, a plain store)")
    p.add_argument("--no-bias", action="store_true", help="no bias operand (with --act none: a plain store)")
    p.add_argument("--reps", type=int, default=15, help="timed calls of each plan, rep by rep (default 15)")
    p.add_argument("--clocks", type=float, default=0.0,
                   help="seconds of back-to-back runs per plan (and torch.mm) while nvidia-smi reads the SM clock "
                        "and board power; prints cycles and joules per call (clocks are only read, never set)")
    args = p.parse_args(argv)
    problem = gpu_problem("matmul_plans")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import fusedgemm as fg

    dt = torch_dtype(args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = True
    timer = Timer(reps=args.reps)
    rows = []
    for item in args.shapes.split(","):
        name, m = item.split(":")
        m = int(m)
        n, k = GRID[name]
        x = torch.randn(m, k, device="cuda").to(dt)
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(dt)
        b = torch.randn(n, device="cuda").to(dt)
        cfg, s = choose_config(m, n, k, "sm_90a", torch.cuda.get_device_properties(0).multi_processor_count, True,
                               args.dtype)
        line = {"shape": name, "M": m, "N": n, "K": k, "heuristic": f"{cfg.name}:{s}"}
        runs = {}
        for cname, splits in plans("sm_90a", args.dtype):
            if args.configs and cname not in args.configs.split(","):
                continue
            tile = GEMM_CONFIGS[cname]
            if m > args.small_tiles_up_to and tile.block_m <= 64:
                continue
            # decode: the swapped 16-row tile up to M = 32, the 64-row tiles, and (M > 16) the persistent tiles
            # without B pairs, as the 8-bit kinds' decode plan takes where split-K leaves few K blocks a CTA
            # (plan/sm90.py)
            decode = tile.swap_ab or tile.block_m <= 64 or (m > 16 and tile.persistent and not tile.pair_b)
            if m <= 64 and not decode or tile.swap_ab and m > 32:
                continue
            bias = None if args.no_bias else b
            run = with_plan(lambda: fg.matmul_fused(x, w, bias, activation=args.act, precision="tf32"), cname, splits)
            try:
                run()
            except Exception as e:  # noqa: BLE001
                line[f"{cname}:{splits}"] = f"error {type(e).__name__}"
                continue
            runs[f"{cname}:{splits}"] = run
        # torch.mm and every plan in turn, rep by rep (Timer.interleaved): one GPU clock for all
        blas = lambda: torch.mm(x, w.t())  # noqa: E731
        t_mm, *times = timer.interleaved([blas, *runs.values()])
        line["torch.mm"] = t_mm
        line.update(zip(runs, times))
        rows.append(line)
        plan_times = {k_: v for k_, v in line.items() if ":" in k_ and k_ != "heuristic" and isinstance(v, float)}
        best = min(plan_times, key=plan_times.get)
        print(f"{name:8s} M={m:5d} torch.mm {t_mm:8.1f} us | heuristic {line['heuristic']:12s} "
              f"{line.get(line['heuristic'], float('nan')):8.1f} | best {best:12s} {plan_times[best]:8.1f} "
              f"({2 * m * n * k / plan_times[best] / 1e6:.0f} TFLOP/s) | " +
              " ".join(f"{k_}={v:.0f}" for k_, v in sorted(plan_times.items(), key=lambda kv: kv[1])[:6]), flush=True)
        if args.clocks:
            print(f"  {name} M={m}: cuBLAS kernel {blas_kernel(blas)}")
            for label, fn in [("torch.mm", blas), *runs.items()]:
                us, mhz, watts = sustained(fn, args.clocks)
                line[f"clocks {label}"] = [us, mhz, watts]
                print(f"  {label:14s} back to back {us:8.1f} us  {mhz:6.0f} MHz  {watts:5.0f} W  "
                      f"{us * mhz / 1e3:7.1f}k cycles  {us * watts / 1e3:6.1f} mJ/call  "
                      f"{2 * m * n * k / us / 1e6:5.0f} TFLOP/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def blas_kernel(fn) -> str:
    """The name of the longest GPU kernel one call of fn launches (torch's profiler)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    return max(events, key=lambda e: e.device_time_total).name if events else "?"

