"""gemm_a8's plan on gfx942 / gfx950 (and the mma.sync template kept reachable on sm_90a): the portable MFMA
kernel template's tile configs. Not yet measured on hardware: the choice is by M alone."""
from __future__ import annotations

from ..runtime import kernels

CONFIGS = ("m16n16k8", "m64n16k8", "m128n128")


def choose(m: int, n: int, k: int) -> tuple[kernels.TileConfig, int]:
    """16 x 16 tiles with 8-way in-block split-K for M <= 16, 64 x 16 for M <= 64, 128 x 128 above; no cluster
    split-K."""
    return kernels.GEMM_A8_CONFIGS["m16n16k8" if m <= 16 else "m64n16k8" if m <= 64 else "m128n128"], 1
