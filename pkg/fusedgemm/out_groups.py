"""gemm_a8(..., out_group=128): the output written as the next layer's DeepSeek-style 1x128 block-quantised
input -- fp8 codes [M, N] and fp32 scales [M, ceil(N / 128)] -- by the GEMM's own epilogue.

The rule is quantize_rows' (quant.py) applied to each group of 128 consecutive columns of a row of the epilogue's
fp32 values y: scale = max |y| / qmax (1 for an all-zero group, at least 2^-126, NaN propagating), codes =
round(y * (1 / scale)) saturating at +-qmax (448 e4m3fn, 240 e4m3fnuz). So the result is what
quantize_rows(y, "fp8", group=128) returns for y the GEMM's fp32 output, without y ever leaving the kernel.

Where it runs: gfx942 / gfx950 fuse it into the LDS-pipelined CDNA kernel (cdna_gemm.hpp: a group is its block's
128 columns -- 256 for a gate / up pair, on cdna_lds_128x256, or with block scales cdna_lds_64x256 --, reduced across
its waves through LDS; hip_src/include/fusedgemm/out_groups.hpp); sm_90a into the wgmma kernels of 128 columns: the
persistent ones (a parked row is a group, stored by one warp: sm90_gemm_persistent.hpp) and the CTA-per-tile
tile_64x128 / tile_128x128 (a row's group is in 4 threads of one warp, sm90_gemm_stores.hpp), except a
gate / up pair's (128 outputs are 256 GEMM columns, and no 8-bit sm_90a tile is that wide) and decode-size calls,
which run as the GEMM to fp32 and quantize_rows (two_kernels). CPU tensors get the float64 reference, rounded to
fp32, then quantize_rows' torch path. The grouped ops (grouped.py) take it too.
"""
from __future__ import annotations

import dataclasses

import torch

from . import blockscale as _blockscale
from . import pending as _pending
from . import unaligned as _ua
from .checks import FP8_DTYPE_FOR_ARCH, _FP8_DTYPES, arch_of, check_gemm_a8_args
from .epilogue.codegen import OUT_GROUP
from .plan.call import PERSISTENT_CONFIG, CallPlan
from .preshuffle import PreshuffledWeight, unshuffle
from .quant import quantize_rows
from .reference import gemm_reference
from .runtime.gemm_spec import config_fits
from .runtime.device import device_guard

# The configs whose block holds whole groups (the group's absmax is reduced inside the block): 128 GEMM columns,
# or 256 for a gate / up pair (128 outputs). sm_90a: the plan's config where it holds groups (group_config).
GROUP_CONFIG = "cdna_lds_128x128"
PAIRED_GROUP_CONFIG = "cdna_lds_128x256"
# A pair's with block scales: 4 waves in one row, so each may use the AGPRs beside its 256 VGPRs (chosen when the
# 8-wave block spilled its whole partial tile; with one row tile's partial tile it no longer does: moving back open).
BLOCK_PAIRED_GROUP_CONFIG = "cdna_lds_64x256"


AMD_ARCHES = ("gfx942", "gfx950")
FUSED_ARCHES = (*AMD_ARCHES, "sm_90a")


def check_out_group(group, out_dtype, out, arch: str, op: str = "gemm_a8") -> torch.dtype:
    """The code dtype of a group-quantised call (out_dtype, default the arch's fp8), or a clear error."""
    if isinstance(group, bool) or not isinstance(group, int) or group != OUT_GROUP:
        raise ValueError(f"{op}: out_group must be {OUT_GROUP} (one fp32 scale per 128 output columns of a row, "
                         f"DeepSeek-style 1x128 blocks) or None, got {group!r}")
    if out is not None:
        raise ValueError(f"{op}: out= is not taken with out_group: the call returns new (codes [M, N], scales "
                         "[M, ceil(N / 128)]) tensors")
    if arch not in ("cpu", *FUSED_ARCHES):
        raise NotImplementedError(
            f"{op}: out_group has no fused kernel on {arch} yet (gfx942 / gfx950 / sm_90a fuse it; CPU tensors run "
            f"the reference). Meanwhile: y = {op}(..., out_dtype=torch.float32), then fusedgemm.quantize_rows(y, "
            "'fp8', group=128) gives the same codes and scales")
    if out_dtype is None:
        return FP8_DTYPE_FOR_ARCH.get(arch, torch.float8_e4m3fn)
    if out_dtype not in _FP8_DTYPES:
        raise TypeError(f"{op}: out_group writes fp8 codes: out_dtype must be an fp8 dtype "
                        f"({FP8_DTYPE_FOR_ARCH.get(arch, torch.float8_e4m3fn)} here) or None, got {out_dtype}")
    return out_dtype


