"""python -m fusedgemm.bench moe: mixture-of-experts grouped GEMMs (fg.grouped_swiglu for gate_up with SwiGLU fused,
fg.grouped_matmul / fg.grouped_gemm_a8 for down) on DeepSeek-V3, Qwen3-30B-A3B and Mixtral-8x7B expert shapes,
against the torch paths, all timed in this process.

Rows per expert come from routing tokens x top-k assignments: uniform (each token picks top-k distinct experts
uniformly) or skewed (picked with Zipf-like popularity p(rank r) ~ 1 / r^s, --zipf s). Each case has two stages:
gate_up ([M, hidden] -> [M, I], SwiGLU) and down ([M, I] -> [M, hidden]); M = tokens x top-k rows, grouped by expert.

fg      fusedgemm's grouped op (bf16: grouped_swiglu / grouped_matmul; fp8: fp8 x with per-token scale_a and
        per-channel scale_b, gate_up through grouped_swiglu (its weight interleaved and preshuffled on the first,
        untimed call, then cached), down through grouped_gemm_a8 with fg.preshuffle(w8))
        fp8block: DeepSeek-style block scales, x 1 x 128 per row (quantize_rows group=128), each expert's weight
        128 x 128 (quantize_weight block=128), the same calls
gm      torch._grouped_mm (bf16) / torch._scaled_grouped_mm (fp8, row-wise scales) alone: the grouped GEMM with
        no epilogue (for gate_up: the [M, 2I] product, SwiGLU not applied); fp8block: torch has no block-scaled
        grouped GEMM, so gm is _scaled_grouped_mm at the same shape with row-wise scales (a speed bar, not a
        reference: fp8block rows are checked against the loop only)
gm+act  gm, then F.silu(gate) * up as torch ops (gate_up only)
loop    a Python loop over the experts with rows: F.linear (bf16) / torch._scaled_mm (fp8; fp8block: its block-scaled
        form, bench/gemm_a8.py torch_block_mm) per expert, + SwiGLU;
        the row ranges are precomputed on the host (a real loop would also sync for them: this favours the loop)
floor   decode token counts (<= 64) only: bytes of the routed (active) experts' weights / the device-to-device
        copy bandwidth measured in this run; fg/floor = fg time / floor

Times: medians of CUDA-event pairs, L2 flushed before each run, fg and its baselines rep by rep in one set
(bench/common.py). Before timing, fg is checked against the loop: rel err = ||fg - loop|| / ||loop|| on up to 512
rows, flagged FAIL past a loose bound (a broken kernel, not a rounding difference). Baselines the installed torch
lacks or cannot run here are listed at the start and left out ('-'). x(p) = p time / fg time (> 1: fg faster).
--quick: tiny shapes for a CPU smoke test (fusedgemm's CPU reference ops; times are host times, mean nothing).
--module: also whole blocks, transformers' Qwen3-MoE / Mixtral sparse MoE block (random init at the model's real
sizes, experts_implementation eager) against fg.nn.FusedMoE.from_module(block), bf16, inference_mode, one table
(bench/moe_module.py; DeepSeek-V3's block is 22.5 GB of bf16 experts).
Exit status 1 when a row is FAIL or ERROR.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

from ..plan import forced_config
from .cli import dtype_name
from .common import (Timer, copy_bandwidth_gbs, device_info, error_line, gpu_problem, kernel_us, print_table,
                     progress, time_paths, warm_host_us)

# hidden size, expert intermediate size I (gate_up N = 2I), routed experts, experts per token
MODELS = {"deepseek-v3": dict(hidden=7168, inter=2048, experts=256, topk=8),
          "qwen3-30b-a3b": dict(hidden=2048, inter=768, experts=128, topk=8),
          "mixtral-8x7b": dict(hidden=4096, inter=14336, experts=8, topk=2)}
QUICK_MODEL = dict(hidden=256, inter=128, experts=8, topk=2)  # --quick: seconds on a CPU
TOKENS = [1, 16, 64, 256, 1024, 4096, 16384]
# Defaults sized for about 5 minutes on one H200 (3 models x 4 token counts x 2 routings x 2 dtypes), an estimate.
DEFAULT_TOKENS = [1, 64, 1024, 4096]
DTYPES = ("bf16", "fp8", "fp8block")
DEFAULT_DTYPES = ("bf16", "fp8")
DECODE_MAX = 64  # token counts that get the weight-streaming floor: there the routed weights' bytes bound time
CHECK_ROWS = 512
# Loose sanity bounds on rel err vs the loop: bf16 is a few 2^-8 roundings apart; fp8 paths share the quantized
# inputs and differ by accumulation order and one bf16 rounding. A kernel bug lands far above either.
SANITY = {"bf16": 0.05, "fp8": 0.1, "fp8block": 0.1}
MASKED_MAX_BYTES = 4 << 30  # the masked layout pads every expert to Mmax rows; past this the case is skipped
PATHS = ("gm", "gm_act", "loop")
LABELS = {"gm": "gm", "gm_act": "gm+act", "loop": "loop"}


def route(tokens: int, experts: int, topk: int, routing: str, zipf: float = 1.2, seed: int = 0) -> list[int]:
    """Rows per expert of `tokens` tokens each sent to `topk` distinct experts. 'uniform': every expert equally
    likely; 'skewed': expert popularity ~ 1 / rank^zipf, the ranks shuffled (the hot experts are not 0, 1, ...)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.ones(experts, dtype=torch.float64)
    if routing == "skewed":
        p = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** zipf
        p = p[torch.randperm(experts, generator=g)]
    elif routing != "uniform":
        raise ValueError(f"routing must be 'uniform' or 'skewed', got {routing!r}")
    picks = torch.multinomial(p.expand(tokens, experts), topk, replacement=False, generator=g)
    return torch.bincount(picks.reshape(-1), minlength=experts).tolist()


