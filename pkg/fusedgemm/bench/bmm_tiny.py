"""python -m fusedgemm.bench bmm_tiny: fusedgemm.bmm_tiny against torch.bmm with the memory floor."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys

import torch

from .cli import add_dtype, torch_dtype
from .common import (Timer, copy_bandwidth_gbs, device_info, geomean, gpu_problem, host_us_per_call, kernel_us,
                     print_table, progress)

SHAPES = [(12, 12, 64), (12, 64, 12), (64, 64, 64), (16, 16, 16), (3, 7, 5)]
BATCHES = [1024, 16384]


def _parse_knobs(text: str) -> dict:
    """'r=2,persistent=0' -> {'r': 2, 'persistent': False}"""
    knobs = {}
    for item in text.split(","):
        key, val = item.split("=")
        knobs[key] = bool(int(val)) if key in ("persistent", "async_copy", "fixed_tx") else int(val)
    return knobs


def _resident_blocks(plan: dict):
    """Blocks of this plan the driver keeps resident per multiprocessor (NVIDIA; None elsewhere)."""
    import ctypes

    from fusedgemm.runtime import kernels
    from fusedgemm.runtime.launch import module_for

    try:
        func = module_for("bmm_tiny", 0).kernel(plan["name"], kernels.BMM_TINY)._func
        n = ctypes.c_int(0)
        ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(n), ctypes.c_void_p(getattr(func, "value", func)), plan["threads"],
            ctypes.c_size_t(plan["smem"]))
        return n.value
    except Exception:  # noqa: BLE001 - informational only
        return None


@contextlib.contextmanager
def _fp32_matmul():
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def run(argv=None) -> int:
    import fusedgemm as fg
    from fusedgemm.reference import rel_error
    from fusedgemm.tiny_bmm import launch_bmm_tiny, plan_for

    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench bmm_tiny", description=__doc__)
    add_dtype(p, "--dtype", ["fp32", "bf16", "fp16"], "fp32", "input and output dtype of a and b")
    p.add_argument("--batches", type=int, nargs="+", default=BATCHES,
                   help="batch sizes to time (default: " + " ".join(map(str, BATCHES)) + ")")
    p.add_argument("--shapes", nargs="+", metavar="MxNxK", help="default: " + " ".join(
        "x".join(map(str, s)) for s in SHAPES))
    p.add_argument("--reps", type=int, default=100, help="timed runs per row; the median is reported (default 100)")
    p.add_argument("--flush", choices=["read", "write"], default="read",
                   help="how L2 is flushed before each timed run (see bench/common.py Timer)")
    p.add_argument("--json", help="write the rows as JSON here")
    p.add_argument("--no-kernel-time", action="store_true",
                   help="skip the profiler's kernel-only times (columns 'kernel us', beside the event times)")
    p.add_argument("--variants", nargs="*", default=[],
                   help="plan knobs to time as well, e.g. async_copy=0 r=2 rn=4 stages=2 elems=1,threads=128 "
                        "(see plan_bmm_tiny)")
    args = p.parse_args(argv)
    problem = gpu_problem("bmm_tiny")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    dtype = torch_dtype(args.dtype)
    timer = Timer(reps=args.reps, flush=args.flush)
    bw = copy_bandwidth_gbs(timer)
    info = device_info()
    print(f"{info['gpu']}  torch {info['torch']}  copy bandwidth {bw:.0f} GB/s (read+write)  dtype {args.dtype}")
    if not args.no_kernel_time:  # what the event pair itself costs: an empty-sized kernel
        tiny = torch.zeros(1, device="cuda")
        print(f"timer fixed cost: a 4-byte fill takes {timer(lambda: tiny.fill_(1.0)):.2f} us by events, "
              f"{kernel_us(lambda: tiny.fill_(1.0), timer):.2f} us of kernel time")
    rows = []
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else SHAPES
    cases = [(bt, s) for bt in args.batches for s in shapes]
    for batch, (m, n, k) in progress(cases, len(cases), "bmm_tiny"):
        a = torch.randn(batch, m, k, device="cuda", dtype=dtype)
        b = torch.randn(batch, k, n, device="cuda", dtype=dtype)
        ours = fg.bmm_tiny(a, b)
        ref = torch.bmm(a.double(), b.double())
        err = rel_error(ours, ref)
        with _fp32_matmul():  # torch.bmm's own error, TF32 off (the precision fusedgemm matches)
            err_torch = rel_error(torch.bmm(a, b), ref)
        t_fg = timer(lambda: fg.bmm_tiny(a, b))
        with _fp32_matmul():
            t_torch = timer(lambda: torch.bmm(a, b))
        nbytes = (a.numel() + b.numel() + batch * m * n) * a.element_size()
        floor = nbytes / (bw * 1e9) * 1e6
        # A device copy moving the same bytes (half read, half written): what a memory-bound kernel of this
        # size costs by the same timer, launch and DRAM latency included -- a practical floor.
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        t_copy = timer(lambda: dst.copy_(src))
        rows.append(dict(batch=batch, m=m, n=n, k=k, fg_us=t_fg, torch_us=t_torch, floor_us=floor,
                         floor_ratio=t_fg / floor, speedup=t_torch / t_fg, rel_err=err, torch_rel_err=err_torch,
                         copy_us=t_copy, copy_ratio=t_fg / t_copy,
                         plan=plan_for(a, b)[0]))
        if not args.no_kernel_time:
            with _fp32_matmul():
                k_fg, k_torch = kernel_us(lambda: fg.bmm_tiny(a, b), timer), kernel_us(lambda: torch.bmm(a, b), timer)
            rows[-1].update(fg_kernel_us=k_fg, torch_kernel_us=k_torch, kernel_speedup=k_torch / k_fg,
                            kernel_floor_ratio=k_fg / floor, copy_kernel_us=kernel_us(lambda: dst.copy_(src), timer))
        for v in args.variants:
            knobs = _parse_knobs(v)
            out = torch.empty_like(ours)
            try:
                launch_bmm_tiny(a, b, out, **knobs)
                ok = rel_error(out, ref) <= 1e-4 if dtype == torch.float32 else True
                rows[-1][v] = timer(lambda: launch_bmm_tiny(a, b, out, **knobs)) if ok else float("nan")
            except ValueError:  # the variant does not fit this shape
                rows[-1][v] = float("nan")
    print_table(rows, [("batch", "batch", "d"), ("m", "m", "d"), ("n", "n", "d"), ("k", "k", "d"),
                       ("fg_us", "fusedgemm us", ".2f"), ("torch_us", "torch.bmm us", ".2f"),
                       ("floor_us", "floor us", ".2f"), ("floor_ratio", "x floor", ".2f"),
                       ("copy_us", "copy us", ".2f"), ("copy_ratio", "x copy", ".2f"),
                       ("speedup", "speedup", ".2f"), ("rel_err", "rel err", ".1e"),
                       ("torch_rel_err", "torch rel err", ".1e")])
    print(f"geomean speedup over torch.bmm: {geomean(r['speedup'] for r in rows):.2f}x (if every row took the "
          f"time of its same-bytes copy: {geomean(r['torch_us'] / r['copy_us'] for r in rows):.2f}x)")
    if not args.no_kernel_time:
        print("kernel time only (profiler; no event-pair overhead on either side):")
        print_table(rows, [("batch", "batch", "d"), ("m", "m", "d"), ("n", "n", "d"), ("k", "k", "d"),
                           ("fg_kernel_us", "fusedgemm kernel us", ".2f"),
                           ("torch_kernel_us", "torch.bmm kernel us", ".2f"),
                           ("copy_kernel_us", "copy kernel us", ".2f"), ("floor_us", "floor us", ".2f"),
                           ("kernel_floor_ratio", "x floor", ".2f"), ("kernel_speedup", "speedup", ".2f")])
        print(f"geomean kernel-time speedup over torch.bmm: {geomean(r['kernel_speedup'] for r in rows):.2f}x")
    if args.variants:
        print_table(rows, [("batch", "batch", "d"), ("m", "m", "d"), ("n", "n", "d"), ("k", "k", "d"),
                           ("fg_us", "default us", ".2f")] + [(v, v + " us", ".2f") for v in args.variants])
        for v in args.variants:
            print(f"  variant {v}: geomean speedup {geomean(r['torch_us'] / r[v] for r in rows):.2f}x")
        for r in rows:
            print(f"  plan {r['batch']} {r['m']}x{r['n']}x{r['k']}: " +
                  " ".join(f"{key}={val}" for key, val in r["plan"].items())
                  + f" resident/SM={_resident_blocks(r['plan'])}")
    for bt in args.batches:
        sel = [r for r in rows if r["batch"] == bt]
        print(f"  batch {bt}: geomean speedup {geomean(r['speedup'] for r in sel):.2f}x, worst x floor "
              f"{max(r['floor_ratio'] for r in sel):.2f}")
    a, b = torch.randn(1024, 12, 64, device="cuda", dtype=dtype), torch.randn(1024, 64, 12, device="cuda", dtype=dtype)
    host_fg, host_torch = host_us_per_call(lambda: fg.bmm_tiny(a, b)), host_us_per_call(lambda: torch.bmm(a, b))
    print(f"  host us per eager call (1024 x 12x12x64): fusedgemm.bmm_tiny {host_fg:.1f}, torch.bmm {host_torch:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "copy_gbs": bw, "rows": rows}, f, indent=1)
    return 0
