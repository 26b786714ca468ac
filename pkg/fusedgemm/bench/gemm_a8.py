"""python -m fusedgemm.bench gemm_a8: fused 8-bit GEMM against the BLAS + epilogue paths, same process.

Baselines, fp8: (a) torch._scaled_mm (row-wise scales) + bias + activation, (b) _scaled_mm(bias=) +
activation, (c) _scaled_mm alone, (d) torch.compile of (a). int8: (a) torch._int_mm + scales + bias +
activation, (c) _int_mm alone, (d) torch.compile of (a). Floor = max(min bytes / copy bandwidth measured now,
flops / dense peak). Median of CUDA-event timings, L2 flushed before each run; ours and the baselines of a row
are timed rep by rep in one interleaved set (the same GPU clock for all).

--scales block (fp8): DeepSeek-style scale_a [M, K/128] and scale_b [N/128, K/128]; (a) and (c) are torch's
block-scaled _scaled_mm (torch_block_mm: cuBLAS, torch >= 2.9; empty ("-") where the installed torch refuses the
shape), (b) and (d) are not run, and (pc) is our own per-channel kernel on the same shape (x(pc) = its time / ours:
what block scaling costs).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F

from .cli import add_dtype, torch_dtype
from .common import (Timer, copy_bandwidth_gbs, device_info, geomean, gpu_problem, host_us_per_call, kernel_us,
                     print_table, progress, time_what_runs)
from ..gemm_a8 import plan_for, plans
from ..plan import choose_config, gpu_name, sm_count, with_plan
from ..plan import tuned as tuned_plans
from ..runtime import kernels
from .predicted_columns import PREDICT_COLUMNS, predict_problem, predicted_beside

# Dense 8-bit tensor-core peaks (TFLOP/s, datasheet) by arch.
PEAK_8BIT_TFLOPS = {"sm_90a": 1979.0, "gfx942": 2615.0, "gfx950": 4600.0}
ACTS = {"none": lambda x: x, "relu": torch.relu, "silu": F.silu, "gelu": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_erf": F.gelu}
BANDS = [("M<=64", lambda m: m <= 64), ("M=256..1024", lambda m: 256 <= m <= 1024), ("M>=4096", lambda m: m >= 4096)]


def load_grid(path: str | None) -> tuple[list[int], dict]:
    text = Path(path).read_text() if path else resources.files(__package__).joinpath("llm_shapes.json").read_text()
    grid = json.loads(text)
    return grid["M"], grid["shapes"]


def candidate_plans(arch: str, m: int, keep: tuple[str, ...] = ()) -> list[str]:
    """The plans --compare-plans / --tune time at M when none are listed: every plan of `arch`, except, on sm_90a,
    the decode tiles (at most 64 rows: swap_16x128, tile_64x128) above M = 128 and the portable mma.sync config (there
    only for forced_config and the tests: 5-7x slower than the wgmma tiles). Timing those at M = 8192 took most of
    a whole-grid --tune's time and they rarely win there. Likewise split-K above the heuristic's caps for the
    tiles of more than 64 rows: 2 from M = 128 (4 measured 10-35% slower than 2 at M = 128 and 256) and 1 from
    M = 4096 (every grid shape then has more tiles than SMs). The plans in `keep` (the heuristic's and the chosen
    one: fp8 takes tile_64x128 above M = 128 where tiles are few) are timed whatever these rules say, so --tune can
    compare against them."""
    configs = kernels.GEMM_CONFIGS
    out = []
    for c, s in plans(arch):
        cfg = configs[c]
        if f"{c}:{s}" not in keep:
            if arch == "sm_90a" and (not cfg.sm90 or (cfg.block_m <= 64 and m > 128)):
                continue
            if arch == "sm_90a" and cfg.block_m > 64 and s > (1 if m >= 4096 else 2 if m >= 128 else 8):
                continue
        out.append(f"{c}:{s}")
    return out


def tune_entries(rows: list[dict], gpu: str, kind: str, margin: float = 0.98) -> list[dict]:
    """Tuned-table entries (plan/tuned.py) of the rows whose fastest plan beat the heuristic's by the margin."""
    out = []
    for r in rows:
        times, heuristic = r.get("plans_us", {}), r.get("heuristic")
        if not times or heuristic not in times:
            continue
        best = min(times, key=times.get)
        if times[best] <= margin * times[heuristic]:
            out.append(dict(gpu=gpu, kind=kind, N=r["N"], K=r["K"], M_bucket=tuned_plans.m_bucket(r["M"]),
                            plan=best, us=round(times[best], 1), heuristic=heuristic,
                            heuristic_us=round(times[heuristic], 1)))
    return out


