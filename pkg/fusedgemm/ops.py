"""torch.library registration, so torch.compile traces fusedgemm ops as ordinary ops.

Eager calls take a direct path (fusedgemm.gemm_a8 -> launch), since dispatcher overhead is visible at
decode sizes; under torch.compile the public functions call these ops instead.
"""
from __future__ import annotations

from typing import Optional

import torch

from .gemm_a8 import check_gemm_a8_args, launch_gemm_a8
from .preshuffle import PreshuffledWeight


@torch.library.custom_op("fusedgemm::gemm_a8", mutates_args=())
def gemm_a8_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], scale_a: Optional[torch.Tensor],
               scale_b: Optional[torch.Tensor], alpha: float, epilogue: str, out_dtype: torch.dtype) -> torch.Tensor:
    """b is the `.data` of a PreshuffledWeight (fusedgemm.gemm_a8 unwraps it); everything is checked here."""
    p = check_gemm_a8_args(a, PreshuffledWeight(b), bias, scale_a, scale_b, epilogue, out_dtype, None)
    out = torch.empty((p["m"], p["n"]), dtype=out_dtype, device=a.device)
    p["values"]["op_alpha"] *= alpha
    with torch.cuda.device(a.device):
        launch_gemm_a8(a, b, p, out)
    return out


@gemm_a8_op.register_fake
def _gemm_a8_fake(a, b, bias, scale_a, scale_b, alpha, epilogue, out_dtype):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"gemm_a8: A [M, K] and B [N, K] must agree in K, got {tuple(a.shape)} and {tuple(b.shape)}")
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("fusedgemm::bmm_tiny", mutates_args=())
def bmm_tiny_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    from .tiny_gemm import _bmm_tiny_forward

    return _bmm_tiny_forward(a, b)


@bmm_tiny_op.register_fake
def _bmm_tiny_fake(a, b):
    if a.dim() != 3 or b.dim() not in (2, 3) or b.shape[-2] != a.shape[2]:
        raise ValueError(f"bmm_tiny: a [B, m, k] and b [B|1, k, n] / [k, n] must agree, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    return a.new_empty((a.shape[0], a.shape[1], b.shape[-1]))


def _bmm_tiny_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _bmm_tiny_backward(ctx, grad):
    from .tiny_gemm import bmm_grads

    a, b = ctx.saved_tensors
    return bmm_grads(a, b, grad, ctx.needs_input_grad, bmm_tiny_op)


bmm_tiny_op.register_autograd(_bmm_tiny_backward, setup_context=_bmm_tiny_setup)
