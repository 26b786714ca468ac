"""8-bit GEMMs in a fused region (kinds_a8.py names them) lowered to ONE gemm_a8 call whose epilogue expression is
the GEMM's own scaling (scales, bias, activation) followed by the region's elementwise chain -- a final cast to
fp8 included: gemm_a8's saturating fp8 store, i.e. fused output quantization.

The weight gemm_a8 reads: a PreshuffledWeight wrapping B itself (no copy; it keeps gemm_a8's launch plans), or for
scaled_mm / int_mm a preshuffled COPY of W, made once and cached on the weight tensor (its base, for the W.t()
view the graph passes), keyed by address, shape, strides and version counter: an in-place update or a new tensor
makes a new copy, never a stale one (inference tensors, without a version counter, get a fresh copy per call).

use_fast_accum: gemm_a8 promotes fp8 partial sums to fp32 at least every 128 values of K whatever the flag, so the
fused result is at least as accurate as either mode of torch._scaled_mm; the flag only matters to the unfused path.
The fp8 store saturates at the format's largest value (DESIGN.md); eager `.to(float8)` of an out-of-range value
saturates for e4m3fn on the CPU but may give NaN elsewhere (e4m3fnuz: NaN) -- the clamped spelling
`(y / s).clamp(-448, 448).to(torch.float8_e4m3fn)` means the same in both.
"""
from __future__ import annotations

import dataclasses

import torch

from ..epilogue import TORCH_DTYPES, ir, parse, round_to, saved_node
from ..epilogue.evaluate import evaluate_outputs
from ..epilogue.presets import parse_name
from ..gemm_a8 import gemm_a8
from ..preshuffle import preshuffle, unshuffle
from ..quant import quantize_rows
from ..util import cached_on
from .kinds_a8 import FP8, OUT_DTYPES, OUT_NAMES, _wrapper, fields  # noqa: F401  (names of the 8-bit kinds)
from .program import NONE, Lowered, Operands, Refused, lower_steps, rounded

QUANT_SCALE = "quant_scale"  # linear8: the m_vec operand bound to quantize_rows' per-row scale at run time


@dataclasses.dataclass(frozen=True)
class A8Call:
    """How Lowered.a / Lowered.b become gemm_a8's A and B (Lowered.a8)."""
    family: str
    weight: str            # "nk": tensors[b] is W [N, K]; "kn": tensors[b] is W.t(); "preshuffled": B's data
    quantize: bool = False  # linear8: A is x, quantized per row first; operand QUANT_SCALE is its scale


# ---- lowering -----------------------------------------------------------------------------------------------------

def _scale_leaf(operand: Operands, ref, what: str, length: int, shapes: tuple, kind: str, y_shape) -> ir.Node:
    """A scale: one value (scalar), or `length` values in one of `shapes` (an m_vec / n_vec); a C(x) constant."""
    if ref == NONE:
        return ir.const(1.0)
    if ref[0] == "c":
        return ir.const(float(ref[1]))
    t = operand.tensors[ref[1]]
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        raise Refused(f"{what} of dtype {getattr(t, 'dtype', type(t).__name__)} (gemm_a8 takes float32 scales)")
    if t.numel() == 1:
        return operand(ref[1], y_shape, "scalar")
    if tuple(t.shape) not in shapes:
        raise Refused(f"{what} of shape {list(t.shape)} (gemm_a8 takes one value or "
                      f"{' / '.join(str(list(s)) for s in shapes)})")
    return operand(ref[1], y_shape, kind)


def _check_a(x, what: str = "A") -> None:
    if x.dim() != 2:
        raise Refused(f"{what} of {x.dim()} dimensions (gemm_a8 takes [M, K])")
    if not x.is_contiguous():
        layout = "column-major" if x.stride(0) == 1 and x.shape[0] > 1 else "strided"
        raise Refused(f"{layout} {what} (strides {tuple(x.stride())}): gemm_a8 reads a row-major [M, K] A")


