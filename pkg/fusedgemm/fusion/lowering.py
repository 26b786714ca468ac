"""A fused region's program (program.py) as one fused GEMM call for inputs of given shapes and dtypes, or
Refused(reason): matmul_fused for the 16-bit kinds, fg.swiglu for the gated ones, gemm_a8 for the 8-bit ones
(program_a8.lower_a8). The runtime (fusion/execute.py) caches the result per input signature.
"""
from __future__ import annotations

import torch

from ..epilogue import ir
from .program import (NONE, Lowered, Operands, Program, Refused, _meta, a8_family, execute, glu_form, lower_steps,
                      rounded)
from .program_a8 import lower_a8


def lower(program: Program, tensors, ints=(), rounding: str = "fp32") -> Lowered:
    """The region as one fused GEMM call for inputs of these shapes / dtypes, or Refused(reason): matmul_fused
    for the 16-bit kinds, fg.swiglu for the gated ones, gemm_a8 for the 8-bit ones (program_a8.lower_a8).

    rounding "fp32": every step in fp32, rounded once at the end (more accurate than eager, which rounds each
    16-bit intermediate); "eager": a rounding point after the GEMM and after each step whose eager result is
    16-bit, so the kernel rounds where eager does."""
    vals = execute(program, [_meta(t) for t in tensors], ints, all_values=True)
    g = program.gemm
    if glu_form(g.kind):
        return _lower_glu(program, tensors, vals)
    if a8_family(g.kind):
        return lower_a8(program, tensors, vals, rounding)
    y0 = vals[0]
    if y0.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise Refused(f"GEMM output dtype {y0.dtype}")
    operand = Operands(tensors, y0.shape[-1])
    # the GEMM and its bias / C term
    acc = ir.acc
    transpose_b = False
    if g.kind == "linear":
        a_i, b_i, bias = g.args[0][1], g.args[1][1], g.args[2]
        layout = "nk"
        env0 = acc if bias == NONE else acc + operand(bias[1], y0.shape)
    else:
        x_i, w_i = (g.args[0][1], g.args[1][1]) if g.kind == "mm" else (g.args[1][1], g.args[2][1])
        a_i, b_i = x_i, w_i
        w = tensors[w_i]
        if w.dim() != 2:
            raise Refused(f"B of {w.dim()} dimensions (a batched matmul)")
        layout = "kn"
        if w.stride(0) == 1 and w.stride(1) == w.shape[0]:  # w = W.t() of a contiguous [N, K] W: read W itself
            layout, transpose_b = "nk", True
        if g.kind == "mm":
            env0 = acc
        else:
            c_ref = g.args[0]
            env0 = (g.alpha * acc if g.alpha != 1.0 else acc)
            if g.beta != 0.0:
                cterm = operand(c_ref[1], y0.shape)
                env0 = env0 + (g.beta * cterm if g.beta != 1.0 else cterm)
    for t in (tensors[a_i], tensors[b_i]):
        if not isinstance(t, torch.Tensor) or t.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise Refused(f"GEMM operand dtype {getattr(t, 'dtype', type(t).__name__)} (matmul_fused takes bf16, "
                          "fp16, fp32)")
    if tensors[a_i].dtype != tensors[b_i].dtype:
        raise Refused(f"A is {tensors[a_i].dtype} and B is {tensors[b_i].dtype}")
    expr, out_v, saved_shape = lower_steps(program, vals, rounded(env0, y0, rounding), operand, rounding)
    return Lowered(a_i, b_i, layout, transpose_b, expr, operand.found, out_v.dtype, tuple(out_v.shape),
                   saved_shape)


def _lower_glu(program: Program, tensors, vals) -> Lowered:
    """act(x Wg^T + bg) * (x Wu^T + bu) as fg.swiglu: one GEMM over the interleaved [Wg; Wu] -- of two weights
    (pair) or of the halves of one merged [2I, K] weight (gate_up / up_gate)."""
    if program.steps:
        raise Refused("elementwise steps after a gated pair")
    form = glu_form(program.gemm.kind)
    args = program.gemm.args
    x, *ws = (None if r == NONE else tensors[r[1]] for r in args)
    if form == "pair":
        wg, bg, wu, bu = ws
        if wg.shape != wu.shape:
            raise Refused(f"gate {tuple(wg.shape)} and up {tuple(wu.shape)} weights differ")
        if (bg is None) != (bu is None):
            raise Refused("a bias on one of gate / up only")
        weights = (wg, wu)
    else:
        w, b = ws
        if w.dim() != 2 or w.shape[0] % 2:
            raise Refused(f"merged gate_up weight of shape {tuple(w.shape)} (expected [2I, K])")
        if b is not None and tuple(b.shape) != (w.shape[0],):
            raise Refused(f"merged gate_up bias of shape {tuple(b.shape)} (expected [2I={w.shape[0]}])")
        weights = (w,)
    if x.dtype not in (torch.bfloat16, torch.float16) or any(w.dtype != x.dtype for w in weights):
        raise Refused(f"gated pair of {x.dtype} x and {' / '.join(str(w.dtype) for w in weights)} weights (the "
                      "fused one is bf16 / fp16)")
    y = vals[0]
    where = {name: (None if r == NONE else r[1], "glu") for name, r in zip(GLU_ARGS[form], args)}
    return Lowered(args[0][1], args[1][1], "glu", False, None, where, y.dtype, tuple(y.shape), None,
                   glu=program.gemm.kind.partition(":")[2], glu_form=form)


GLU_ARGS = {"pair": ("x", "w_gate", "b_gate", "w_up", "b_up"),   # GEMM args of each gated form, in order
            "gate_up": ("x", "w_gate_up", "b_gate_up"), "up_gate": ("x", "w_gate_up", "b_gate_up")}


def glu_inputs(lw: Lowered, tensors) -> list:
    """The GEMM args of a lowered gated GEMM (biases may be None): [x, w_gate, b_gate, w_up, b_up] of a pair,
    [x, w_gate_up, b_gate_up] of a merged weight."""
    return [None if lw.operands[n][0] is None else tensors[lw.operands[n][0]] for n in GLU_ARGS[lw.glu_form]]
