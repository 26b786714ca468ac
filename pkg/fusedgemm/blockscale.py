"""Block-scaled FP8 for gemm_a8 (DeepSeek-V3 style): which scale mode a call's scale_a / scale_b shapes select, and
the checks of the block scales (checks.check_gemm_a8_args calls split_block_scales before any launch).

    scale_a [M, ceil(K/128)]            float32, 1 x 128 blocks: one scale per token per 128 values of K
    scale_b [ceil(N/128), ceil(K/128)]  float32, 128 x 128 blocks of the [N, K] weight

    y[m, n] = epilogue( sum_kb sa[m, kb] * sb[n // 128, kb] * sum_{k in block kb} a[m, k] * b[n, k] )

Each side is one of: None / one value (scalar), a vector (scale_a [M] or [M, 1] per token; scale_b [N] or [1, N] per
channel) or a block scale; a block scale on one side mixes with any of the others on the other side (a vector or
scalar scale is constant along K, so it factors out of the block sum and stays in the epilogue). Shapes are matched
in that order: a shape that is both a vector and a block shape ([M, 1] when K <= 128; [1, N] when N <= 128 and
ceil(K/128) == N) is the vector -- for [M, 1] the math is the same; a [1, N] block scale_b cannot be told from a
per-channel one and is read as per-channel (pass such scales expanded to [N]).
"""
from __future__ import annotations

import dataclasses

import torch

from .plan import cdna as _cdna

BLOCK = 128  # the only block size: K blocks of 128 values (1 x 128 for A, 128 x 128 for B)


@dataclasses.dataclass(frozen=True)
class BlockScales:
    """The block scales of a call (either may be None: that side's scale is a vector / scalar in the epilogue)."""
    a: torch.Tensor | None  # [M, KB] float32 contiguous
    b: torch.Tensor | None  # [NB, KB] float32 contiguous
    k_blocks: int  # KB = ceil(K / 128)


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _block_shape(name: str, m: int, n: int, k: int) -> tuple[int, int]:
    return (m if name == "scale_a" else _cdiv(n, BLOCK), _cdiv(k, BLOCK))


def blocks_text(name: str, scale, m: int, n: int, k: int) -> str:
    """What checks._scale_args adds to its message of a scale shape of no mode: the block shape, and the block size a
    2-D shape would mean when it is blocks of another size along K."""
    rows, kb = _block_shape(name, m, n, k)
    what = (f"[M, ceil(K/128)] = [{rows}, {kb}] (1x128 blocks, K={k})" if name == "scale_a" else
            f"[ceil(N/128), ceil(K/128)] = [{rows}, {kb}] (128x128 blocks, N={n}, K={k})")
    hint = ""
    shape = tuple(scale.shape) if isinstance(scale, torch.Tensor) else ()
    if len(shape) == 2 and shape[0] == rows and shape[1] > 1:
        for g in (16, 32, 64, 256, 512):
            if shape[1] == _cdiv(k, g):
                hint = f"; that shape is blocks of {g} along K: only blocks of {BLOCK} are supported"
                break
    return f", or block scales {what}{hint}"


def classify(scale, name: str, m: int, n: int, k: int) -> str:
    """'none' | 'scalar' | 'vector' | 'block' | 'other' (a shape of no mode: checks._scale_args names the expected
    shapes, blocks_text's included) for a scale argument; a block-shaped tensor that is not float32 is a TypeError."""
    if scale is None:
        return "none"
    if not isinstance(scale, torch.Tensor):
        return "scalar"  # a number (checks._scale_args says what else it may not be)
    shape = tuple(scale.shape)
    length = m if name == "scale_a" else n
    if scale.numel() == 1 and scale.dim() <= 2:
        return "scalar"
    vector_shapes = ((length,), (length, 1)) if name == "scale_a" else ((length,), (1, length))
    if shape in vector_shapes:
        return "vector"
    if shape == _block_shape(name, m, n, k):
        if scale.dtype != torch.float32:
            raise TypeError(f"gemm_a8: {name} (block scales) must be float32, got {scale.dtype}")
        return "block"
    return "other"


def split_block_scales(scale_a, scale_b, m: int, n: int, k: int, in_dtype: torch.dtype):
    """-> (BlockScales or None, scale_a, scale_b): the block scales apart, and the scales left for the epilogue
    (None where a side is a block scale). Shape / dtype checks only; placement is check_block_placement's."""
    mode_a = classify(scale_a, "scale_a", m, n, k)
    mode_b = classify(scale_b, "scale_b", m, n, k)
    if mode_a != "block" and mode_b != "block":
        return None, scale_a, scale_b
    if in_dtype == torch.int8:
        raise TypeError("gemm_a8: block scales (scale_a [M, ceil(K/128)], scale_b [ceil(N/128), ceil(K/128)]) are "
                        "for fp8 inputs; int8 takes per-token / per-channel / scalar scales")
    blocks = BlockScales(scale_a if mode_a == "block" else None, scale_b if mode_b == "block" else None,
                         _cdiv(k, BLOCK))
    return blocks, (None if mode_a == "block" else scale_a), (None if mode_b == "block" else scale_b)