def _weight_nk(b, form: str):
    """-> (W [N, K] as gemm_a8 needs it, A8Call.weight) of a scaled_mm / int_mm operand (W, or b = W.t())."""
    if b.dim() != 2:
        raise Refused(f"B of {b.dim()} dimensions")
    if form == "w":
        w = b
    elif b.stride(0) == 1 and (b.stride(1) == b.shape[0] or b.shape[1] == 1):
        w = b.t()
    else:
        raise Refused(f"B [K, N] with strides {tuple(b.stride())} is not the transpose of a contiguous [N, K] "
                      "weight (gemm_a8 reads W [N, K] preshuffled: pass W.t())")
    if not w.is_contiguous():
        raise Refused(f"weight [N, K] with strides {tuple(w.stride())} is not contiguous")
    n, k = w.shape
    if n == 0 or k == 0 or n % 16 or k % 16:
        raise Refused(f"N={n}, K={k}: gemm_a8 needs both positive multiples of 16")
    return w, ("nk" if form == "w" else "kn")


def _act(node: ir.Node, act: str) -> ir.Node:
    return node if act == "none" else ir.unary(act, node)


def _expr_operands(expr: ir.Node, names: list, refs: tuple, operand: Operands, y_shape) -> ir.Node:
    """The op's expression with its operands renamed to the region's t<j> leaves; optional operands the call left
    out become their default constants."""
    by_name = dict(zip(names, refs))

    def rebuild(node):
        if node.op in ("m_vec", "n_vec", "scalar", "aux"):
            name = node.attrs[0]
            if name not in by_name:
                if len(node.attrs) < 2:
                    raise Refused(f"{node.op}({name}) has no value")
                return ir.const(node.attrs[1])
            t = operand.tensors[by_name[name][1]]
            kind = "scalar" if node.op == "scalar" or (node.op != "aux" and t.numel() == 1) else node.op
            return operand(by_name[name][1], y_shape, kind)
        return node if not node.args else dataclasses.replace(node, args=tuple(rebuild(a) for a in node.args))

    return rebuild(expr)


def lower_a8(program, tensors, vals, rounding: str) -> Lowered:
    """The region as one gemm_a8 call (Lowered with a8 set), or Refused(reason)."""
    g = program.gemm
    family, f = fields(g.kind)
    args = g.args
    y0 = vals[0]
    operand = Operands(tensors, y0.shape[-1])
    x, b = tensors[args[0][1]], tensors[args[1][1]]
    for t, what in ((x, "A"), (b, "B")):
        if not isinstance(t, torch.Tensor):
            raise Refused(f"{what} is not a tensor")
    quantize = False
    if family in ("scaled_mm", "int_mm"):
        _check_a(x)
        want = FP8 if family == "scaled_mm" else (torch.int8,)
        if x.dtype not in want or b.dtype != x.dtype:
            raise Refused(f"A {x.dtype} and B {b.dtype} (gemm_a8 takes both {' or '.join(map(str, want))})")
        _w, weight = _weight_nk(b, f[1] if family == "scaled_mm" else f[0])
        m, n = x.shape[0], y0.shape[-1]
        env0 = ir.acc
        if family == "scaled_mm":
            sa = _scale_leaf(operand, args[2], "scale_a", m, ((m, 1),), "m_vec", y0.shape)
            sb = _scale_leaf(operand, args[3], "scale_b", n, ((1, n),), "n_vec", y0.shape)
            env0 = ir.acc * sa * sb
            if args[4] != NONE:
                bias = tensors[args[4][1]]
                if tuple(bias.shape) != (n,):
                    raise Refused(f"bias of shape {list(bias.shape)} (expected [N={n}])")
                env0 = env0 + operand(args[4][1], y0.shape, "n_vec")
    elif family in ("gemm_a8", "gemm_a8_expr"):
        _check_a(x)
        weight = "preshuffled"
        m, n = x.shape[0], b.shape[0]
        if family == "gemm_a8":
            uses_bias, act = parse_name(f[0])
            sa = _scale_leaf(operand, args[3], "scale_a", m, ((m,), (m, 1)), "m_vec", y0.shape)
            sb = _scale_leaf(operand, args[4], "scale_b", n, ((n,), (1, n)), "n_vec", y0.shape)
            env0 = ir.acc * sa * sb
            if g.alpha != 1.0:
                env0 = env0 * g.alpha
            if uses_bias and args[2] != NONE:
                env0 = env0 + operand(args[2][1], y0.shape, "n_vec")
            env0 = _act(env0, act)
        else:
            env0 = _expr_operands(parse(f[2]), [s for s in f[1].split(",") if s], args[2:], operand, y0.shape)
    else:  # linear8
        if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise Refused(f"x of dtype {x.dtype} (Linear8 quantizes bf16 / fp16 / fp32)")
        quantize, weight = True, "preshuffled"
        sw = _scale_leaf(operand, args[2], "weight_scale", b.shape[0], ((b.shape[0],),), "n_vec", y0.shape)
        env0 = ir.acc * ir.m_vec(QUANT_SCALE) * sw
        if args[3] != NONE:
            env0 = env0 + operand(args[3][1], y0.shape, "n_vec")
        env0 = _act(env0, f[0])
    expr, out_v, saved_shape = lower_steps(program, vals, rounded(env0, y0, rounding), operand, rounding,
                                           fp8_out=True)
    if out_v.dtype not in OUT_NAMES:
        raise Refused(f"result dtype {out_v.dtype}")
    return Lowered(args[0][1], args[1][1], "a8", False, expr, operand.found, out_v.dtype, tuple(out_v.shape),
                   saved_shape, a8=A8Call(family, weight, quantize))


