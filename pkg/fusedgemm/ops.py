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


@torch.library.custom_op("fusedgemm::gemm_a8_expr", mutates_args=())
def gemm_a8_expr_op(a: torch.Tensor, b: torch.Tensor, epilogue: str, tensor_names: str,
                    tensors: list[torch.Tensor], scalar_names: str, scalar_values: list[float],
                    out_dtype: torch.dtype) -> list[torch.Tensor]:
    """gemm_a8 with an epilogue expression (its canonical text); operands split into tensors and Python
    scalars, their names comma-separated (operand names are identifiers; a schema has no list of strings).
    Returns [out] or [out, saved] (an expression with save(...))."""
    from .epilogue import parse

    operands = dict(zip(_names(tensor_names), tensors))
    operands.update(zip(_names(scalar_names), scalar_values))
    p = check_gemm_a8_args(a, PreshuffledWeight(b), None, None, None, parse(epilogue), out_dtype, None,
                           operands=operands)
    out = torch.empty((p["m"], p["n"]), dtype=p["out_dtype"], device=a.device)
    saved = None if p["saved_dtype"] is None else torch.empty((p["m"], p["n"]), dtype=p["saved_dtype"],
                                                              device=a.device)
    with torch.cuda.device(a.device):
        launch_gemm_a8(a, b, p, out, saved)
    return [out] if saved is None else [out, saved]


def _names(joined: str) -> list[str]:
    return joined.split(",") if joined else []


@gemm_a8_expr_op.register_fake
def _gemm_a8_expr_fake(a, b, epilogue, tensor_names, tensors, scalar_names, scalar_values, out_dtype):
    from .epilogue import TORCH_DTYPES, parse, saved_node

    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"gemm_a8: A [M, K] and B [N, K] must agree in K, got {tuple(a.shape)} and {tuple(b.shape)}")
    save = saved_node(parse(epilogue))
    out = a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)
    return [out] if save is None else [out, a.new_empty(out.shape, dtype=TORCH_DTYPES[save.attrs[0]])]


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
