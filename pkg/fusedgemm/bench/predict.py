"""python -m fusedgemm.bench predict: PREDICTED (never measured) times of the CDNA GEMM kernels on paper.

For each LLM-grid row (llm_shapes.json) and the square sizes: the config plan/cdna.py chooses, its predicted time,
TFLOP/s, fraction of the dense MFMA peak, what bounds it (plan/cdna_model.py's terms), and for the decode rows
(M <= 64) the HBM floor and the ratio to it. --redesign adds the same for the hypothetical LDS-staged kernel of
issue 41 (cdna_model.redesign: counts written by hand, no such kernel exists). --moe predicts the grouped GEMMs of
the MoE bench's models instead (cdna_model.predict_grouped; uniform routing, the rows spread evenly over the
experts). --scales block predicts gemm_a8's block-scaled fp8 (1 x 128 / 128 x 128 scales; the kind fp8block: the
block-scaled kernels' own hot loops) on the config its plan takes (blockscale.block_plan: of the configs with
block-scaled kernels, the fastest predicted), beside the per-channel fp8 prediction of the same shape and config and
their ratio. Runs on any machine; with no
--arch it takes the GPU's arch when torch sees an AMD one, else both gfx942 and gfx950.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..plan import cdna, cdna_model

SQUARE = [1024, 2048, 4096, 8192, 16384]
DECODE_MAX_M = 64
REDESIGN_BLOCKS = ("256x256", "256x128", "128x128")
BLOCK_KIND = "fp8block"  # cdna_model's kind of the block-scaled fp8 kernels


def grid() -> list[tuple[str, int, int, int]]:
    """(shape, M, N, K) of every row: the LLM grid (x its M values), then the square sizes."""
    spec = json.loads((Path(__file__).with_name("llm_shapes.json")).read_text())
    rows = [(name, m, s["N"], s["K"]) for name, s in spec["shapes"].items() for m in spec["M"]]
    return rows + [(f"sq{n}", n, n, n) for n in SQUARE]


def redesign_best(arch: str, kind: str, m: int, n: int, k: int, l1=None) -> cdna_model.Prediction:
    """The hypothetical redesign's best block for this shape, or today's config where it is predicted faster (the
    redesign keeps the decode tiles with split-K)."""
    best = None
    for name in cdna.candidates(arch, kind):
        p = cdna_model.predict(arch, kind, name, m, n, k, l1_bytes_clk=l1)
        best = p if best is None or p.seconds < best.seconds else best
    for block in REDESIGN_BLOCKS if kind in ("fp8", "int8", "bf16", "fp16") else ():
        for warps in ((2, 4), (4, 2)):
            g, h = cdna_model.redesign(arch, kind, block, warps)
            p = cdna_model.predict(arch, kind, g.name, m, n, k, hot=h, geom=g, l1_bytes_clk=l1)
            best = p if best is None or p.seconds < best.seconds else best
    return best


def rows_for(arch: str, kind: str, with_redesign: bool = False, l1=None) -> list[dict]:
    """One row per grid() shape. A block kind (fp8block) runs on the config of its plan, the per-channel kind's
    (blockscale.block_plan), and its row carries that kind's prediction on the same config and the ratio."""
    plan_kind = cdna_model.base_kind(kind)
    out = []
    for shape, m, n, k in grid():
        name = cdna.choose_name(m, n, k, arch, kind) if l1 is None else min(  # as blockscale.block_plan for fp8block
            cdna.candidates(arch, kind),
            key=lambda c: cdna_model.predict(arch, kind, c, m, n, k, l1_bytes_clk=l1).seconds)
        p = cdna_model.predict(arch, kind, name, m, n, k, l1_bytes_clk=l1)
        r = {"arch": arch, "kind": kind, "shape": shape, "M": m, "N": n, "K": k, "config": name,
             "predicted_us": p.seconds * 1e6, "predicted_tflops": p.tflops, "predicted_frac_peak": p.fraction_of_peak,
             "bound": p.bound, "waves_per_simd": p.waves_per_simd}
        if plan_kind != kind:
            q = cdna_model.predict(arch, plan_kind, name, m, n, k, l1_bytes_clk=l1)
            r.update(channel_us=q.seconds * 1e6, channel_bound=q.bound, block_x_channel=p.seconds / q.seconds)
        if m <= DECODE_MAX_M:
            floor = cdna_model.hbm_floor(arch, kind, m, n, k)
            r.update(hbm_floor_us=floor * 1e6, predicted_x_floor=p.seconds / floor)
        if with_redesign:
            q = redesign_best(arch, kind, m, n, k, l1)
            r.update(redesign_config=q.config, redesign_us=q.seconds * 1e6, redesign_frac_peak=q.fraction_of_peak,
                     redesign_bound=q.bound)
        out.append(r)
    return out