def two_kernels(arch: str, paired: bool, m: int = 0, n_out: int = 0, dev: int | None = None) -> bool:
    """Whether a group-quantised call runs as two kernels -- the GEMM to fp32, then quantize_rows(group=128) of it:
    exactly the caller's own two-step, so the same codes and scales -- instead of the fused kernel. On sm_90a: a gate
    / up pair's (a group is 256 GEMM columns; the 8-bit wgmma tiles are 128 wide, and a 256-wide one would hold a
    second 128-register partial tile per thread), and a gemm_a8 call (dev given) with fewer 64 x 128 output tiles than
    half the SMs: the fused kernels have no split-K, and measured up to 1.7x slower than the two kernels there (H100,
    2026-12-07, M = 16: 32-56 tiles; from 128 tiles on the fused kernel was faster)."""
    if arch != "sm_90a":
        return False
    if paired:
        return True
    if dev is None:
        return False
    from .plan import sm_count

    return -(-m // 64) * -(-n_out // 128) < sm_count(dev) // 2


def group_config(paired: bool, arch: str, m: int = 0, n: int = 0, dev: int | None = None, block_scaled: bool = False,
                 k: int = 0, in_kind: str = "fp8", persistent_ok: bool = True) -> str | None:
    """The config of a group-quantised call: a block holds whole groups. AMD: cdna_lds_128x128, a pair's
    cdna_lds_128x256 (with block scales cdna_lds_64x256). sm_90a (a gemm_a8 call: dev given): the plan's own config
    (the plain call's plan for this shape: pinned, tuned or heuristic) where it holds groups -- the persistent
    128 x 128 kernels (a parked row is a group, sm90_gemm_persistent.hpp) or a 128-wide CTA-per-tile config
    without split-K --, else tile_128x128 where its tiles fill the SMs twice, else tile_64x128 (twice the CTAs);
    None where the plan's own choice holds groups (the grouped calls on sm_90a: their CTA-per-tile configs are 128
    wide). persistent_ok: the epilogue fits the persistent kernels' staging (gemm_spec.config_fits)."""
    if arch != "sm_90a":
        if paired:
            return BLOCK_PAIRED_GROUP_CONFIG if block_scaled else PAIRED_GROUP_CONFIG
        return GROUP_CONFIG
    if dev is None:
        return None
    from .plan import forced, plan_for, sm_count
    from .runtime.tile_configs import holds_groups

    pinned = forced()
    if pinned is not None:
        if pinned[1] != 1 or not holds_groups(pinned[0], arch, OUT_GROUP):
            raise ValueError(f"gemm_a8: out_group cannot run on the pinned config {pinned[0]} (split-K {pinned[1]}): "
                             "a group-quantised output runs on a block that holds whole groups of 128 columns "
                             "(sm_90a: tile_64x128, tile_128x128, the persistent 128 x 128 configs; no split-K)")
        return pinned[0]
    if block_scaled:
        cfg, splits = _blockscale.block_plan(m, n, k, dev, persistent_ok=persistent_ok)
    else:
        cfg, splits = plan_for(m, n, k, dev, persistent_ok=persistent_ok, in_kind=in_kind)
    if splits == 1 and holds_groups(cfg.name, arch, OUT_GROUP) and not (
            cfg.persistent and _pending.pending("sm90_persistent_out_group")):
        return cfg.name
    return "tile_128x128" if -(-m // 128) * -(-n // 128) >= 2 * sm_count(dev) else "tile_64x128"


def gemm_a8_out_group(a, b: PreshuffledWeight, bias, scale_a, scale_b, epilogue, out_dtype, out, operands,
                      group, fp32_gemm) -> tuple[torch.Tensor, torch.Tensor]:
    """gemm_a8's out_group call (the arguments are gemm_a8's; fp32_gemm() runs the same call with
    out_dtype=torch.float32, for the calls that take two kernels): -> (codes [M, N], scales [M, ceil(N / 128)] fp32);
    a gate / up pair's: codes [M, N / 2], scales [M, ceil(N / 256)]."""
    if torch.compiler.is_compiling():
        raise NotImplementedError("gemm_a8: out_group is not traced by torch.compile yet; call it outside the "
                                  "compiled region (torch.compiler.disable)")
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"gemm_a8: A must be a torch.Tensor, got {type(a).__name__}")
    arch = arch_of("gemm_a8", a.device, None)
    out_dtype = check_out_group(group, out_dtype, out, arch)
    p = check_gemm_a8_args(a, b, bias, scale_a, scale_b, epilogue, out_dtype, None, operands=operands)
    if p["saved_dtype"] is not None:
        raise ValueError(f"gemm_a8: out_group takes an epilogue without save(...), got {p['expr']}")
    spec = dataclasses.replace(p["epi"], out_group=group)
    m, n, k, n_out = p["m"], p["n"], p["k"], p["n_out"]  # n_out = N / 2 for a gate / up pair
    groups = -(-n_out // group)
    if arch == "cpu":
        y, _saved = gemm_reference(a, unshuffle(b), p["expr"], p["operands"], blocks=p["blocks"])
        return quantize_rows(y.to(torch.float32).reshape(m, n_out), out_dtype, group=group)  # the kernel's fp32 y
    if two_kernels(arch, n_out != n, m, n_out, a.device.index):
        return quantize_rows(fp32_gemm(), out_dtype, group=group)
    n_pad, k_pad = b.padded_shape
    if n_pad != n:
        raise ValueError(f"gemm_a8: out_group needs N a multiple of 16 on {arch} today (the padded columns of a "
                         f"weight of N={n} would enter the last group's absmax)")
    a_k = a if k_pad == k else _ua.pad_k("gemm_a8", a, k_pad)
    if k_pad != k:
        _ua.warn_pad_k("gemm_a8", "A", k, k_pad, a.dtype)
    codes = torch.empty((m, n_out), dtype=out_dtype, device=a.device)
    scales = torch.empty((m, groups), dtype=torch.float32, device=a.device)
    values = dict(p["values"], ld_scale=groups)
    blocks = p["blocks"]
    if blocks is not None:
        values = _blockscale.block_values(values, blocks)
    with device_guard(a.device):
        plan = CallPlan(a.device.index, arch, p["in_kind"], m, n, k_pad, out_dtype, spec, values, ("out", "out_scale"),
                        block_scaled=blocks is not None,
                        config=group_config(n_out != n, arch, m, n, a.device.index, blocks is not None, k_pad,
                                            p["in_kind"], config_fits(PERSISTENT_CONFIG, spec)))
        plan.run(a_k.data_ptr(), b.data.data_ptr(), codes.data_ptr(), scales.data_ptr())
    return codes, scales