def check_block_placement(blocks: BlockScales, device: torch.device, check_ptr: bool) -> None:
    """Block scales: on A's device, contiguous (row-major), 4-byte aligned (checks.check_placement's wording)."""
    for t, name in ((blocks.a, "scale_a"), (blocks.b, "scale_b")):
        if t is None:
            continue
        if t.device != device:
            raise ValueError(f"gemm_a8: {name} is on {t.device}, expected {device} (the device of A)")
        if not t.is_contiguous():
            raise ValueError(f"gemm_a8: {name} (block scales) must be contiguous (row-major), got strides "
                             f"{tuple(t.stride())} for shape {list(t.shape)}")
        if check_ptr and t.numel() and t.data_ptr() % 4:
            raise ValueError(f"gemm_a8: {name} must be 4-byte aligned, got address {t.data_ptr():#x} (offset "
                             f"{t.data_ptr() % 4}); pass a fresh contiguous tensor")


def check_block_arch(blocks: BlockScales, arch: str) -> None:
    """Where block scales run: the CPU (the torch reference), sm_90a (the tile kernels) and gfx942 / gfx950 (the
    register-direct MFMA kernels, PortableBlockScaled in portable_gemm.hpp)."""
    if arch == "sm_90a" and not SM90_KERNEL:
        raise ValueError("gemm_a8: block-scaled FP8 is not yet implemented on sm_90a; it runs on CPU tensors (the "
                         "torch reference). Use per-token / per-channel scales on the GPU.")


SM90_KERNEL = True  # the sm_90a block-scaled tile kernels are wired in (gemm_a8.py launches them)


# ---- sm_90a: the plan and launch of a block-scaled call --------------------------------------------------------
# The configs with block-scaled kernels (BlockScaled<Config>, sm90_gemm_common.hpp): tiles of N 128, CTA per tile
# (the swapped decode tile too) or persistent, no B-multicast pairs (a tile's columns are one 128-row block of
# scale_b; a K block of the kernels, 128 fp8 values, is one scale block). Rule: the heuristic's plan (plan.plan_for)
# when it is one of these; else its nearest: a pair -> persistent_128x128, tile_128x192 -> tile_128x128.
BLOCK_CONFIGS = ("swap_16x128", "tile_64x128", "tile_128x128", "tile_192x128", "persistent_128x128",
                 "persistent_128x128_epi7", "persistent_128x128_epi7_1chain")
_NEAREST = {"pair_persistent_128x128": "persistent_128x128", "tile_128x192": "tile_128x128"}


# gfx942 / gfx950: the AMD configs with block-scaled kernels (PortableBlockScaled in block_scales.hpp: plan/cdna.py
# has_block_scaled_kernel); of these, the one the paper model predicts fastest with the block-scaled kernels' own
# hot loops (kind fp8block, `bench predict --scales block`).
AMD_BLOCK_CONFIGS = _cdna.BLOCK_SCALED_CONFIGS


def block_plan(m: int, n: int, k: int, dev: int, persistent_ok: bool = True):
    """-> (TileConfig, splits) of a block-scaled call; a pinned config (plan.forced_config) must be one of
    BLOCK_CONFIGS (AMD: AMD_BLOCK_CONFIGS; else a ValueError: never a kernel that would ignore the scales)."""
    from . import plan as plans
    from .plan import cdna, forced, plan_for, sm90, sm_count
    from .runtime import kernels

    pinned = forced()
    if plans.device_arch(dev) in ("gfx942", "gfx950"):  # (plan's name: fusedgemm.testing.emulate points it there)
        if pinned is not None and pinned[0] not in AMD_BLOCK_CONFIGS:
            raise ValueError(f"gemm_a8: config {pinned[0]} has no block-scaled kernel on AMD; block scales run on "
                             f"{', '.join(AMD_BLOCK_CONFIGS)}")
        name = (pinned[0] if pinned is not None
                else cdna.choose_name(m, n, k, plans.device_arch(dev), "fp8block"))
        return kernels.GEMM_CONFIGS[name], 1
    if pinned is not None and pinned[0] not in BLOCK_CONFIGS:
        raise ValueError(f"gemm_a8: config {pinned[0]} has no block-scaled kernel; block scales run on "
                         f"{', '.join(BLOCK_CONFIGS)} (tiles of N 128, no B-multicast pairs)")
    cfg, splits = plan_for(m, n, k, dev, persistent_ok=persistent_ok, in_kind="fp8")
    if cfg.name in BLOCK_CONFIGS:
        return cfg, splits
    configs = kernels.GEMM_CONFIGS
    if cfg.name in _NEAREST:
        return configs[_NEAREST[cfg.name]], splits if configs[_NEAREST[cfg.name]].splits_k else 1
    cfg = configs["tile_64x128" if m <= 64 else "tile_128x128"]
    slots = sm_count(dev) * cfg.min_blocks_per_sm
    return cfg, sm90._splits(cfg, sm90.tile_count(cfg, m, n), _cdiv(k, BLOCK), slots)


def block_values(values: dict, blocks: BlockScales) -> dict:
    """The Params values plus the kernel's block-scale fields (Sm90GemmBlockArgs::bs)."""
    return dict(values, bs_a=0 if blocks.a is None else blocks.a.data_ptr(),
                bs_b=0 if blocks.b is None else blocks.b.data_ptr(), bs_k_blocks=blocks.k_blocks)
