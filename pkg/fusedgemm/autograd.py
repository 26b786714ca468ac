"""The backward of matmul_fused (keyword form): y = act(pre), pre = alpha * (A @ B) + beta * c + bias.

    d pre  = dy * act'(pre)                 the forward saved pre (the epilogue's second output) when a gradient
                                            was needed, so no GEMM is recomputed
    dA     = alpha * d pre @ B^T            dB = alpha * A^T @ d pre (in B's layout)
    dbias  = sum over rows of d pre         dc = beta * d pre, summed down to c's broadcast shape

Today the two GEMMs run as torch.mm (dW reads A transposed: the package has no MN-major A kernel yet) and act'
as torch's own activation backward kernel (relu, silu, gelu, gelu_erf) or torch elementwise ops in fp32 (the
other activations); docs/perf-notes.md has the plan to fuse them.
"""
from __future__ import annotations

import torch

from .epilogue.evaluate import _UNARY


# The activations torch has a fused backward kernel for: one pass over dy and pre, in their own dtype (as
# torch's eager backward of nn.Linear + activation runs it).
_NATIVE_BACKWARD = {
    "relu": lambda dy, pre: torch.ops.aten.threshold_backward(dy, pre, 0),
    "silu": lambda dy, pre: torch.ops.aten.silu_backward(dy, pre),
    "gelu": lambda dy, pre: torch.ops.aten.gelu_backward(dy, pre, approximate="tanh"),
    "gelu_erf": lambda dy, pre: torch.ops.aten.gelu_backward(dy, pre),
}


def activation_grad(activation: str, pre: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dy * act'(pre): torch's fused backward kernel where it has one (in dy's dtype), else in fp32 (float64
    for float64 tensors: the reference path) through torch's autograd of the activation's float definition (the
    formulas of the float64 oracle: every IR activation has its exact derivative)."""
    if activation in _NATIVE_BACKWARD:
        return _NATIVE_BACKWARD[activation](dy, pre.to(dy.dtype))
    dt = torch.promote_types(dy.dtype, torch.float32)
    if activation == "none":
        return dy
    with torch.enable_grad():
        p = pre.detach().to(dt).requires_grad_(True)
        (g,) = torch.autograd.grad(_UNARY[activation](p), p, dy.to(dt))
    return g


def matmul_fused_grads(ctx, a, b, pre, alpha, beta, dy):
    """-> (dA, dB, dbias, dc), None where no gradient is needed. ctx: activation, layout, c_shape/dtype,
    bias_shape/dtype, needs_input_grad."""
    need_a, need_b, need_bias, need_c = ctx.needs_input_grad[:4]
    n = dy.shape[-1]
    dy2 = dy.reshape(-1, n)
    dpre = activation_grad(ctx.activation, None if pre is None else pre.reshape(-1, n), dy2)
    a2 = a.reshape(-1, a.shape[-1])
    da = db = dbias = dc = None
    if need_a or need_b:
        # The GEMM inputs in the input type, as torch's own backward does.
        g = dpre.to(a.dtype) if isinstance(alpha, float) and alpha == 1.0 else (dpre * alpha).to(a.dtype)
        b_nk = b if ctx.layout == "nk" else b.t()
        if need_a:
            da = (g @ b_nk).reshape(a.shape)
        if need_b:
            db_nk = g.t() @ a2
            db = db_nk if ctx.layout == "nk" else db_nk.t()
    if need_bias:
        dbias = dpre.sum(0, dtype=torch.promote_types(dpre.dtype, torch.float32)).to(ctx.bias_dtype).reshape(
            ctx.bias_shape)
    if need_c:
        gc = dpre * beta
        m, shape = gc.shape[0], ctx.c_shape
        if len(shape) >= 2 and shape in ((m, n), (*dy.shape[:-1], n)):  # the forms checks._c_form tells apart
            pass
        elif shape in ((n,), (1, n)):
            gc = gc.sum(0)
        else:  # [M, 1]
            gc = gc.sum(1, keepdim=True)
        dc = gc.to(ctx.c_dtype).reshape(shape)
    return da, db, dbias, dc