# --sweep: (N, K, M) off the LLM grid, spread over K 768-16384, N 1024-32768 and M 256-16384 (each K with two N
# and two M, shifted so every N and M value appears), plus the smallest and largest corners.
_SWEEP_K = (768, 1536, 3072, 5120, 8192, 16384)
_SWEEP_N = (1024, 2560, 5120, 12288, 32768)
_SWEEP_M = (256, 1024, 4096, 16384)
SWEEP_CASES = ([(_SWEEP_N[(i + t) % 5], k, _SWEEP_M[(i + t) % 4]) for i, k in enumerate(_SWEEP_K) for t in (0, 2)]
               + [(32768, 16384, 16384)])  # (1024, 768, 256) is already the first


def torch_block_mm(a, w, sa, sb, out_dtype=torch.bfloat16):
    """torch's block-scaled fp8 GEMM a @ w.T (cuBLAS on sm_90; torch >= 2.9: torch._scaled_mm / F.scaled_mm with 1x128
    and 128x128 scales), or None where the installed torch does not offer it for these inputs. Its layouts (torch
    2.11): scale_a [M, KB] outer-dim-major (strides (1, M)); scale_b [KB, NB] near-inner-dim-major (strides (1, KB
    rounded up to 4: 16-byte aligned)). The layouts are made here, outside any timing: -> a callable, or None."""
    kb, nb = sa.shape[1], sb.shape[0]
    sa_t = sa.t().contiguous().t()
    padded = torch.zeros(nb, -(-kb // 4) * 4, device=sb.device, dtype=sb.dtype)
    padded[:, :kb] = sb
    sb_t = padded[:, :kb].t()
    attempts = [lambda: torch._scaled_mm(a, w.t(), scale_a=sa_t, scale_b=sb_t, out_dtype=out_dtype)]
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        attempts.append(lambda: F.scaled_mm(a, w.t(), sa_t, F.ScalingType.BlockWise1x128, sb_t,
                                            F.ScalingType.BlockWise128x128, output_dtype=out_dtype))
    for attempt in attempts:
        try:
            attempt()
            return attempt
        except (RuntimeError, ValueError, TypeError, NotImplementedError, AttributeError):
            continue
    return None


def _block_baselines(a, w, bias, sa, sb, act_name, out_dtype):
    """--scales block: (a) torch's block-scaled GEMM + bias + activation, (c) it alone (absent where torch has none)."""
    act = ACTS[act_name]
    mm = torch_block_mm(a, w, sa, sb, out_dtype)
    if mm is None:
        return {"a": None, "c": None}

    def a_path():
        y = mm()
        return act(y + bias) if bias is not None else act(y)

    return {"a": a_path, "c": mm}


def _baselines(kind, a, w, bias, sa, sb, act_name, out_dtype, compile_it):
    act = ACTS[act_name]
    wt = w.T
    if kind == "fp8":
        sa2, sb2 = sa.reshape(-1, 1), sb.reshape(1, -1)

        def mm():
            return torch._scaled_mm(a, wt, scale_a=sa2, scale_b=sb2, out_dtype=out_dtype)

        def a_path():
            y = mm()
            return act(y + bias) if bias is not None else act(y)

        def b_path():
            return act(torch._scaled_mm(a, wt, scale_a=sa2, scale_b=sb2, bias=bias, out_dtype=out_dtype))

        paths = {"a": a_path, "b": b_path if bias is not None else None, "c": mm}
    else:
        def mm():
            return torch._int_mm(a, wt)

        def a_path():
            y = (mm().float() * sa[:, None] * sb[None, :]).to(out_dtype)
            return act(y + bias) if bias is not None else act(y)

        paths = {"a": a_path, "b": None, "c": mm}
    if compile_it:
        # A fresh dynamo cache per shape: closures share one code object, and after 8 shapes dynamo's
        # recompile limit would silently run (d) eagerly.
        torch._dynamo.reset()
        paths["d"] = torch.compile(a_path, dynamic=False)
    return paths


def run(argv=None) -> int:
    import fusedgemm as fg
    from fusedgemm.runtime.arch import device_arch

    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench gemm_a8", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype(p, "--dtype", ["fp8", "int8"], "fp8",
              "input dtype (fp8: the device's e4m3 variant, e4m3fn on sm_90a / gfx950, e4m3fnuz on gfx942)")
    p.add_argument("--scales", choices=["channel", "block"], default="channel",
                   help="per-token x per-channel scales, or (fp8) DeepSeek 1x128 / 128x128 block scales beside torch's "
                        "block-scaled GEMM and our per-channel kernel (default channel)")
    p.add_argument("--epilogue", default="bias_silu", choices=fg.EPILOGUES,
                   help="the fused epilogue preset; the baselines run the same epilogue as torch ops (default bias_silu)")
    add_dtype(p, "--out-dtype", ["bf16", "fp16"], "bf16", "output dtype")
    p.add_argument("--shapes", help="shape grid JSON (default: the LLM grid shipped with the package)")
    p.add_argument("--only", nargs="+", help="shape names to run (default: all)")
    p.add_argument("--M", type=int, nargs="+", help="M values (default: the grid's)")
    p.add_argument("--reps", type=int, default=30, help="timed runs per path and row, rep by rep; medians (default 30)")
    p.add_argument("--no-compile", action="store_true", help="skip baseline (d), torch.compile of (a)")
    p.add_argument("--flush", choices=["read", "write"], default="read",
                   help="how L2 is flushed before each timed run (see bench/common.py Timer)")
    p.add_argument("--compare-plans", nargs="*", metavar="CONFIG:SPLITS",
                   help="also time every (tile config, split-K) plan that can win at the row's M (not the "
                        "decode tiles above M = 128) per shape, or only those listed (config names as FUSEDGEMM_PRINT_CONFIGS=1 prints them, e.g. tile_128x128:2), "
                        "rep by rep, and report the fastest beside the heuristic's choice (for tuning the heuristic)")
    p.add_argument("--sweep", action="store_true",
                   help="instead of the grid, shapes off it: K 768-16384, N 1024-32768, M 256-16384 (SWEEP_CASES); "
                        "prints the worst rows against (c) and how many are below 0.95x")
    p.add_argument("--tune", metavar="FILE",
                   help="time every plan per row (as --compare-plans) and merge the plans that beat the heuristic's "
                        "choice by >= 2%% into FILE, for this GPU (the package ships fusedgemm/plan/tuned_plans.json)")
    p.add_argument("--predict", action="store_true",
                   help="AMD GPUs: beside each row the paper model's PREDICTED time of the config the plan ran "
                        "(plan/cdna_model.py) and measured / predicted")
    p.add_argument("--json", help="write rows and summary as JSON here")
    p.add_argument("--kernel-time", action="store_true",
                   help="also the profiler's kernel-only times of fusedgemm, (a) and (c) (no CUDA-event overhead; "
                        "(a) counts its kernels, not the gaps between them), and their ratios")
    p.add_argument("--plot", help="write a PNG: speedup over (a) vs M, one line per shape")
    args = p.parse_args(argv)
    problem = gpu_problem("gemm_a8")
    if problem:
        print(problem, file=sys.stderr)
        return 1

    arch = device_arch(torch.cuda.current_device())
    if args.predict and predict_problem(arch):
        print(predict_problem(arch), file=sys.stderr)
        return 1
    block = args.scales == "block"
    if block and (args.dtype != "fp8" or args.compare_plans is not None or args.tune or args.predict):
        print("--scales block: fp8 only, without --compare-plans / --tune / --predict", file=sys.stderr)
        return 2
    if args.tune and args.compare_plans is None:
        args.compare_plans = []  # every plan
    out_dtype = torch_dtype(args.out_dtype)
    in_dtype = torch.int8 if args.dtype == "int8" else fg.FP8_DTYPE_FOR_ARCH[arch]
    ms, shapes = load_grid(args.shapes)
    ms = args.M or ms
    shapes = {k: v for k, v in shapes.items() if not args.only or k in args.only}
    uses_bias = args.epilogue.startswith("bias")
    act_name = "none" if args.epilogue == "bias" else args.epilogue.replace("bias_", "")
    timer = Timer(reps=args.reps, flush=args.flush)
    bw = copy_bandwidth_gbs(timer)
    peak = PEAK_8BIT_TFLOPS[arch]
    info = device_info()
    print(f"{info['gpu']} ({arch})  torch {info['torch']}  copy {bw:.0f} GB/s  peak {args.dtype} {peak:.0f} "
          f"TFLOP/s (datasheet)  epilogue {args.epilogue}  out {args.out_dtype}")

    rows = []
    cases = [(name, s, m) for name, s in shapes.items() for m in ms]
    if args.sweep:
        cases = [(f"n{n}k{k}", {"N": n, "K": k}, m) for n, k, m in SWEEP_CASES]
    for name, s, m in progress(cases, len(cases), "gemm_a8"):
        n, k = s["N"], s["K"]
        if in_dtype == torch.int8:
            a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda")
            w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda")
        else:
            a = torch.randn(m, k, device="cuda").to(in_dtype)
            w = torch.randn(n, k, device="cuda").to(in_dtype)
        sa = torch.rand(m, device="cuda") / math.sqrt(k)
        sb = torch.rand(n, device="cuda")
        bias = torch.randn(n, device="cuda").to(out_dtype) if uses_bias else None
        wq = fg.preshuffle(w)
        out = torch.empty(m, n, dtype=out_dtype, device="cuda")

        def ours():
            return fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue=args.epilogue, out_dtype=out_dtype,
                              out=out)

        if block:
            sa_b = torch.rand(m, -(-k // 128), device="cuda") / math.sqrt(k)
            sb_b = torch.rand(-(-n // 128), -(-k // 128), device="cuda") + 0.5

            def ours_block():
                return fg.gemm_a8(a, wq, bias, scale_a=sa_b, scale_b=sb_b, epilogue=args.epilogue,
                                  out_dtype=out_dtype, out=out)

            paths = {"fg": ours_block, "pc": ours, **_block_baselines(a, w, bias, sa_b, sb_b, act_name, out_dtype)}
        else:
            paths = {"fg": ours,
                     **_baselines(args.dtype, a, w, bias, sa, sb, act_name, out_dtype, not args.no_compile)}
        times, errors = time_what_runs(timer, paths)  # ours and the baselines rep by rep (common.py says why)
        if "fg" in errors:
            raise errors["fg"]
        row = dict(shape=name, M=m, N=n, K=k, **{f"{key}_us": times.get(key) for key in paths})
        for key, exc in errors.items():  # a baseline the library cannot run for this shape (e.g. _int_mm M <= 16)
            row[f"{key}_error"] = str(exc).splitlines()[0][:120]
        if args.compare_plans is not None:
            cfg, splits = plan_for(m, n, k, torch.cuda.current_device(), in_kind=args.dtype)
            row["plan"] = f"{cfg.name}:{splits}"
            h_cfg, h_splits = choose_config(m, n, k, arch, sm_count(torch.cuda.current_device()), True, args.dtype)
            row["heuristic"] = f"{h_cfg.name}:{h_splits}"
            names = ([p for p in (f"{c}:{s}" for c, s in plans(arch)) if p in args.compare_plans] if args.compare_plans
                     else candidate_plans(arch, m, keep=(row["heuristic"], row["plan"])))
            # every plan in turn, rep by rep (Timer.interleaved), so the comparison sees one GPU clock
            plan_times = timer.interleaved([with_plan(ours, c, int(s)) for c, s in (p.split(":") for p in names)])
            row["plans_us"] = dict(zip(names, plan_times))
        if args.kernel_time:
            row["fg_kern_us"] = kernel_us(paths["fg"], timer)
            for key in ("a", "c", "pc"):
                if key in times:
                    row[f"{key}_kern_us"] = kernel_us(paths[key], timer)
                    row[f"kx_{key}"] = row[f"{key}_kern_us"] / row["fg_kern_us"]
        nbytes = m * k + n * k + m * n * out.element_size() + (n * bias.element_size() if uses_bias else 0) + 4 * (m + n)
        flops = 2.0 * m * n * k
        row["floor_us"] = max(nbytes / (bw * 1e9), flops / (peak * 1e12)) * 1e6
        row["pct_floor"] = 100.0 * row["floor_us"] / row["fg_us"]
        row["tflops"] = flops / (row["fg_us"] * 1e-6) / 1e12
        row["gbs"] = nbytes / (row["fg_us"] * 1e-6) / 1e9
        for key in ("a", "b", "c", "d", "pc"):
            t = row.get(f"{key}_us")
            row[f"x_{key}"] = t / row["fg_us"] if t else None
        if args.predict:
            cfg, _splits = plan_for(m, n, k, torch.cuda.current_device(), in_kind=args.dtype)
            row.update(predicted_beside(arch, args.dtype, cfg.name, m, n, k, row["fg_us"]))
        rows.append(row)
        del a, w, wq, out

    cols = [("shape", "shape", "s"), ("M", "M", "d"), ("N", "N", "d"), ("K", "K", "d"), ("fg_us", "fg us", ".1f"),
            ("a_us", "(a) us", ".1f"), ("b_us", "(b) us", ".1f"), ("c_us", "(c) us", ".1f"), ("d_us", "(d) us", ".1f"),
            ("floor_us", "floor us", ".1f"), ("pct_floor", "% floor", ".0f"), ("tflops", "TFLOP/s", ".0f"),
            ("gbs", "GB/s", ".0f"), ("x_a", "x(a)", ".2f"), ("x_b", "x(b)", ".2f"), ("x_c", "x(c)", ".2f"),
            ("x_d", "x(d)", ".2f")] + (PREDICT_COLUMNS if args.predict else [])
    if block:
        cols = [c for c in cols if c[0] not in ("b_us", "d_us", "x_b", "x_d")] + [("pc_us", "(pc) us", ".1f"),
                                                                                 ("x_pc", "x(pc)", ".2f")]
    print_table(rows, cols)
    if args.sweep:
        ranked = sorted((r for r in rows if r.get("x_c")), key=lambda r: r["x_c"])
        print(f"sweep: {sum(r['x_c'] < 0.95 for r in ranked)} of {len(ranked)} rows below 0.95x (c); worst: "
              + ", ".join(f"{r['shape']} M={r['M']} {r['x_c']:.2f}x" for r in ranked[:5]))
    if args.compare_plans is not None:
        for r in rows:
            best = min(r["plans_us"], key=r["plans_us"].get)
            r["best_plan"], r["best_plan_us"] = best, r["plans_us"][best]
            r["plan_rep_us"] = r["plans_us"].get(r["plan"])
        # "chosen us" is the row's own timing (the grid's fg us); "rep by rep" times the chosen plan among the others,
        # as "fastest us" is: compare those two (at the H100's power cap one plan measured 1695 us alone and 1547 rep
        # by rep, gate_up M = 8192).
        print_table(rows, [("shape", "shape", "s"), ("M", "M", "d"), ("plan", "chosen plan", "s"),
                           ("fg_us", "chosen us", ".1f"), ("plan_rep_us", "rep by rep", ".1f"),
                           ("best_plan", "fastest plan", "s"), ("best_plan_us", "fastest us", ".1f")])
        if args.compare_plans:  # a short list: every plan's time
            for r in rows:
                print(f"{r['shape']:>8} {r['M']:6d}  " + "  ".join(f"{k} {v:.1f}" for k, v in r["plans_us"].items()))
    if args.tune:
        entries = tune_entries(rows, gpu_name(torch.cuda.current_device()), args.dtype)
        total = tuned_plans.merge(Path(args.tune), entries)
        print(f"--tune: {len(entries)} of {len(rows)} rows beat the heuristic by >= 2%; {args.tune} holds {total}")
    if args.kernel_time:
        print("kernel time only (profiler; no event-pair overhead on either side):")
        print_table(rows, [("shape", "shape", "s"), ("M", "M", "d"), ("fg_kern_us", "fg kernel us", ".1f"),
                           ("a_kern_us", "(a) kernels us", ".1f"), ("c_kern_us", "(c) kernel us", ".1f"),
                           ("kx_a", "kx(a)", ".2f"), ("kx_c", "kx(c)", ".2f")]
                    + ([("pc_kern_us", "(pc) kernel us", ".1f"), ("kx_pc", "kx(pc)", ".2f")] if block else []))
    summary = {}
    for band, pred in BANDS:
        sel = [r for r in rows if pred(r["M"])]
        if sel:
            summary[band] = {f"x_{k}": geomean(r.get(f"x_{k}") for r in sel) for k in ("a", "b", "c", "d", "pc")}
            summary[band]["floor_ratio"] = geomean(r["fg_us"] / r["floor_us"] for r in sel)
            print(f"geomean {band:12}: " + "  ".join(f"x({k[2:]}) {v:.2f}" for k, v in summary[band].items()
                                                     if k.startswith("x_")) + f"  time/floor {summary[band]['floor_ratio']:.2f}")
            if args.kernel_time:
                summary[band].update({f"kx_{k}": geomean(r.get(f"kx_{k}") for r in sel) for k in ("a", "c", "pc")})
                print("  kernel time   : " + "  ".join(f"kx({k}) {summary[band][f'kx_{k}']:.2f}"
                                                       for k in ("a", "c", "pc")))

    # Host overhead: CPU time per eager call on a tiny problem.
    a1 = torch.randn(16, 256, device="cuda").to(in_dtype) if in_dtype != torch.int8 else \
        torch.randint(-8, 8, (32, 256), dtype=torch.int8, device="cuda")
    w1 = torch.randn(256, 256, device="cuda").to(in_dtype) if in_dtype != torch.int8 else \
        torch.randint(-8, 8, (256, 256), dtype=torch.int8, device="cuda")
    wq1 = fg.preshuffle(w1)
    sa1, sb1 = torch.rand(a1.shape[0], device="cuda"), torch.rand(256, device="cuda")
    b1 = torch.randn(256, device="cuda").to(out_dtype)
    xb, wb = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16), torch.randn(256, 256, device="cuda",
                                                                                   dtype=torch.bfloat16)
    host = {"fusedgemm.gemm_a8": host_us_per_call(lambda: fg.gemm_a8(a1, wq1, b1, scale_a=sa1, scale_b=sb1,
                                                                      epilogue="bias_silu")),
            "torch.mm": host_us_per_call(lambda: torch.mm(xb, wb))}
    if in_dtype != torch.int8:
        host["torch._scaled_mm"] = host_us_per_call(lambda: torch._scaled_mm(
            a1, w1.T, scale_a=sa1.reshape(-1, 1), scale_b=sb1.reshape(1, -1), out_dtype=torch.bfloat16))
    print("host us per eager call: " + "  ".join(f"{k} {v:.1f}" for k, v in host.items()))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "arch": arch, "copy_gbs": bw, "peak_tflops": peak, "args": vars(args),
                       "rows": rows, "summary": summary, "host_us": host}, f, indent=1)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 5))
        for name in shapes:
            sel = [r for r in rows if r["shape"] == name]
            ax.plot([r["M"] for r in sel], [r["x_a"] or float("nan") for r in sel], marker="o", label=name)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("speedup over (a) BLAS + epilogue")
        ax.set_title(f"gemm_a8 {args.dtype} {args.epilogue} on {info['gpu']}")
        ax.legend()
        fig.savefig(args.plot, dpi=120, bbox_inches="tight")
    return 0
