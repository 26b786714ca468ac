"""gemm_a8's plan on gfx942 / gfx950 (and the mma.sync template kept reachable on sm_90a): the portable MFMA
kernel template's tile configs. Not yet measured on hardware: the choice is by M alone."""
from __future__ import annotations

from ..runtime import kernels

CONFIGS = ("portable_16x16_k8", "portable_64x16_k8", "portable_128x128")


def choose(m: int, n: int, k: int) -> tuple[kernels.TileConfig, int]:
    """16 x 16 tiles with 8-way in-block split-K for M <= 16, 64 x 16 for M <= 64, 128 x 128 above; no cluster
    split-K."""
    name = "portable_16x16_k8" if m <= 16 else "portable_64x16_k8" if m <= 64 else "portable_128x128"
    return kernels.GEMM_CONFIGS[name], 1
