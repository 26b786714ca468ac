"""python -m fusedgemm.bench matmul_fused: y = act(x @ w.T [+ beta * c] + bias) in one kernel, against the BLAS
paths users run today, all timed in this process.

ours  fusedgemm.matmul_fused(x, w, bias=b, activation=ACT[, c=c, beta=BETA])
(a)   torch.mm(x, w.T) alone: the GEMM with no epilogue at all ("the epilogue is free" reference)
(b)   F.linear(x, w, b) [+ beta * c] then the activation as a separate op (what nn.Linear + act runs)
(c)   torch.addmm(b, x, w.T) then the activation (with --beta: addmm(c, x, w.T, beta=BETA) + b, then act)
(d)   torch._addmm_activation(b, x, w.T, use_gelu=True): cuBLASLt's fused bias + GELU (tanh) epilogue; only for
      --activation gelu / gelu_erf without --beta (n/a otherwise)
(e)   torch.compile of (b) (a fresh dynamo cache per shape; skip with --no-compile)
(f)   quack-kernels' gemm_act (fused where quack has the activation, else its GEMM + bias [+ c] then the
      activation), where `import quack` works

floor = max(bytes / copy bandwidth measured now, flops / dense peak); ours/floor is how far from it ours is.
Times: medians of CUDA-event pairs with L2 flushed before each run; --kernel-time adds the profiler's
kernel-only times (no ~3 us event-pair overhead: that matters at small M). Each row is checked before timing:
ours vs the float64 value of the same expression (fusedgemm.epilogue's oracle) on up to 128 rows of the output.

Columns: median us of ours and of (a)..(f) ('-': n/a or failed); floor us; ours/floor; TFLOP/s of ours;
x(p) = (p) us / ours us (> 1: ours is faster); rel err = ||ours - ref|| / ||ref||, (b) rel err = the same for
(b); check = ok, FAIL (rel err above the dtype's tolerance, or NaN) or ERROR (ours raised). Then geomeans per
M band and the targets, met or missed. Exit status 1 when a row is FAIL or ERROR.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from .cli import add_dtype
from .common import (Timer, copy_bandwidth_gbs, device_info, error_line, geomean, gpu_problem, host_us_interleaved,
                     kernel_us, print_table, progress, time_what_runs)
from .gemm_a8 import ACTS, BANDS, load_grid
from .predicted_columns import PREDICT_COLUMNS, predict_problem, predicted_beside
from ..plan import plan_for
from ..runtime.arch import device_arch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
# Dense tensor-core peaks (TFLOP/s, datasheet): (substring of the device name, bf16/fp16, tf32); first match wins.
# None: no datasheet number known here (the floor then counts bytes only unless --peak is given).
PEAKS = [("H100 PCIe", 756.0, 378.0), ("H100 NVL", 835.0, 418.0), ("H100", 989.0, 494.0),
         ("H200 NVL", 835.0, 418.0), ("H200", 989.0, 494.0), ("MI300X", 1307.0, 654.0), ("MI325X", 1307.0, 654.0),
         ("MI355X", 2500.0, None), ("MI350X", 2300.0, None)]
# Norm-wise relative error allowed against the float64 value: 2x the unit roundoff of what limits accuracy --
# the bf16 / fp16 rounding of the output (inputs are exact in the reference), or tf32's rounding of both inputs
# (2 x 2^-11 each) for fp32 inputs.
TOLERANCE = {"bf16": 2 * 2.0 ** -8, "fp16": 2 * 2.0 ** -11, "tf32": 2 * 2.0 ** -10}
SQUARE = [1024, 2048, 4096, 8192, 16384]
PATHS = ("a", "b", "c", "d", "e", "f")
CHECK_ROWS = 128  # output rows compared with the float64 value (evenly spaced, first and last included)
# Targets: (label, key, ">=" or "<=", threshold, bands it applies to (None: every band), bf16 only).
TARGETS = [("ours >= 1.00x torch.mm (a)", "x_a", ">=", 1.0, None, False),
           ("ours >= 1.15x F.linear + act (b)", "x_b", ">=", 1.15, None, False),
           ("ours >= 780 TFLOP/s at M >= 4096 (bf16, set for H100)", "tflops", ">=", 780.0, ("M>=4096",), True),
           ("ours <= 1.25x floor at M <= 64", "floor_ratio", "<=", 1.25, ("M<=64",), False)]


def eager_act(name: str):
    """The torch op of an epilogue unary op: F.silu for silu, tanh GELU for gelu, torch.<name> for the rest."""
    return ACTS.get(name) or getattr(torch, name)


def peak_tflops(gpu_name: str, dtype: str) -> float | None:
    for key, half, tf32 in PEAKS:
        if key in gpu_name:
            return tf32 if dtype == "tf32" else half
    return None


def reference_expr(act: str, beta: float | None):
    """The benchmarked epilogue as a fusedgemm.epilogue expression (its float64 evaluator is the oracle)."""
    import fusedgemm.epilogue as E

    y = E.acc
    if beta is not None:
        y = y + E.aux("c") * beta
    y = y + E.n_vec("bias")
    return y if act == "none" else E.unary(act, y)


def check_rows(m: int, limit: int = CHECK_ROWS) -> torch.Tensor:
    return torch.linspace(0, m - 1, steps=min(m, limit)).round().long().unique()


def within(err: float, tol: float) -> bool:
    return err <= tol  # False for NaN: a NaN error is a failure


def _baselines(x, wt, b, c, beta, act_name, compile_it, quack_gemm_act):
    """The baseline callables by path letter; None where a path does not apply. wt is the weight as [K, N]."""
    act = eager_act(act_name)

    def mm():
        return torch.mm(x, wt)

    def linear_act():
        y = F.linear(x, wt.t(), b)
        return act(y if c is None else torch.add(y, c, alpha=beta))

    def addmm_act():
        if c is None:
            return act(torch.addmm(b, x, wt))
        return act(torch.addmm(c, x, wt, beta=beta) + b)

    paths = {"a": mm, "b": linear_act, "c": addmm_act, "d": None, "e": None, "f": None}
    if act_name in ("gelu", "gelu_erf") and c is None:
        paths["d"] = lambda: torch._addmm_activation(b, x, wt, use_gelu=True)
    if compile_it:
        # A fresh dynamo cache per shape: closures share one code object, and past the recompile limit dynamo
        # would silently run (e) eagerly.
        torch._dynamo.reset()
        paths["e"] = torch.compile(linear_act, dynamic=False)
    if quack_gemm_act is not None:
        paths["f"] = _quack_path(quack_gemm_act, x, wt, b, c, beta, act_name, act)
    return paths


QUACK_ACTS = {"none": None, "relu": "relu", "gelu": "gelu_tanh_approx"}  # quack's names for our activations


def _quack_path(gemm_act, x, wt, b, c, beta, act_name, act):
    """quack's fused GEMM + activation where it has ours, else its GEMM (+ bias, + c) then the torch activation.
    quack adds C with beta 1 only: other betas scale c first (an extra op, as a user would have to)."""
    c_in = None if c is None else (c if beta == 1.0 else c * beta)
    if act_name in QUACK_ACTS:
        return lambda: gemm_act(x, wt, C=c_in, bias=b, activation=QUACK_ACTS[act_name], store_preact=False)[1]
    return lambda: act(gemm_act(x, wt, C=c_in, bias=b, activation=None, store_preact=False)[1])


def _import_quack():
    """-> (quack's gemm_act or None, one line on what was found)."""
    try:
        from quack.gemm_interface import gemm_act
    except Exception as exc:  # noqa: BLE001 - an optional peer: any import failure means absent
        return None, f"(f) quack-kernels absent ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})"
    import quack

    return gemm_act, f"(f) quack-kernels {getattr(quack, '__version__', '?')}"


def _cases(args, grid_ms, grid_shapes):
    """(shape name, M, N, K) of every row: the LLM grid (x its M values), then the square shapes."""
    cases = [(name, m, s["N"], s["K"]) for name, s in grid_shapes.items() for m in (args.M or grid_ms)]
    cases += [(f"sq{n}", n, n, n) for n in (args.square or [])]
    return [cs for cs in cases if not args.only or cs[0] in args.only]


def measure_row(fg, timer, args, name, m, n, k, bw, peak, quack_gemm_act) -> dict:
    dtype = DTYPES[args.dtype]
    row = dict(shape=name, M=m, N=n, K=k)
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(dtype)  # acc ~ N(0, 1): the activation's curved part
    b = torch.randn(n, device="cuda").to(dtype)
    c = torch.randn(m, n, device="cuda").to(dtype) if args.beta is not None else None
    w_ours = w if args.layout == "nk" else w.t().contiguous()  # [N, K] or [K, N] in memory
    wt = w.t() if args.layout == "nk" else w_ours  # the same memory seen as [K, N], for the baselines
    kwargs = dict(bias=b, layout=args.layout, activation=args.activation)
    if c is not None:
        kwargs.update(c=c, beta=args.beta)
    if args.dtype == "tf32":
        kwargs["precision"] = "tf32"

    def ours():
        return fg.matmul_fused(x, w_ours, **kwargs)

    # Correctness first: ours (and (b), for scale) against the float64 value of the same expression.
    rows_idx = check_rows(m)
    try:
        y = ours()
        if tuple(y.shape) != (m, n):
            raise ValueError(f"output shape {tuple(y.shape)}, expected {(m, n)}")
    except Exception as exc:  # noqa: BLE001 - report the row, go on with the next
        row.update(check="ERROR", error=error_line(exc))
        return row
    from fusedgemm.reference import rel_error
    import fusedgemm.epilogue as E

    acc = x[rows_idx].double() @ wt.double()
    operands = {"bias": b} if c is None else {"bias": b, "c": c[rows_idx]}
    ref = E.evaluate(reference_expr(args.activation, args.beta), acc, operands)
    paths = _baselines(x, wt, b, c, args.beta, args.activation, not args.no_compile, quack_gemm_act)
    row["rel_err"] = rel_error(y[rows_idx], ref)
    row["torch_rel_err"] = rel_error(paths["b"]()[rows_idx], ref)
    row["check"] = "ok" if within(row["rel_err"], TOLERANCE[args.dtype]) else "FAIL"
    del y, acc, ref

    timed = {"fg": ours, **paths}
    times, errors = time_what_runs(timer, timed)  # ours and the baselines rep by rep (common.py says why)
    row.update((f"{key}_us", t) for key, t in times.items())
    row.update((f"{key}_error", error_line(exc)) for key, exc in errors.items())  # say so in the JSON
    if args.kernel_time:
        for key in times:
            row[f"{key}_kus"] = kernel_us(timed[key], timer)
    nbytes = (m * k + n * k + m * n + n + (m * n if c is not None else 0)) * x.element_size()
    flops = 2.0 * m * n * k
    row["floor_us"] = max(nbytes / (bw * 1e9), flops / (peak * 1e12) if peak else 0.0) * 1e6
    for t in ("", "k"):  # event times, kernel times
        fg_t = row.get(f"fg_{t}us")
        if not fg_t:
            continue
        row[f"{t}tflops"] = flops / (fg_t * 1e-6) / 1e12
        row[f"{t}floor_ratio"] = fg_t / row["floor_us"]
        for p in PATHS:
            other = row.get(f"{p}_{t}us")
            row[f"{t}x_{p}"] = other / fg_t if other else None
    return row


def _predicted(m: int, n: int, k: int, args, measured_us: float) -> dict:
    """--predict: the paper model's time of the config the plan runs for this row (AMD GPUs)."""
    dev = torch.cuda.current_device()
    cfg, _splits = plan_for(m, n, k, dev, in_kind=args.dtype)
    return predicted_beside(device_arch(dev), args.dtype, cfg.name, m, n, k, measured_us)


def summarize(rows: list[dict], t: str = "") -> dict:
    """Per M band: geomeans of the speedups x_(a..f), of ours' TFLOP/s and of ours/floor (t="k": kernel times)."""
    summary = {}
    for band, pred in BANDS:
        sel = [r for r in rows if pred(r["M"]) and r.get(f"fg_{t}us")]
        if sel:
            means = {key: geomean(r.get(f"{t}{key}") for r in sel)
                     for key in (*(f"x_{p}" for p in PATHS), "tflops", "floor_ratio")}
            summary[band] = {key: v if v == v else None for key, v in means.items()}  # NaN (no row): None
            summary[band]["rows"] = len(sel)
    return summary


def evaluate_targets(summary: dict, dtype: str) -> list[dict]:
    """Each target per band it covers: the band's geomean, met or missed (n/a where the band has no rows)."""
    out = []
    for label, key, op, threshold, bands, bf16_only in TARGETS:
        for band in bands or [b for b, _ in BANDS]:
            value = summary.get(band, {}).get(key)
            if (bf16_only and dtype != "bf16") or value is None:
                status = "n/a"
            else:
                status = "met" if (value >= threshold if op == ">=" else value <= threshold) else "missed"
            out.append(dict(target=label, band=band, value=value, status=status))
    return out


def print_summary(summary: dict, targets: list[dict], what: str):
    print(f"geomeans per M band ({what}):")
    for band, s in summary.items():
        print(f"  {band:12} ({s['rows']:2d} rows): "
              + "  ".join(f"x({p}) {s[f'x_{p}']:.2f}" for p in PATHS if s[f"x_{p}"] is not None)
              + f"  ours {s['tflops']:.0f} TFLOP/s  ours/floor {s['floor_ratio']:.2f}")
    print(f"targets ({what}):")
    for t in targets:
        value = "-" if t["value"] is None else f"{t['value']:.2f}"
        print(f"  {t['target']:55} {t['band']:12} {value:>8}  {t['status']}")


def plot(path: str, rows: list[dict], title: str) -> str:
    """Speedups over (b) and (a) vs M, one line per shape (square shapes as one line); '' or why not."""
    try:
        import matplotlib
    except ImportError:
        return f"--plot {path}: matplotlib absent, no plot written"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {}
    for r in rows:
        series.setdefault("square" if r["shape"].startswith("sq") else r["shape"], []).append(r)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    for ax, key, what in zip(axes, ("x_b", "x_a"), ("(b) F.linear + act", "(a) torch.mm alone")):
        for name, sel in series.items():
            ax.plot([r["M"] for r in sel], [r.get(key) or float("nan") for r in sel], marker="o", label=name)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (tokens; square shapes: M = N = K)")
        ax.set_ylabel(f"speedup of ours over {what}")
        ax.legend()
    fig.suptitle(title)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return ""


def _parser():
    from fusedgemm.epilogue.ir import UNARY

    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench matmul_fused", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype(p, "--dtype", list(DTYPES), "bf16",
              "input dtype; tf32: fp32 inputs, precision='tf32' for ours and TF32 on for the baselines")
    p.add_argument("--activation", choices=["none", *UNARY], default="silu",
                   help="the fused activation after bias (default silu)")
    p.add_argument("--beta", type=float, nargs="?", const=1.0, default=None, metavar="BETA",
                   help="add a residual: y = act(x @ w.T + BETA * c + bias), c [M, N] (BETA 1.0 if not given)")
    p.add_argument("--layout", choices=["nk", "kn"], default="nk",
                   help="how ours gets the weight: nk = [N, K] (nn.Linear), kn = [K, N]; baselines read the same "
                        "memory")
    p.add_argument("--shapes", help="shape grid JSON (default: the LLM grid shipped with the package)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="shape names to run (grid names, or sqN for --square)")
    p.add_argument("--M", type=int, nargs="+", help="M values for the grid shapes (default: the grid's)")
    p.add_argument("--square", type=int, nargs="*", metavar="S",
                   help="add square shapes M = N = K = S (no values: " + " ".join(map(str, SQUARE)) + ")")
    p.add_argument("--peak", type=float, metavar="TFLOPS",
                   help="dense tensor-core peak for the floor (default: the datasheet number for this GPU's name)")
    p.add_argument("--reps", type=int, default=30, help="timed runs per path and row, rep by rep; medians (default 30)")
    p.add_argument("--flush", choices=["read", "write"], default="read",
                   help="how L2 is flushed before each timed run (see bench/common.py Timer)")
    p.add_argument("--no-compile", action="store_true", help="skip baseline (e), torch.compile of (b)")
    p.add_argument("--kernel-time", action="store_true",
                   help="also the profiler's kernel-only times of ours and every baseline (a multi-kernel path "
                        "counts its kernels, not the gaps between them); targets are then judged on these too")
    p.add_argument("--predict", action="store_true",
                   help="AMD GPUs: beside each row the paper model's PREDICTED time of the config the plan ran "
                        "(plan/cdna_model.py) and measured / predicted")
    p.add_argument("--json", metavar="FILE", help="write device, rows, summaries and targets as JSON here")
    p.add_argument("--plot", metavar="FILE", help="write a PNG: speedup over (b) and over (a) vs M, per shape")
    return p


def run(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.square == []:
        args.square = SQUARE
    problem = gpu_problem("matmul_fused")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import fusedgemm as fg

    if args.predict:
        problem = predict_problem(device_arch(torch.cuda.current_device()))
        if problem:
            print(problem, file=sys.stderr)
            return 1

    if not hasattr(fg, "matmul_fused"):
        print(f"fusedgemm.bench matmul_fused: this fusedgemm ({fg.__file__}) has no matmul_fused", file=sys.stderr)
        return 1
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32  # the baselines' fp32 GEMMs in TF32 only for --dtype tf32
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    try:
        return _run(fg, args)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32


def _run(fg, args) -> int:
    grid_ms, grid_shapes = load_grid(args.shapes)
    cases = _cases(args, grid_ms, grid_shapes)
    if not cases:
        names = [*grid_shapes, *(f"sq{n}" for n in args.square or [])]
        print(f"fusedgemm.bench matmul_fused: no shape selected by --only {' '.join(args.only)} (shapes: "
              f"{', '.join(names)})", file=sys.stderr)
        return 2
    timer = Timer(reps=args.reps, flush=args.flush)
    bw = copy_bandwidth_gbs(timer)
    info = device_info()
    peak = args.peak or peak_tflops(info["gpu"], args.dtype)
    peak_src = "--peak" if args.peak else ("datasheet" if peak else "unknown for this GPU: floor is bytes only")
    quack_gemm_act, quack_line = _import_quack()
    print(f"{info['gpu']} ({info['sms']} SMs)  torch {info['torch']}  copy {bw:.0f} GB/s  peak {args.dtype} "
          f"{f'{peak:.0f} TFLOP/s' if peak else '-'} ({peak_src})")
    print(f"y = {reference_expr(args.activation, args.beta)}, acc = x @ w.T  dtype {args.dtype}  layout {args.layout}  "
          f"tolerance {TOLERANCE[args.dtype]:.1e} (rel. error vs float64)  flush {args.flush}")
    d_line = ("(d) torch._addmm_activation: cuBLASLt bias + GELU (tanh)"
              + (" -- an approximation of gelu_erf" if args.activation == "gelu_erf" else "")
              if args.activation in ("gelu", "gelu_erf") and args.beta is None else
              f"(d) n/a: torch._addmm_activation fuses bias + GELU only, here {args.activation}"
              + (" with a residual" if args.beta is not None else ""))
    print(d_line)
    print(quack_line)

    rows = []
    for name, m, n, k in progress(cases, len(cases), "matmul_fused"):
        rows.append(measure_row(fg, timer, args, name, m, n, k, bw, peak, quack_gemm_act))
        if args.predict and rows[-1].get("fg_us"):
            rows[-1].update(_predicted(m, n, k, args, rows[-1]["fg_us"]))
        if rows[-1]["check"] == "ERROR":
            print(f"{name} M={m}: ours raised {rows[-1]['error']}", file=sys.stderr)
        torch.cuda.empty_cache()

    ok_rows = [r for r in rows if r["check"] == "ok"]  # a wrong or failed row counts in no geomean or target
    cols = [("shape", "shape", "s"), ("M", "M", "d"), ("N", "N", "d"), ("K", "K", "d"), ("fg_us", "ours us", ".1f")]
    cols += [(f"{p}_us", f"({p}) us", ".1f") for p in PATHS]
    cols += [("floor_us", "floor us", ".1f"), ("floor_ratio", "ours/floor", ".2f"), ("tflops", "TFLOP/s", ".0f")]
    cols += [(f"x_{p}", f"x({p})", ".2f") for p in PATHS]
    cols += [("rel_err", "rel err", ".1e"), ("torch_rel_err", "(b) rel err", ".1e"), ("check", "check", "s")]
    if args.predict:
        cols += PREDICT_COLUMNS
    print("event times (median us, CUDA events, L2 flushed); x(p) = (p) time / ours time:")
    print_table(rows, cols)
    failed = [r for r in rows if r["check"] != "ok"]
    if failed:
        print(f"{len(failed)} row(s) FAIL or ERROR, left out of the geomeans, targets and plot: "
              + ", ".join(f"{r['shape']} M={r['M']}" for r in failed))
    summaries = {"events": summarize(ok_rows)}
    targets = {"events": evaluate_targets(summaries["events"], args.dtype)}
    print_summary(summaries["events"], targets["events"], "event times")
    if args.kernel_time:
        print("kernel times only (profiler; no event-pair overhead on either side):")
        print_table(rows, [("shape", "shape", "s"), ("M", "M", "d"), ("fg_kus", "ours us", ".1f")]
                    + [(f"{p}_kus", f"({p}) us", ".1f") for p in PATHS]
                    + [("kfloor_ratio", "ours/floor", ".2f"), ("ktflops", "TFLOP/s", ".0f")]
                    + [(f"kx_{p}", f"x({p})", ".2f") for p in PATHS])
        summaries["kernel"] = summarize(ok_rows, "k")
        targets["kernel"] = evaluate_targets(summaries["kernel"], args.dtype)
        print_summary(summaries["kernel"], targets["kernel"], "kernel times")
    errors = sorted({(p, r[f"{p}_error"]) for r in rows for p in PATHS if f"{p}_error" in r})
    for p, err in errors:
        print(f"  ({p}) failed on some rows: {err}")

    # Host overhead: CPU time per eager call on a problem too small to queue up.
    dtype = DTYPES[args.dtype]
    xs, ws, bs = (torch.randn(*s, device="cuda").to(dtype) for s in ((16, 256), (256, 256), (256,)))
    host = {}
    precision = "tf32" if args.dtype == "tf32" else None
    fns = {"fusedgemm.matmul_fused": lambda: fg.matmul_fused(xs, ws, bias=bs, activation=args.activation,
                                                             precision=precision),
           "F.linear + act": lambda: eager_act(args.activation)(F.linear(xs, ws, bs)),
           "torch.mm": lambda: torch.mm(xs, ws.t())}
    try:
        host = host_us_interleaved(fns)  # batches interleaved: one slow phase of the machine hits all alike
    except Exception as exc:  # noqa: BLE001 - informational only
        print(f"host time: {error_line(exc)}")
    print("host us per eager call (16x256x256): " + "  ".join(f"{k} {v:.1f}" for k, v in host.items()))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "copy_gbs": bw, "peak_tflops": peak, "peak_source": peak_src,
                       "tolerance": TOLERANCE[args.dtype], "quack": quack_line, "args": vars(args), "rows": rows,
                       "summary": summaries, "targets": targets, "host_us": host}, f, indent=1)
    if args.plot:
        why_not = plot(args.plot, ok_rows, f"matmul_fused {args.dtype} {args.activation}"
                       f"{' + residual' if args.beta is not None else ''} on {info['gpu']}")
        if why_not:
            print(why_not)
    return 1 if failed else 0
