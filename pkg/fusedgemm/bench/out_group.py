"""python -m fusedgemm.bench out_group: gemm_a8(..., out_group=128) -- the output written as the next layer's 1x128
block-quantised fp8 input by the GEMM's own epilogue -- beside the same GEMM writing bf16 and beside the two-step
recipe (the GEMM, then fusedgemm.quantize_rows(y, "fp8", group=128)). A bias is fp32 (fp8 outputs take no bf16 bias).

Per LLM-grid row (fp8 x fp8, the epilogue preset, per-channel or DeepSeek block scales), kernel time from the
profiler (L2 flushed before each call, medians; bench/common.py kernel_us):
  fused      gemm_a8(..., out_group=128): codes [M, N] + scales [M, N / 128] (on sm_90a, calls with fewer 64 x 128
             tiles than half the SMs take two kernels, GEMM to fp32 + quantize_rows: out_groups.two_kernels)
  bf16       gemm_a8(..., out_dtype=bf16) as the plan runs it (what a caller without out_group gets)
  bf16 tile  the same on the fused call's tile config (tile_64x128 / tile_128x128: the epilogue's cost alone;
             per-channel scales only -- block-scaled calls take the block plan's configs)
  2-step     gemm_a8 to bf16, then quantize_rows(group=128) of it (the recipe users write today; its codes round
             y through bf16 first, so they differ from the fused ones in the last bit where it matters)
The issue's targets: fused <= 1.05x bf16, and 2-step >= 1.3x fused at M <= 1024. Before timing, each row checks the
fused codes and scales against quantize_rows of the same GEMM's fp32 output (scales to 1e-5; codes within one step)
and warns where they differ.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import torch

from .common import Timer, device_info, geomean, gpu_problem, kernel_us, print_table
from .gemm_a8 import load_grid

DEFAULT_M = (16, 256, 1024, 4096)


def _close(fused, ref) -> str | None:
    """Why the fused (codes, scales) are not quantize_rows' of the fp32 output, or None."""
    (c, s), (rc, rs) = fused, ref
    if not torch.allclose(s, rs, rtol=1e-5, atol=0):
        return f"scales differ by {(s / rs - 1).abs().max().item():.2e}"
    step = (c.float() - rc.float()).abs() / rc.float().abs().clamp(min=2.0 ** -6)
    differ = c.view(torch.uint8) != rc.view(torch.uint8)
    if differ.float().mean().item() > 0.01 or (step[differ] > 0.13).any().item():
        return f"{int(differ.sum())} codes differ"
    return None


def run(argv=None) -> int:
    import fusedgemm as fg
    from fusedgemm.out_groups import group_config, two_kernels
    from fusedgemm.plan import with_plan
    from fusedgemm.runtime.arch import device_arch

    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench out_group", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", choices=["channel", "block"], default="channel",
                   help="per-token x per-channel scales, or DeepSeek 1x128 / 128x128 block scales (default channel)")
    p.add_argument("--epilogue", default="bias_silu", choices=fg.EPILOGUES, help="the preset (default bias_silu)")
    p.add_argument("--shapes", help="shape grid JSON (default: the LLM grid shipped with the package)")
    p.add_argument("--only", nargs="+", help="shape names to run (default: all)")
    p.add_argument("--M", type=int, nargs="+", default=list(DEFAULT_M), help=f"M values (default {DEFAULT_M})")
    p.add_argument("--json", help="write the rows as JSON here")
    args = p.parse_args(argv)
    problem = gpu_problem("out_group")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    dev = torch.cuda.current_device()
    arch = device_arch(dev)
    fp8 = fg.FP8_DTYPE_FOR_ARCH[arch]
    _ms, shapes = load_grid(args.shapes)
    shapes = {k: v for k, v in shapes.items() if not args.only or k in args.only}
    timer = Timer()
    rows = []
    for name, s in shapes.items():
        for m in args.M:
            n, k = s["N"], s["K"]
            a = torch.randn(m, k, device="cuda").to(fp8)
            wq = fg.preshuffle(torch.randn(n, k, device="cuda").to(fp8))
            bias = torch.randn(n, device="cuda") if args.epilogue.startswith("bias") else None  # fp32: fp8 outputs
            if args.scales == "block":
                sa = torch.rand(m, math.ceil(k / 128), device="cuda") / math.sqrt(k)
                sb = torch.rand(math.ceil(n / 128), math.ceil(k / 128), device="cuda") + 0.5
            else:
                sa, sb = torch.rand(m, device="cuda") / math.sqrt(k), torch.rand(n, device="cuda") + 0.5

            def gemm(**kw):
                return fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue=args.epilogue, **kw)

            def fused():
                return gemm(out_group=128)

            def two_step():
                return fg.quantize_rows(gemm(out_dtype=torch.bfloat16), fp8, group=128)

            bad = _close(fused(), fg.quantize_rows(gemm(out_dtype=torch.float32), fp8, group=128))
            if bad:  # (the plan's fp32 call may take another tile: sums in another order)
                print(f"warning: {name} M={m}: the fused codes are not quantize_rows' of the fp32 output: {bad}",
                      file=sys.stderr)
            split = two_kernels(arch, False, m, n, dev)  # then "fused" is GEMM to fp32 + quantize_rows
            tile = "fp32+quantize" if split else group_config(False, arch, m, n, dev, args.scales == "block", k)
            row = dict(shape=name, M=m, N=n, K=k, tile=tile, fused_us=kernel_us(fused, timer),
                       bf16_us=kernel_us(lambda: gemm(out_dtype=torch.bfloat16), timer),
                       two_step_us=kernel_us(two_step, timer))
            if args.scales == "channel" and not split:
                row["tile_us"] = kernel_us(with_plan(lambda: gemm(out_dtype=torch.bfloat16), tile), timer)
                row["x_tile"] = row["fused_us"] / row["tile_us"]
            row["x_bf16"] = row["fused_us"] / row["bf16_us"]
            row["x_two_step"] = row["two_step_us"] / row["fused_us"]
            rows.append(row)
    print(f"gemm_a8 out_group=128, {args.scales} scales, {args.epilogue}, {device_info()}")
    print_table(rows, [("shape", "shape", "s"), ("M", "M", "d"), ("N", "N", "d"), ("K", "K", "d"),
                       ("tile", "fused tile", "s"), ("fused_us", "fused us", ".1f"), ("bf16_us", "bf16 us", ".1f"),
                       ("tile_us", "bf16 tile us", ".1f"), ("two_step_us", "2-step us", ".1f"),
                       ("x_bf16", "fused/bf16", ".2f"), ("x_tile", "fused/tile", ".2f"),
                       ("x_two_step", "2-step/fused", ".2f")])
    for band, sel in (("M<=1024", [r for r in rows if r["M"] <= 1024]), ("M>1024", [r for r in rows if r["M"] > 1024])):
        if sel:
            on_tile = [r["x_tile"] for r in sel if "x_tile" in r]  # the one-kernel rows
            print(f"geomean {band}: fused/bf16 {geomean(r['x_bf16'] for r in sel):.3f}  2-step/fused "
                  f"{geomean(r['x_two_step'] for r in sel):.2f}" + (
                      f"  fused/tile {geomean(on_tile):.3f}" if on_tile else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=device_info(), args=vars(args), rows=rows), f, indent=1)
    return 0
