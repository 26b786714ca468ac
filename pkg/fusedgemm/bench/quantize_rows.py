"""python -m fusedgemm.bench quantize_rows: per-token quantization's kernel time beside its memory floor and the torch
chain users write today.

Per shape (M tokens x K): the kernel's time (profiler device time, L2 flushed, median), the floor = bytes moved
(M K in_bytes read + M K written + 4 M scales) / the device-to-device copy bandwidth measured in the same
process, and two baselines computing the same codes: the eager torch chain
    amax = x.abs().amax(-1).float(); scale = where(amax > 0, amax / qmax, 1); q = (x.float() * (1 / scale)[:, None])
           .clamp(-qmax, qmax).to(code)
(4-6 kernels and fp32 temporaries) and torch.compile of that chain. The codes of all three are checked equal
first (the chain is quantize_rows' rule, NaN / floor aside, on finite data).
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from .cli import add_dtype, torch_dtype
from .common import Timer, copy_bandwidth_gbs, device_info, gpu_problem, kernel_us, print_table

SHAPES = [(1, 4096), (16, 4096), (128, 4096), (1024, 4096), (4096, 4096), (16384, 4096), (1024, 8192),
          (4096, 8192), (1024, 14336), (4096, 14336), (256, 16384), (4096, 16384)]


def torch_chain(qdtype: torch.dtype, qmax: float):
    def run(x):
        amax = x.abs().amax(-1).float()
        scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
        q = (x.float() * (1.0 / scale)[:, None]).clamp(-qmax, qmax)
        return (q.round() if qdtype == torch.int8 else q).to(qdtype), scale
    return run


def run(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench quantize_rows", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype(p, "--dtype", ["bf16", "fp16", "fp32"], "bf16", "dtype of the activations x being quantized")
    add_dtype(p, "--code", ["fp8", "int8"], "fp8", "dtype of the codes (fp8: the device's e4m3 variant)")
    p.add_argument("--json", metavar="FILE", help="also write the rows here")
    args = p.parse_args(argv)
    problem = gpu_problem("quantize_rows")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import fusedgemm as fg
    from fusedgemm.quant import QMAX, resolve_dtype

    dtype = torch_dtype(args.dtype)
    qdtype = resolve_dtype(args.code, torch.device("cuda"))
    qmax = QMAX[qdtype]
    timer = Timer()
    bw = copy_bandwidth_gbs(timer)
    chain = torch_chain(qdtype, qmax)
    compiled = torch.compile(chain)
    rows = []
    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        q_fg, s_fg = fg.quantize_rows(x, qdtype)
        q_ch, s_ch = chain(x)
        if not (torch.equal(q_fg.view(torch.uint8), q_ch.view(torch.uint8)) and torch.equal(s_fg, s_ch)):
            print(f"warning: M={m} K={k}: the chain's codes differ from quantize_rows'", file=sys.stderr)
        compiled(x)
        nbytes = m * k * (x.element_size() + 1) + 4 * m
        t_fg = kernel_us(lambda: fg.quantize_rows(x, qdtype), timer)
        t_ch = kernel_us(lambda: chain(x), timer)
        t_co = kernel_us(lambda: compiled(x), timer)
        floor = nbytes / (bw * 1e3)  # us
        rows.append(dict(M=m, K=k, us=t_fg, floor_us=floor, of_floor=floor / t_fg, GBs=nbytes / t_fg / 1e3,
                         chain_us=t_ch, vs_chain=t_ch / t_fg, compiled_us=t_co, vs_compiled=t_co / t_fg))
    print(f"quantize_rows {args.dtype} -> {qdtype}, copy bandwidth {bw:.0f} GB/s, {device_info()}")
    print_table(rows, [("M", "M", "d"), ("K", "K", "d"), ("us", "kernel us", ".2f"), ("floor_us", "floor us", ".2f"),
                       ("of_floor", "floor/kernel", ".2f"), ("GBs", "GB/s", ".0f"), ("chain_us", "torch us", ".2f"),
                       ("vs_chain", "x torch", ".2f"), ("compiled_us", "compile us", ".2f"),
                       ("vs_compiled", "x compile", ".2f")])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=device_info(), dtype=args.dtype, code=str(qdtype), copy_gbs=bw, rows=rows), f,
                      indent=1)
    return 0