# ---- running it ---------------------------------------------------------------------------------------------------

def weight_for(lw: Lowered, tensors):
    """gemm_a8's B for the lowered region: a PreshuffledWeight of B's data itself, or the cached preshuffled copy of
    W (see the module docstring), cached on the weight tensor -- remade when it changes, never stale."""
    b = tensors[lw.b]
    if lw.a8.weight == "preshuffled":
        return _wrapper(b)
    w = b.t() if lw.a8.weight == "kn" else b
    if w.is_inference():  # no version counter: an in-place update could not be seen
        return preshuffle(w.detach())
    owner = w._base if w._base is not None else w  # W.t() is a new view per call: the copy lives on its base
    key = (w.data_ptr(), tuple(w.shape), w.stride(), w.dtype, w.device, w._version)
    attr = f"_fusedgemm_preshuffled_{w.storage_offset()}_{w.shape[0]}x{w.shape[1]}"  # slices of one base apart
    return cached_on(owner, attr, key, lambda: preshuffle(w.detach()))


def _a_and_operands(lw: Lowered, tensors, operand_values):
    a = tensors[lw.a]
    ops = operand_values(lw, tensors)
    if lw.a8.quantize:

        a, ops[QUANT_SCALE] = quantize_rows(a, tensors[lw.b].dtype)
    return a, ops


def run_kernel_a8(lw: Lowered, tensors, operand_values) -> list:
    a, ops = _a_and_operands(lw, tensors, operand_values)
    res = gemm_a8(a, weight_for(lw, tensors), epilogue=lw.expr, operands=ops, out_dtype=lw.out_dtype)
    if lw.saved_shape is None:
        return [res.reshape(lw.out_shape)]
    return [res[0].reshape(lw.out_shape), res[1].reshape(lw.saved_shape)]


def run_oracle_a8(lw: Lowered, tensors, operand_values) -> list:
    """The lowered call in float64 (CPU tests): A (quantized as the kernel path would) times the unshuffled cached
    weight copy -- a stale copy would show -- then the epilogue's evaluator, rounded once (fp8: saturating)."""
    a, ops = _a_and_operands(lw, tensors, operand_values)
    acc = a.double() @ unshuffle(weight_for(lw, tensors)).double().t()
    out, saved = evaluate_outputs(lw.expr, acc, ops)
    outs = [round_to(out, lw.out_dtype).to(lw.out_dtype).reshape(lw.out_shape)]
    if lw.saved_shape is not None:
        outs.append(saved.to(TORCH_DTYPES[saved_node(lw.expr).attrs[0]]).reshape(lw.saved_shape))
    return outs
