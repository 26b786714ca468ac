"""The GEMM plan on gfx942 / gfx950 (and the mma.sync template kept reachable on sm_90a): the portable MFMA
kernel template's tile configs, chosen per shape by the paper model of plan/cdna_model.py -- PREDICTED times from
the datasheets and each kernel's compiled hot loop, not yet measured on any AMD GPU.

The configs: portable_16x16_k8 and portable_64x16_k8 (register-direct decode tiles: K split 8 ways over the block's
waves, partial sums reduced through LDS), portable_128x128 (8 waves of 64 x 32, register-direct) and, for every
kind, the LDS-staged template (cdna_gemm.hpp: A through double-buffered LDS, B -- preshuffled 8-bit or plain
[N, K] -- to registers, the K loop pipelined one 128-byte K block deep): cdna_lds_128x128 (4 waves of
128 x 32), its 64-row twin cdna_lds_64x128, and its tiles with K split inside the block, cdna_lds_64x32_k4 (4 K
slices of 2 waves), cdna_lds_32x32_k8 (8 slices) and cdna_lds_64x64_k2 (2 slices of 4 waves). No CDNA template has
cluster split-K, so the split factor is always 1. The choice is the config with the least predicted time (ties: the order of CONFIGS),
cached per (arch, kind, M, N, K).

What the model chooses on the LLM grid (python -m fusedgemm.bench predict): for every kind the LDS split-K tiles up
to M = 64 (the register-direct 16 x 16 tile on two gfx950 fp8 rows, where it is predicted faster), mostly
cdna_lds_64x64_k2 at M = 256, cdna_lds_128x128 from M = 4096 and on gfx950 mostly from M = 1024 (gfx942 at
M = 1024 and sq2048: mostly cdna_lds_64x128; 1024^3: cdna_lds_64x64_k2); gfx950's tf32 (exact fp32 MFMAs,
MFMA-bound from small M) keeps the register-direct tiles on some rows where they tie or win.
"""
from __future__ import annotations

import functools

from ..runtime import kernels, tile_configs
from . import cdna_model

# Ties (rows where several configs reach the same bound, e.g. the HBM floor) go to the first: the LDS-staged template
# before the register-direct one, whose redundant per-wave loads make it the more sensitive to the least certain
# input of the model (the L1 rate); smaller row blocks first (a decode row that 128 x 128 tiles would also stream at
# the HBM floor takes a split-K tile, with more K blocks in flight), but for cdna_lds_64x128 after cdna_lds_128x128:
# where both are MFMA-bound alike (large M on gfx942), the 128-row block reads half the B bytes per output.
CONFIGS = ("cdna_lds_32x32_k8", "cdna_lds_64x32_k4", "cdna_lds_64x64_k2", "cdna_lds_128x128", "cdna_lds_64x128",
           "portable_16x16_k8", "portable_64x16_k8", "portable_128x128")
DEFAULT_ARCH = "gfx942"


def has_block_scaled_kernel(config: str) -> bool:
    """Whether `config` has block-scaled kernels (PortableBlockScaled, block_scales.hpp): every register-direct
    config; an LDS-staged one whose waves hold whole row groups of four 16-row tiles, their columns in one
    128-column scale block (cdna_gemm.hpp's scale hand-out): not cdna_lds_32x32_k8 (two row tiles a wave)."""
    t = tile_configs.CONFIGS[config]
    if not isinstance(t, tile_configs.CdnaTile):
        return True
    return t.tiles_m % 4 == 0 and 128 % (16 * t.tiles_n) == 0


# The plan's configs with block-scaled kernels (blockscale.py's AMD plan chooses among these).
BLOCK_SCALED_CONFIGS = tuple(c for c in CONFIGS if has_block_scaled_kernel(c))


def by_m(m: int) -> str:
    """The plan before the model (and where it has no hot loop for the kind): by M alone."""
    return "portable_16x16_k8" if m <= 16 else "portable_64x16_k8" if m <= 64 else "portable_128x128"


def candidates(arch: str, in_kind: str, configs: tuple[str, ...] = CONFIGS) -> list[str]:
    """The configs (of `configs`) the model can rank for this arch and kind: they serve the kind (a block-scaled
    kind: its base kind, on a config with block-scaled kernels) and have a hot loop."""
    block = in_kind in cdna_model.BLOCK_KINDS
    return [c for c in configs if kernels.GEMM_CONFIGS[c].serves(cdna_model.base_kind(in_kind))
            and (not block or has_block_scaled_kernel(c)) and (arch, c, in_kind) in cdna_model.HOT_LOOPS]


@functools.lru_cache(maxsize=8192)
def choose_name(m: int, n: int, k: int, arch: str = DEFAULT_ARCH, in_kind: str = "fp8") -> str:
    """The config with the least predicted time (a block-scaled kind: of the configs with block-scaled kernels)."""
    arch = arch if arch in cdna_model.HARDWARE else DEFAULT_ARCH
    names = candidates(arch, in_kind)
    if not names or min(m, n, k) <= 0:
        return by_m(m)
    return min(names, key=lambda c: (cdna_model.predict(arch, in_kind, c, m, n, k).seconds, CONFIGS.index(c)))


def choose(m: int, n: int, k: int, arch: str = DEFAULT_ARCH, in_kind: str = "fp8") -> tuple[kernels.TileConfig, int]:
    """-> (tile config, split-K factor 1) with the least predicted time on `arch` for input kind `in_kind`."""
    return kernels.GEMM_CONFIGS[choose_name(m, n, k, arch, in_kind)], 1


@functools.lru_cache(maxsize=4096)
def choose_grouped_name(rows: int, groups: int, n: int, k: int, arch: str = DEFAULT_ARCH, in_kind: str = "fp8",
                        configs: tuple[str, ...] = CONFIGS) -> str:
    """A grouped GEMM's config (gemm_groups.hpp) of `configs`: the least predicted time (cdna_model.predict_grouped)
    for `rows` rows spread evenly over min(groups, rows) experts -- what the call knows before its sizes are read."""
    arch = arch if arch in cdna_model.HARDWARE else DEFAULT_ARCH
    names = candidates(arch, in_kind, configs)
    active = min(groups, rows)
    if not names or min(active, n, k) <= 0:
        return by_m(-(-max(rows, 1) // max(groups, 1)))
    sizes = tuple(rows // active + (1 if i < rows % active else 0) for i in range(active))
    return min(names, key=lambda c: (cdna_model.predict_grouped(arch, in_kind, c, sizes, n, k).seconds,
                                     configs.index(c)))

