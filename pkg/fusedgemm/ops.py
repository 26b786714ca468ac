"""torch.library registration, so torch.compile traces fusedgemm ops as ordinary ops.

Eager calls take a direct path (fusedgemm.gemm_a8 -> launch), since dispatcher overhead is visible at
decode sizes; under torch.compile the public functions call these ops instead.
"""
from __future__ import annotations

from typing import Optional

import torch

from .epilogues import parse_epilogue
from .gemm_a8 import launch_gemm_a8


@torch.library.custom_op("fusedgemm::gemm_a8", mutates_args=())
def gemm_a8_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], scale_a: Optional[torch.Tensor],
               scale_b: Optional[torch.Tensor], alpha: float, epilogue: str, out_dtype: torch.dtype) -> torch.Tensor:
    """b is the `.data` of a PreshuffledWeight; arguments were validated by fusedgemm.gemm_a8."""
    _uses_bias, act = parse_epilogue(epilogue)
    out = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    sa_stride = 0 if scale_a is None or scale_a.numel() == 1 else 1
    sb_stride = 0 if scale_b is None or scale_b.numel() == 1 else 1
    in_kind = "int8" if a.dtype == torch.int8 else "fp8"
    launch_gemm_a8(a, b, bias, scale_a, sa_stride, scale_b, sb_stride, alpha, act, in_kind, out)
    return out


@gemm_a8_op.register_fake
def _gemm_a8_fake(a, b, bias, scale_a, scale_b, alpha, epilogue, out_dtype):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)