def bounds(counts: list[int]) -> list[tuple[int, int, int]]:
    """(expert, first row, end row) of every expert with rows, in the grouped (offs) order."""
    out, start = [], 0
    for e, c in enumerate(counts):
        if c:
            out.append((e, start, start + c))
        start += c
    return out


def probe_baselines(device: str, fp8_dtype) -> dict:
    """{torch op: 'runs here' or why not} on a tiny problem of this device: what the installed torch has (CPU builds
    carry the names of GPU-only ops, so only a call tells)."""
    x = torch.randn(32, 64, device=device).to(torch.bfloat16)
    w = torch.randn(2, 32, 64, device=device).to(torch.bfloat16)
    offs = torch.tensor([16, 32], dtype=torch.int32, device=device)
    sa, sb = torch.ones(32, device=device), torch.ones(2, 32, device=device)
    calls = {"torch._grouped_mm": lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs),
             "torch._scaled_grouped_mm": lambda: torch._scaled_grouped_mm(
                 x.to(fp8_dtype), w.to(fp8_dtype).transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16),
             "torch._scaled_mm": lambda: torch._scaled_mm(x.to(fp8_dtype), w[0].to(fp8_dtype).T, scale_a=sa[:, None],
                                                          scale_b=sb[0][None, :], out_dtype=torch.bfloat16)}
    found = {}
    for name, call in calls.items():
        if not hasattr(torch, name.split(".")[1]):
            found[name] = "absent from this torch"
            continue
        try:
            call()
            found[name] = "runs here"
        except Exception as exc:  # noqa: BLE001 - a GPU-only op on the CPU, an unsupported GPU: reported, skipped
            found[name] = "present, fails here: " + error_line(exc)[:100]
    return found


def swiglu_torch(y: torch.Tensor) -> torch.Tensor:
    """SwiGLU of a merged [.., 2I] product (gate columns, then up) as eager torch ops."""
    gate, up = y.chunk(2, dim=-1)
    return F.silu(gate) * up