MOE_TOKENS = (1, 16, 64, 256, 1024, 4096)


def moe_rows(arch: str, kind: str) -> list[dict]:
    """The MoE bench's models (bench/moe.py MODELS), gate_up and down, at MOE_TOKENS with uniform routing: each
    expert gets tokens x top-k / experts rows (the remainder one more each), and only experts with rows count."""
    from .moe import MODELS

    out = []
    for model, spec in MODELS.items():
        e, topk = spec["experts"], spec["topk"]
        for tokens in MOE_TOKENS:
            rows = tokens * topk
            sizes = tuple(rows // e + (1 if i < rows % e else 0) for i in range(e))
            for stage, n, k in (("gate_up", 2 * spec["inter"], spec["hidden"]),
                                ("down", spec["hidden"], spec["inter"])):
                name = cdna.choose_grouped_name(rows, e, n, k, arch, kind)  # what the grouped plan takes
                p = cdna_model.predict_grouped(arch, kind, name, sizes, n, k)
                active = sum(1 for s_ in sizes if s_)
                floor = (active * n * k * cdna_model.IN_BYTES[kind]) / cdna_model.HARDWARE[arch].hbm_bytes_s
                out.append({"arch": arch, "kind": kind, "model": model, "tokens": tokens, "stage": stage, "N": n,
                            "K": k, "rows_per_expert": rows / e, "active": active, "config": name,
                            "predicted_us": p.seconds * 1e6, "predicted_frac_peak": p.fraction_of_peak,
                            "bound": p.bound, "weights_floor_us": floor * 1e6, "predicted_x_floor": p.seconds / floor})
    return out


def _moe_table(rows: list[dict]) -> None:
    cols = [("model", "model", ""), ("tokens", "tokens", "d"), ("stage", "stage", ""), ("rows_per_expert", "rows/exp",
            ".1f"), ("active", "active", "d"), ("config", "config", ""), ("predicted_us", "pred us", ".1f"),
            ("predicted_frac_peak", "pred %peak", ".1%"), ("bound", "bound (pred)", ""),
            ("weights_floor_us", "weights floor us", ".1f"), ("predicted_x_floor", "pred x floor", ".2f")]
    cells = [[format(r[k], f) for k, _h, f in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (_k, h, _f) in enumerate(cols)]
    print("  ".join(h.rjust(w) for (_k, h, _f), w in zip(cols, widths)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, widths)))


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summary(rows: list[dict]) -> dict:
    big = [r for r in rows if r["M"] >= 1024]
    dec = [r for r in rows if r["M"] <= DECODE_MAX_M]
    s = {"geomean_frac_peak_m1024": geomean(r["predicted_frac_peak"] for r in big),
         "geomean_x_hbm_floor_decode": geomean(r["predicted_x_floor"] for r in dec)}
    if rows and "redesign_us" in rows[0]:
        s["redesign_geomean_frac_peak_m1024"] = geomean(r["redesign_frac_peak"] for r in big)
    if rows and "block_x_channel" in rows[0]:
        s["geomean_block_x_channel_m1024"] = geomean(r["block_x_channel"] for r in big)
        s["geomean_block_x_channel_decode"] = geomean(r["block_x_channel"] for r in dec)
    return s


def _table(rows: list[dict], with_redesign: bool) -> None:
    cols = [("shape", "shape", ""), ("M", "M", "d"), ("N", "N", "d"), ("K", "K", "d"), ("config", "config", ""),
            ("predicted_us", "pred us", ".1f"), ("predicted_tflops", "pred TFLOP/s", ".0f"),
            ("predicted_frac_peak", "pred %peak", ".1%"), ("bound", "bound (pred)", ""),
            ("hbm_floor_us", "HBM floor us", ".1f"), ("predicted_x_floor", "pred x floor", ".2f")]
    if with_redesign:
        cols += [("redesign_config", "redesign (hypothetical)", ""), ("redesign_us", "pred us", ".1f"),
                 ("redesign_frac_peak", "pred %peak", ".1%"), ("redesign_bound", "bound (pred)", "")]
    if rows and "block_x_channel" in rows[0]:
        cols += [("channel_us", "per-channel pred us", ".1f"), ("channel_bound", "bound (pred)", ""),
                 ("block_x_channel", "pred block/per-channel", ".2f")]
    cells = [[("-" if r.get(k) is None else format(r[k], f)) for k, _h, f in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (_k, h, _f) in enumerate(cols)]
    print("  ".join(h.rjust(w) for (_k, h, _f), w in zip(cols, widths)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, widths)))


def _default_arches() -> list[str] | str:
    """The GPU's arch if torch sees an AMD one; both AMD arches without a GPU; an error line otherwise."""
    try:
        import torch
    except ImportError:
        return list(cdna_model.HARDWARE)
    if not torch.cuda.is_available():
        return list(cdna_model.HARDWARE)
    from ..runtime.arch import UnsupportedArchError, device_arch

    try:
        arch = device_arch(torch.cuda.current_device())
    except UnsupportedArchError as exc:
        return f"fusedgemm.bench predict: {exc}"
    if arch not in cdna_model.HARDWARE:
        return f"fusedgemm.bench predict: the model covers gfx942 / gfx950, this GPU is {arch}; pass --arch"
    return [arch]


def run(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench predict", description=__doc__.split("\n\n")[1])
    p.add_argument("--arch", choices=sorted(cdna_model.HARDWARE), action="append",
                   help="gfx942 (MI300X) or gfx950 (MI355X); repeatable (default: the AMD GPU's, else both)")
    p.add_argument("--kind", choices=cdna_model.KINDS, action="append",
                   help="input kind; repeatable (default: fp8 and bf16)")
    p.add_argument("--redesign", action="store_true",
                   help="also predict the hypothetical LDS-staged, pipelined kernel of issue 41 (best of "
                        + ", ".join(REDESIGN_BLOCKS) + ")")
    p.add_argument("--l1-bytes-clk", type=float, default=None,
                   help="override the assumed vector L1 bandwidth per CU (bytes/clock; the model's default 64)")
    p.add_argument("--moe", action="store_true",
                   help="predict the MoE bench's grouped GEMMs (bench moe's models, uniform routing) instead of the "
                        "grid")
    p.add_argument("--scales", choices=("channel", "block"), default="channel",
                   help="block: gemm_a8's block-scaled fp8 (1x128 / 128x128 scales) beside the per-channel fp8 "
                        "prediction of the same shape and config (default: channel, the per-channel kernels)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows and summaries as JSON")
    args = p.parse_args(argv)
    if args.scales == "block":
        if args.redesign or args.moe or any(k != "fp8" for k in args.kind or ()):
            p.error("--scales block: block scales are fp8 on the grid (no --redesign, --moe or other --kind)")
        args.kind = [BLOCK_KIND]
    arches = args.arch or _default_arches()
    if isinstance(arches, str):
        print(arches, file=sys.stderr)
        return 1
    out = {"note": "PREDICTED by plan/cdna_model.py from datasheets and the compiled hot loops; never measured",
           "tables": []}
    for arch in arches:
        hw = cdna_model.HARDWARE[arch]
        for kind in args.kind or ["fp8", "bf16"]:
            if args.moe:
                rows = moe_rows(arch, kind)
                print(f"\n{arch} ({hw.name}) {kind} grouped GEMMs: PREDICTED, not measured (HBM "
                      f"{hw.hbm_bytes_s / 1e12:.1f} TB/s; floor: the active experts' weights once)")
                _moe_table(rows)
                dec = [r["predicted_x_floor"] for r in rows if r["tokens"] <= DECODE_MAX_M]
                big = [r["predicted_frac_peak"] for r in rows if r["tokens"] >= 1024]
                print(f"predicted: decode (<= {DECODE_MAX_M} tokens) geomean {geomean(dec):.2f}x the weights floor; "
                      f">= 1024 tokens geomean {geomean(big):.1%} of dense MFMA peak")
                out["tables"].append({"arch": arch, "kind": kind, "moe": True, "rows": rows})
                continue
            rows = rows_for(arch, kind, args.redesign, args.l1_bytes_clk)
            s = summary(rows)
            title = "fp8 block-scaled (1x128 / 128x128 scales)" if kind == BLOCK_KIND else kind
            print(f"\n{arch} ({hw.name}) {title}: PREDICTED, not measured (dense MFMA peak "
                  f"{hw.peak[cdna_model.base_kind(kind)] / 1e12:.0f} TFLOP/s, HBM {hw.hbm_bytes_s / 1e12:.1f} TB/s, "
                  f"L1 {args.l1_bytes_clk or hw.l1_bytes_clk:.0f} B/clk/CU)")
            _table(rows, args.redesign)
            line = (f"predicted: geomean {s['geomean_frac_peak_m1024']:.1%} of dense MFMA peak at M >= 1024; "
                    f"decode (M <= {DECODE_MAX_M}) geomean {s['geomean_x_hbm_floor_decode']:.2f}x the HBM floor")
            if args.redesign:
                line += f"; hypothetical redesign {s['redesign_geomean_frac_peak_m1024']:.1%} at M >= 1024"
            if "geomean_block_x_channel_m1024" in s:
                line += (f"; block-scaled / per-channel time geomean {s['geomean_block_x_channel_m1024']:.2f}x at "
                         f"M >= 1024, {s['geomean_block_x_channel_decode']:.2f}x at M <= {DECODE_MAX_M}")
            print(line)
            out["tables"].append({"arch": arch, "kind": kind, "summary": s, "rows": rows})
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0
