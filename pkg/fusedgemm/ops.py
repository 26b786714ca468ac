"""torch.library registration, so torch.compile traces fusedgemm ops as ordinary ops.

Eager calls take a direct path (fusedgemm.gemm_a8 -> launch), since dispatcher overhead is visible at
decode sizes; under torch.compile the public functions call these ops instead.
"""
from __future__ import annotations

from typing import Optional

import torch

from .checks import number_or_scalar_tensor
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
    out = torch.empty((p["m"], p["n_out"]), dtype=p["out_dtype"], device=a.device)
    saved = None if p["saved_dtype"] is None else torch.empty((p["m"], p["n_out"]), dtype=p["saved_dtype"],
                                                              device=a.device)
    with torch.cuda.device(a.device):
        launch_gemm_a8(a, b, p, out, saved)
    return [out] if saved is None else [out, saved]


def _names(joined: str) -> list[str]:
    return joined.split(",") if joined else []


@gemm_a8_expr_op.register_fake
def _gemm_a8_expr_fake(a, b, epilogue, tensor_names, tensors, scalar_names, scalar_values, out_dtype):
    from .epilogue import TORCH_DTYPES, is_paired, parse, saved_node

    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"gemm_a8: A [M, K] and B [N, K] must agree in K, got {tuple(a.shape)} and {tuple(b.shape)}")
    expr = parse(epilogue)
    save = saved_node(expr)
    out = a.new_empty((a.shape[0], b.shape[0] // 2 if is_paired(expr) else b.shape[0]), dtype=out_dtype)
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


# ---- matmul_fused: one op for autograd and torch.compile ----------------------------------------------------------
@torch.library.custom_op("fusedgemm::matmul_fused", mutates_args=())
def matmul_fused_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], c: Optional[torch.Tensor],
                    alpha: float, beta: float, alpha_t: Optional[torch.Tensor], beta_t: Optional[torch.Tensor],
                    activation: str, layout: str, out_dtype: torch.dtype, precision: str,
                    save_pre: bool) -> list[torch.Tensor]:
    """matmul_fused's keyword form; alpha_t / beta_t (1-element float32 tensors) replace alpha / beta when given.
    Returns [y] or, with save_pre and an activation, [y, pre-activation] (what the backward needs)."""
    from .matmul import matmul_fused_forward

    ys = matmul_fused_forward(a, b, bias, layout, alpha if alpha_t is None else alpha_t,
                              beta if beta_t is None else beta_t, c, activation, None, None, out_dtype, None,
                              precision or None, save_pre=save_pre)
    return list(ys) if isinstance(ys, tuple) else [ys]