def make_weights(fg, model: dict, dtype: str, device: str, seed: int = 0) -> dict:
    """Per stage: w [G, N, K] bf16 (~N(0, 1/K): outputs ~N(0, 1)), or for fp8 its per-channel quantization w8,
    scale_b [G, N] and (down) fg.preshuffle(w8); fp8block: 128 x 128 blocks, scale_b [G, N / 128, K / 128] (gate_up:
    the gate's blocks then the up's, as grouped_swiglu takes them). The bf16 weight is dropped for the 8-bit kinds:
    DeepSeek-V3 holds 22 GB of it."""
    torch.manual_seed(seed)
    g, h, i = model["experts"], model["hidden"], model["inter"]
    out = {}
    for stage, (n, k) in {"gate_up": (2 * i, h), "down": (h, i)}.items():
        w = torch.randn(g, n, k, device=device, dtype=torch.bfloat16).mul_(k ** -0.5)  # bf16 at once: no fp32 copy
        if dtype == "bf16":
            out[stage] = dict(w=w, n=n, k=k)
            continue
        block = 128 if dtype == "fp8block" else None  # (N % 128 == 0: an expert's row blocks are its own)
        w8, sb = fg.quantize_weight(w.reshape(g * n, k), "fp8", block=block)  # one call for all experts
        del w
        w8 = w8.reshape(g, n, k)
        out[stage] = dict(w8=w8, sb=sb.reshape(g, n) if block is None else sb.reshape(g, n // 128, -1), n=n, k=k)
        if stage == "down":  # grouped_swiglu takes the plain 8-bit gate_up and caches its interleaved, preshuffled copy
            out[stage]["wq"] = fg.preshuffle(w8)
    return out


def stage_inputs(fg, stage_w: dict, counts: list[int], layout: str, dtype: str, device: str) -> dict:
    """x of the stage in the layout (offs: [M, K], masked: [G, Mmax, K] zero past each expert's rows), offs /
    masked_m, and for fp8 x8 with its per-token scale_a."""
    g, k, m = len(counts), stage_w["k"], sum(counts)
    c = torch.tensor(counts, dtype=torch.int32, device=device)
    inp = dict(counts=counts, m=m)
    if layout == "offs":
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        inp.update(x=x, offs=torch.cumsum(c, 0, dtype=torch.int32))
    else:
        mmax = max(16, -(-max(counts) // 16) * 16)  # at least 16 rows, a multiple of 16 (the kernels' tile rows)
        x = torch.zeros(g, mmax, k, device=device, dtype=torch.bfloat16)
        for e, cnt in enumerate(counts):
            x[e, :cnt] = torch.randn(cnt, k, device=device, dtype=torch.bfloat16)
        inp.update(x=x, masked_m=c, expected_m=max(1, -(-m // g)), mmax=mmax)
    if dtype != "bf16":
        group = 128 if dtype == "fp8block" else None
        x8, sa = fg.quantize_rows(x.reshape(-1, k), "fp8", group=group)
        lead = x.shape[:-1]
        inp.update(x8=x8.reshape(x.shape), sa=sa.reshape(lead) if group is None else sa.reshape(*lead, -1))
    return inp


def stage_paths(fg, stage: str, dtype: str, layout: str, W: dict, inp: dict, have: dict,
                config: str | None = None) -> dict:
    """{'fg': ours, 'gm', 'gm_act', 'loop'}: callables, None where a path does not apply or cannot run here."""
    gate_up = stage == "gate_up"
    act = swiglu_torch if gate_up else (lambda y: y)
    n_out = W["n"] // 2 if gate_up else W["n"]
    where = dict(offs=inp["offs"]) if layout == "offs" else dict(masked_m=inp["masked_m"],
                                                                  expected_m=inp["expected_m"])
    rows = bounds(inp["counts"])
    if dtype == "bf16":
        x, w = inp["x"], W["w"]
        wt = w.transpose(-2, -1)  # torch's grouped ops take [G, K, N]: the same memory, column-major per expert
        if gate_up:
            ours = lambda: fg.grouped_swiglu(x, w, **where)  # noqa: E731
        else:
            ours = lambda: fg.grouped_matmul(x, w, **where)  # noqa: E731
        gm = (lambda: torch._grouped_mm(x, wt, offs=inp["offs"])) if layout == "offs" else (
            lambda: torch._grouped_mm(x, wt))  # masked: 3-D x 3-D, every padded row computed (what torch offers)
        have_gm = have.get("torch._grouped_mm") == "runs here"
        per_expert = lambda e, a: F.linear(a, w[e])  # noqa: E731
        loop_ok = True
    else:
        x8, sa, w8, sb = inp["x8"], inp["sa"], W["w8"], W["sb"]
        w8t = w8.transpose(-2, -1)
        kw = dict(scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, **where)
        if gate_up:  # the plain 8-bit [G, 2I, K]: interleaved and preshuffled on the first call (the check), cached
            ours = lambda: fg.grouped_swiglu(x8, w8, **kw)  # noqa: E731
        else:
            ours = lambda: fg.grouped_gemm_a8(x8, W["wq"], **kw)  # noqa: E731
        block = dtype == "fp8block"
        gsa = torch.ones(x8.shape[:-1], device=x8.device) if block else sa  # fp8block: a speed bar (docstring)
        gsb = torch.ones(w8.shape[:-1], device=x8.device) if block else sb
        gm = (lambda: torch._scaled_grouped_mm(x8, w8t, gsa.reshape(-1) if layout == "offs" else gsa,  # noqa: E731
                                               gsb, offs=inp.get("offs"), out_dtype=torch.bfloat16))
        have_gm = have.get("torch._scaled_grouped_mm") == "runs here"
        block_mms = {}  # fp8block: expert e's torch_block_mm callable for its row range (layouts made here, untimed)
        if block:
            from .gemm_a8 import torch_block_mm

            for e, s, t in rows:
                a, s_a = (x8[s:t], sa[s:t]) if layout == "offs" else (x8[e, :t - s], sa[e, :t - s])
                pad = -(t - s) % 16  # as cuBLAS's fp8 GEMM wants, below too
                if pad:
                    a = torch.cat([a, a.new_zeros(pad, a.shape[1])])
                    s_a = torch.cat([s_a, s_a.new_ones(pad, s_a.shape[1])])
                block_mms[e] = (torch_block_mm(a, w8[e], s_a, sb[e]), t - s)

        def per_expert(e, a, s):
            if block:
                mm, m = block_mms[e]
                return mm()[:m]
            # cuBLAS's fp8 GEMM wants rows in multiples of 16: pad with zero rows, as a caller's loop would
            m = a.shape[0]
            pad = -m % 16
            if pad:
                a = torch.cat([a, a.new_zeros(pad, a.shape[1])])
                s = torch.cat([s, s.new_ones(pad)])
            return torch._scaled_mm(a, w8[e].T, scale_a=s[:, None], scale_b=sb[e][None, :],
                                    out_dtype=torch.bfloat16)[:m]
        loop_ok = have.get("torch._scaled_mm") == "runs here" and all(mm for mm, _m in block_mms.values())

    def loop():
        if layout == "offs":
            out = torch.empty(inp["m"], n_out, device=inp["x"].device, dtype=torch.bfloat16)
            for e, s, t in rows:
                a = (x[s:t],) if dtype == "bf16" else (x8[s:t], sa[s:t])
                out[s:t] = act(per_expert(e, *a))
        else:
            out = torch.zeros(len(inp["counts"]), inp["mmax"], n_out, device=inp["x"].device, dtype=torch.bfloat16)
            for e, s, t in rows:
                a = (x[e, :t - s],) if dtype == "bf16" else (x8[e, :t - s], sa[e, :t - s])
                out[e, :t - s] = act(per_expert(e, *a))
        return out

    if config:  # --config: ours under a pinned grouped tile config
        plain = ours

        def ours():
            with forced_config(config):
                return plain()
    paths = {"fg": ours, "gm": gm if have_gm else None, "gm_act": None, "loop": loop if loop_ok else None}
    if gate_up and have_gm:
        paths["gm_act"] = lambda: swiglu_torch(gm())
    return paths


def valid_rows(y: torch.Tensor, counts: list[int], layout: str) -> torch.Tensor:
    """The rows that carry tokens, as [rows, N] (masked: each expert's first counts[e] rows)."""
    if layout == "offs":
        return y
    return torch.cat([y[e, :c] for e, c in enumerate(counts) if c])


def rel_err(y: torch.Tensor, ref: torch.Tensor, counts: list[int], layout: str) -> float:
    from fusedgemm.reference import rel_error

    from .matmul_fused import check_rows

    y, ref = valid_rows(y, counts, layout), valid_rows(ref, counts, layout)
    if y.shape != ref.shape:
        return float("nan")
    idx = check_rows(y.shape[0], CHECK_ROWS).to(y.device)
    return rel_error(y[idx], ref[idx])


def measure_stage(fg, timer, args, device, stage, dtype, W, inp, have, bw, tokens) -> dict:
    row = dict(stage=stage, N=W["n"], K=W["k"])
    paths = stage_paths(fg, stage, dtype, args.layout, W, inp, have, args.config)
    try:  # correctness first: fg against the loop (or gm + act, gm where the loop cannot run), before any timing
        y = paths["fg"]()
    except Exception as exc:  # noqa: BLE001 - report the row, go on with the next
        row.update(check="ERROR", error=error_line(exc))
        return row
    row["check"] = "unchecked"  # until a reference runs here
    refs = ("loop",) if dtype == "fp8block" else ("loop", "gm_act" if stage == "gate_up" else "gm")
    for ref_path in refs:
        if paths.get(ref_path) is None:
            continue
        try:  # a baseline that cannot run this shape (cuBLASLt refuses some fp8 ones) is reported, not fatal
            ref = paths[ref_path]()
        except Exception as exc:  # noqa: BLE001
            row[f"{ref_path}_error"] = error_line(exc)
            continue
        row["rel_err"] = rel_err(y, ref, inp["counts"], args.layout)
        row["ref"] = ref_path
        row["check"] = "FAIL" if not row["rel_err"] <= SANITY[dtype] else "ok"  # NaN fails
        break
    del y
    times, errors = time_paths(timer, paths, device)  # ours and the baselines rep by rep (common.py says why)
    row.update((f"{p}_us", t) for p, t in times.items())
    row.update((f"{p}_error", error_line(exc)) for p, exc in errors.items())
    if args.kernel_time and device == "cuda" and "fg_us" in row:
        row["fg_kus"] = kernel_us(paths["fg"], timer)
    for p in PATHS:
        row[f"x_{p}"] = row[f"{p}_us"] / row["fg_us"] if row.get(f"{p}_us") and row.get("fg_us") else None
    if tokens <= DECODE_MAX and row.get("fg_us"):
        active = sum(1 for c in inp["counts"] if c)
        elem = 2 if dtype == "bf16" else 1
        scales = {"fp8": 4, "fp8block": 4 * -(-W["k"] // 128) / 128}.get(dtype, 0)  # scale_b bytes per row
        nbytes = active * W["n"] * (W["k"] * elem + scales)  # weights and their scale_b
        row["floor_us"] = nbytes / (bw * 1e9) * 1e6
        row["floor_ratio"] = row["fg_us"] / row["floor_us"]
        if row.get("fg_kus"):
            row["kfloor_ratio"] = row["fg_kus"] / row["floor_us"]
    return row


def table_summary(rows: list[dict]) -> dict:
    """Medians over the table's checked rows of each speedup and of fg/floor (None where no row has it)."""
    ok = [r for r in rows if r.get("check") == "ok"]
    out = {}
    for key in [f"x_{p}" for p in PATHS] + ["floor_ratio"]:
        vals = [r[key] for r in ok if r.get(key)]
        out[key] = statistics.median(vals) if vals else None
    return out


def _parser():
    def dtype_choice(text):
        try:
            short = text if text == "fp8block" else dtype_name(text)
        except ValueError:
            short = None
        if short not in DTYPES:
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(DTYPES)})")
        return short

    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench moe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                   help="expert shapes to run (default: all three)")
    p.add_argument("--tokens", type=int, nargs="+", default=DEFAULT_TOKENS,
                   help="token counts before routing, M = tokens x top-k rows (default: "
                        + " ".join(map(str, DEFAULT_TOKENS)) + "; the issue's grid: "
                        + " ".join(map(str, TOKENS)) + ")")
    p.add_argument("--routing", nargs="+", choices=["uniform", "skewed"], default=["uniform", "skewed"],
                   help="expert choice per token: uniform, or skewed (Zipf-like popularity; see --zipf); default both")
    p.add_argument("--zipf", type=float, default=1.2,
                   help="exponent s of the skewed popularity 1 / rank^s (default 1.2)")
    p.add_argument("--dtype", type=dtype_choice, nargs="+", default=list(DEFAULT_DTYPES),
                   metavar="{bf16,fp8,fp8block}",
                   help="input dtypes, one table each per model: bf16 (also bfloat16), fp8 (e4m3: per-token x, "
                        "per-channel weight scales; the device's variant), fp8block (DeepSeek-style 1 x 128 / "
                        "128 x 128 block scales); default bf16 fp8")
    p.add_argument("--layout", choices=["offs", "masked"], default="offs",
                   help="offs: rows of all experts packed [M, K] with cumulative offsets (default); masked: "
                        "[G, Mmax, K] with masked_m rows valid per expert (DeepEP low-latency style)")
    p.add_argument("--config", metavar="NAME",
                   help="pin fg's grouped tile config (fusedgemm.plan.forced_config: e.g. tile_64x128 or tile_128x128 "
                        "on sm_90a) instead of the plan's choice, to compare plans in one process")
    p.add_argument("--seed", type=int, default=0, help="seed of the routing and the data (default 0)")
    p.add_argument("--reps", type=int, default=30, help="timed runs per path and row, rep by rep; medians (default 30)")
    p.add_argument("--flush", choices=["read", "write"], default="read",
                   help="how L2 is flushed before each timed run (see bench/common.py Timer)")
    p.add_argument("--kernel-time", action="store_true",
                   help="also fg's kernel-only time (profiler; no ~3 us event-pair overhead) and its ratio to "
                        "the floor")
    p.add_argument("--quick", action="store_true",
                   help="CI smoke: one tiny model (hidden 256, I 128, 8 experts, top-2), 16 tokens, 3 reps; runs on "
                        "the CPU (fusedgemm's reference ops) when there is no usable GPU; its times mean nothing")
    p.add_argument("--module", action="store_true",
                   help="also time whole MoE blocks per token count: transformers' Qwen3-MoE / Mixtral block "
                        "(random init at the model's sizes, experts eager) vs fg.nn.FusedMoE.from_module(block), "
                        "bf16, with a max rel diff check (FAIL past 5e-2)")
    p.add_argument("--json", metavar="FILE", help="write device, baselines found, rows and summaries as JSON here")
    return p


def run(argv=None) -> int:
    args = _parser().parse_args(argv)
    problem = gpu_problem("moe")
    if problem and not args.quick:
        print(problem, file=sys.stderr)
        return 1
    import fusedgemm as fg

    missing = [n for n in ("grouped_matmul", "grouped_swiglu", "grouped_gemm_a8") if not hasattr(fg, n)]
    if missing:
        print(f"fusedgemm.bench moe: this fusedgemm ({fg.__file__}) has no {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.config:
        from ..plan.grouped_call import grouped_config_ok
        from ..runtime.kernels import GEMM_CONFIGS

        if args.config not in GEMM_CONFIGS or not grouped_config_ok(args.config):
            print(f"fusedgemm.bench moe: --config {args.config}: not a config with grouped kernels", file=sys.stderr)
            return 2
    device = "cpu" if problem else "cuda"
    models = {"quick": QUICK_MODEL} if args.quick else {name: MODELS[name] for name in args.models}
    tokens = [16] if args.quick else args.tokens
    if args.quick:
        args.reps = min(args.reps, 3)
    if device == "cuda":
        timer = Timer(reps=args.reps, flush=args.flush)
        bw = copy_bandwidth_gbs(timer)
        info = device_info()
    else:  # host times of synchronous CPU calls: warm_host_us(fn, reps) stands in for the Timer
        timer = args.reps
        src = torch.empty(1 << 24, dtype=torch.uint8)
        dst = torch.empty_like(src)
        bw = 2 * src.numel() / (warm_host_us(lambda: dst.copy_(src), 3) * 1e-6) / 1e9
        info = {"gpu": "cpu (no usable GPU: " + problem.split(": ", 1)[-1] + ")", "torch": torch.__version__}
    fp8_dtype = fg.quantize_rows(torch.zeros(1, 16, device=device), "fp8")[0].dtype
    have = probe_baselines(device, fp8_dtype)
    pinned = f"  fg config pinned: {args.config}" if args.config else ""
    print(f"{info['gpu']}  torch {info['torch']}  copy {bw:.0f} GB/s  layout {args.layout}  reps {args.reps}{pinned}")
    print("torch baselines: " + "; ".join(f"{k} {v}" for k, v in have.items()))
    if device == "cpu":
        print("--quick on the CPU: fusedgemm runs its float64 reference ops; the times below are host times of "
              "reference code, not kernel times")

    rows, summaries, failed = [], {}, []
    for mname, model in models.items():
        for dtype in args.dtype:
            weights = make_weights(fg, model, dtype, device, args.seed)
            table = []
            cases = [(t, r) for t in tokens for r in args.routing]
            for t, routing in progress(cases, len(cases), f"moe {mname} {dtype}"):
                counts = route(t, model["experts"], model["topk"], routing, args.zipf, args.seed)
                base = dict(model=mname, dtype=dtype, tokens=t, routing=routing, rows=sum(counts),
                            rows_avg=sum(counts) / len(counts), rows_max=max(counts),
                            active=sum(1 for c in counts if c))
                for stage, W in weights.items():
                    padded = len(counts) * max(16, max(counts)) * W["k"] * 2
                    if args.layout == "masked" and padded > MASKED_MAX_BYTES:
                        print(f"{mname} {dtype} tokens {t} {routing} {stage}: skipped, the masked layout would pad "
                              f"to {padded / 2**30:.1f} GiB")
                        continue
                    inp = stage_inputs(fg, W, counts, args.layout, dtype, device)
                    row = {**base, **measure_stage(fg, timer, args, device, stage, dtype, W, inp, have, bw, t)}
                    if row["check"] != "ok":
                        failed.append(row)
                        print(f"{mname} {dtype} tokens {t} {routing} {stage}: {row['check']} "
                              f"{row.get('error', '')}{row.get('rel_err', '')}", file=sys.stderr)
                    table.append(row)
                    del inp
                    if device == "cuda":
                        torch.cuda.empty_cache()
            del weights
            rows += table
            gm_op = {"bf16": "torch._grouped_mm", "fp8": "torch._scaled_grouped_mm",
                     "fp8block": "torch._scaled_grouped_mm with row-wise scales (torch has no block-scaled one)"}[dtype]
            print(f"\n{mname} (hidden {model['hidden']}, I {model['inter']}, {model['experts']} experts, "
                  f"top-{model['topk']})  {dtype}; gm = {gm_op}")
            cols = [("tokens", "tokens", "d"), ("routing", "routing", "s"), ("stage", "stage", "s"),
                    ("rows_avg", "rows/exp", ".1f"), ("rows_max", "max", "d"), ("active", "active", "d"),
                    ("fg_us", "fg us", ".1f")]
            cols += [(f"{p}_us", f"{LABELS[p]} us", ".1f") for p in PATHS]
            cols += [(f"x_{p}", f"x {LABELS[p]}", ".2f") for p in PATHS]
            cols += [("floor_us", "floor us", ".1f"), ("floor_ratio", "fg/floor", ".2f")]
            if args.kernel_time:
                cols += [("fg_kus", "fg kern us", ".1f"), ("kfloor_ratio", "kern/floor", ".2f")]
            cols += [("rel_err", "rel err", ".1e"), ("check", "check", "s")]
            print_table(table, cols)
            s = summaries[f"{mname} {dtype}"] = table_summary(table)
            names = {**{f"x_{p}": f"x {LABELS[p]}" for p in PATHS}, "floor_ratio": f"fg/floor (tokens <= {DECODE_MAX})"}
            print("medians: " + "  ".join(f"{names[k]} {'-' if v is None else f'{v:.2f}'}" for k, v in s.items()))
            if device == "cuda":
                torch.cuda.empty_cache()
    for p in PATHS:  # one line per baseline: its first error and on how many rows
        errs = [r[f"{p}_error"] for r in rows if f"{p}_error" in r]
        if errs:
            print(f"  {LABELS[p]} failed on {len(errs)} rows; the first: {errs[0][:200]}")
    module_rows = []
    if args.module:
        from .moe_module import run_module_rows

        module_rows, module_failed = run_module_rows(args, device, timer, tokens, args.quick)
        failed += module_failed
    if failed:
        print(f"{len(failed)} row(s) FAIL or ERROR (left out of the medians)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": info, "copy_gbs": bw, "baselines": have, "args": vars(args), "rows": rows,
                       "summary": summaries, "module_rows": module_rows}, f, indent=1)
    return 1 if failed else 0