@matmul_fused_op.register_fake
def _matmul_fused_fake(a, b, bias, c, alpha, beta, alpha_t, beta_t, activation, layout, out_dtype, precision,
                       save_pre):
    n, kb = b.shape if layout == "nk" else (b.shape[1], b.shape[0])
    if b.dim() != 2 or a.shape[-1] != kb:
        raise ValueError(f"matmul_fused: A [..., K] and B ({layout}) must agree in K, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    y = a.new_empty((*a.shape[:-1], n), dtype=out_dtype)
    return [y, a.new_empty(y.shape, dtype=a.dtype)] if save_pre and activation != "none" else [y]


def _matmul_fused_setup(ctx, inputs, output):
    a, b, bias, c, alpha, beta, alpha_t, beta_t, activation, layout, _out_dtype, _precision, _save = inputs
    ctx.activation, ctx.layout, ctx.alpha, ctx.beta = activation, layout, alpha, beta
    ctx.c_shape = None if c is None else tuple(c.shape)
    ctx.c_dtype = None if c is None else c.dtype
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.bias_shape = None if bias is None else tuple(bias.shape)
    pre = output[1] if len(output) > 1 else None
    if pre is not None:
        ctx.mark_non_differentiable(pre)  # the saved pre-activation: no gradient flows into it
    ctx.set_materialize_grads(False)  # so autograd does not fill a zero gradient for it (an M x N pass)
    ctx.save_for_backward(a, b, pre, alpha_t, beta_t)


def _matmul_fused_backward(ctx, grads):
    from .autograd import matmul_fused_grads

    a, b, pre, alpha_t, beta_t = ctx.saved_tensors
    if grads[0] is None:  # grads are not materialised: y took no part in the loss
        return (None,) * 13
    alpha = ctx.alpha if alpha_t is None else alpha_t
    beta = ctx.beta if beta_t is None else beta_t
    da, db, dbias, dc = matmul_fused_grads(ctx, a, b, pre, alpha, beta, grads[0])
    return da, db, dbias, dc, None, None, None, None, None, None, None, None, None


matmul_fused_op.register_autograd(_matmul_fused_backward, setup_context=_matmul_fused_setup)


@torch.library.custom_op("fusedgemm::matmul_fused_expr", mutates_args=())
def matmul_fused_expr_op(a: torch.Tensor, b: torch.Tensor, epilogue: str, tensor_names: str,
                         tensors: list[torch.Tensor], scalar_names: str, scalar_values: list[float], layout: str,
                         out_dtype: torch.dtype, precision: str) -> list[torch.Tensor]:
    """matmul_fused with an epilogue expression (canonical text; operands as in gemm_a8_expr). Not differentiable."""
    from .epilogue import parse
    from .matmul import matmul_fused_forward

    operands = dict(zip(_names(tensor_names), tensors))
    operands.update(zip(_names(scalar_names), scalar_values))
    ys = matmul_fused_forward(a, b, None, layout, 1.0, 0.0, None, "none", parse(epilogue), operands, out_dtype, None,
                              precision or None)
    return list(ys) if isinstance(ys, tuple) else [ys]


@matmul_fused_expr_op.register_fake
def _matmul_fused_expr_fake(a, b, epilogue, tensor_names, tensors, scalar_names, scalar_values, layout, out_dtype,
                            precision):
    from .epilogue import TORCH_DTYPES, is_paired, parse, saved_node

    n = b.shape[0] if layout == "nk" else b.shape[1]
    expr = parse(epilogue)
    n = n // 2 if is_paired(expr) else n  # a paired epilogue (gate, up) writes N / 2 columns
    save = saved_node(expr)
    out = a.new_empty((*a.shape[:-1], n), dtype=out_dtype)
    return [out] if save is None else [out, a.new_empty(out.shape, dtype=TORCH_DTYPES[save.attrs[0]])]


def matmul_fused_via_op(a, b, bias, layout, alpha, beta, c, activation, epilogue, operands, out_dtype, out,
                        precision):
    """matmul_fused through the registered ops: under torch.compile, and eagerly when a gradient is needed."""
    from . import epilogue as _epi

    if out_dtype is None:
        out_dtype = out.dtype if isinstance(out, torch.Tensor) else a.dtype
    if isinstance(epilogue, _epi.Node):
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in (a, b, *(operands or {}).values())) \
                and torch.is_grad_enabled():
            raise NotImplementedError("matmul_fused: epilogue expressions are not differentiable yet; use the "
                                      "keyword form (bias, c, alpha, beta, activation) or torch.no_grad()")
        ops = dict(operands or {})
        tensors = {k: v for k, v in ops.items() if isinstance(v, torch.Tensor)}
        scalars = {k: float(v) for k, v in ops.items() if not isinstance(v, torch.Tensor)}
        ys = torch.ops.fusedgemm.matmul_fused_expr(a, b, str(epilogue), ",".join(tensors), list(tensors.values()),
                                                   ",".join(scalars), list(scalars.values()), layout, out_dtype,
                                                   precision or "")
    else:
        if epilogue is not None:
            raise TypeError(f"matmul_fused: epilogue must be a fusedgemm.epilogue expression or None, got "
                            f"{type(epilogue).__name__}")
        for v, name in ((alpha, "alpha"), (beta, "beta")):
            if isinstance(v, torch.Tensor) and v.requires_grad and torch.is_grad_enabled():
                raise NotImplementedError(f"matmul_fused: {name} is not differentiable (a, b, bias and c are)")
            number_or_scalar_tensor(v, name)  # the op takes floats: say what came before float() does
        alpha_t = alpha if isinstance(alpha, torch.Tensor) else None
        beta_t = beta if isinstance(beta, torch.Tensor) else None
        save_pre = torch.is_grad_enabled() and activation != "none" and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in (a, b, bias, c))
        ys = torch.ops.fusedgemm.matmul_fused(a, b, bias, c, 1.0 if alpha_t is not None else float(alpha),
                                              0.0 if beta_t is not None else float(beta), alpha_t, beta_t,
                                              activation, layout, out_dtype, precision or "", save_pre)
    if out is not None:
        out.copy_(ys[0])
        ys = [out, *ys[1:]]
    if isinstance(epilogue, _epi.Node):
        return ys[0] if len(ys) == 1 else (ys[0], ys[1])
    return ys[0]


@torch.library.custom_op("fusedgemm::fused_region", mutates_args=())
def fused_region_op(tensors: list[torch.Tensor], ints: list[int], program: str, rounding: str) -> list[torch.Tensor]:
    """A region cut by the fusion pass (fusedgemm.fusion): one fused GEMM where it is faster, else the region's
    own torch calls. Not differentiable (the pass leaves regions that need a gradient to Inductor)."""
    from .fusion.runtime import run_region

    return [y.contiguous() for y in run_region(program, tensors, ints, rounding)]


@fused_region_op.register_fake
def _fused_region_fake(tensors, ints, program, rounding):
    from .fusion.program import execute, loads

    return [torch.empty(y.shape, dtype=y.dtype, device=y.device) for y in execute(loads(program), tensors, ints)]


# ---- quantize_rows: dynamic per-row 8-bit quantization (quant.py) ---------------------------------------------
@torch.library.custom_op("fusedgemm::quantize_rows", mutates_args=())
def quantize_rows_op(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] -> (codes [M, K] of dtype, scale [M] float32); the kernel on a GPU, torch ops on the CPU."""
    from .quant import quantize_rows_forward

    return quantize_rows_forward(x, dtype)


@quantize_rows_op.register_fake
def _quantize_rows_fake(x, dtype):
    k = x.shape[-1]
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    return x.new_empty((m, k), dtype=dtype), x.new_empty((m,), dtype=torch.float32)
