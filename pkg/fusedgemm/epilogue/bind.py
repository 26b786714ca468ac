"""Binding a call's operands to an epilogue expression: checks (named, before any compile) and Params values.

    binding = bind(expr, operands, m, n, device, op="gemm_a8")
    binding.spec                    # EpilogueSpec: the expression + the element types of its tensor operands
    binding.values                  # {Params field: value} for everything but the outputs
    binding.saved_dtype             # torch dtype of the save(...) output, or None
"""
from __future__ import annotations

import dataclasses

import torch

from . import ir
from .codegen import EpilogueSpec
from .evaluate import TORCH_DTYPES
from ..util import is_fake as _is_fake

VEC_TORCH = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


@dataclasses.dataclass
class Binding:
    spec: EpilogueSpec
    values: dict
    saved_dtype: torch.dtype | None


def _check_on(t: torch.Tensor, what: str, device, op: str):
    if t.device != device:
        raise ValueError(f"{op}: {what} is on {t.device}, expected {device} (the device of A)")


def vec_operand(t, what: str, length: int, axis: str, device, op: str):
    """-> (ptr, stride, dtype name) of a vector operand: [length] with any stride, or one value."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {what} must be a tensor, got {type(t).__name__}")
    if t.dtype not in VEC_TORCH:
        raise TypeError(f"{op}: {what} must be float32, bfloat16 or float16, got {t.dtype}")
    _check_on(t, what, device, op)
    if t.numel() == 1:
        stride = 0
    elif t.dim() == 1 and t.shape[0] == length:
        stride = t.stride(0)
    else:
        raise ValueError(f"{op}: {what} must be [{axis}={length}] or hold one value, got shape {tuple(t.shape)}")
    if not _is_fake(t) and t.data_ptr() % t.element_size():
        raise ValueError(f"{op}: {what} is not aligned to its element size ({t.element_size()} bytes)")
    name = VEC_TORCH[t.dtype]
    return t.data_ptr() if not _is_fake(t) else 0, stride, name


def bind(expr: ir.Node, operands: dict | None, m: int, n: int, device, op: str = "gemm_a8",
         n_len: int | None = None) -> Binding:
    """Check every operand of `expr` against the call; raise ValueError/TypeError naming the node. n_len: the
    length of n_vec operands when it is not n (a grouped GEMM's G * N: one N-long slice per group)."""
    ir.validate(expr)
    operands = dict(operands or {})
    if not all(isinstance(k, str) for k in operands):
        raise TypeError(f"{op}: operands must be a dict keyed by operand name")
    used = ir.operands(expr)
    extra = sorted(set(operands) - set(used))
    if extra:
        raise ValueError(f"{op}: operands {extra} are not used by the epilogue {expr}; it uses "
                         f"{', '.join(ir._leaf_text(o) for o in used.values()) or 'none'}")
    values, dtypes = {}, {}
    for name, o in used.items():
        f = f"op_{name}"
        v = operands.get(name)
        what = ir._leaf_text(o)
        if o.kind == "scalar":
            if v is None:
                raise ValueError(f"{op}: {what} has no value: pass operands[{name!r}] (a number or a 1-element "
                                 "float32 tensor)")
            if isinstance(v, torch.Tensor):
                if v.numel() != 1 or v.dtype != torch.float32:
                    raise TypeError(f"{op}: {what} must be a number or a 1-element float32 tensor, got "
                                    f"{v.dtype} of shape {tuple(v.shape)}")
                _check_on(v, what, device, op)
                values.update({f + "_ptr": 0 if _is_fake(v) else v.data_ptr(), f: 0.0})
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                values.update({f + "_ptr": 0, f: float(v)})
            else:
                raise TypeError(f"{op}: {what} must be a number or a 1-element float32 tensor, got "
                                f"{type(v).__name__}")
            values[f + "_pad"] = 0
        elif o.kind == "aux":
            if v is None:
                raise ValueError(f"{op}: {what} has no value: pass operands[{name!r}], an [M={m}, N={n}] tensor")
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"{op}: {what} must be a tensor, got {type(v).__name__}")
            if v.dtype not in VEC_TORCH:
                raise TypeError(f"{op}: {what} must be float32, bfloat16 or float16, got {v.dtype}")
            if tuple(v.shape) != (m, n):
                raise ValueError(f"{op}: {what} must be [M={m}, N={n}], got {tuple(v.shape)}")
            _check_on(v, what, device, op)
            ld = v.stride(0) if m > 1 else n + n % 2  # one row: its stride is never used (kept even)
            if n > 1 and v.stride(1) != 1:
                raise ValueError(f"{op}: {what} must have unit column stride, got strides {tuple(v.stride())}")
            if ld % 2 or (not _is_fake(v) and v.data_ptr() % (2 * v.element_size())):
                raise ValueError(f"{op}: {what} must be aligned to two elements with an even row stride, got "
                                 f"row stride {ld}")
            values.update({f: 0 if _is_fake(v) else v.data_ptr(), f + "_ld": ld})
            dtypes[name] = VEC_TORCH[v.dtype]
        else:
            length, axis = (m, "M") if o.kind == "m_vec" else (n if n_len is None else n_len,
                                                               "N" if n_len is None else "G * N")
            if v is None:
                if o.default is None:
                    raise ValueError(f"{op}: {what} has no value: pass operands[{name!r}], a [{axis}={length}] "
                                     "tensor (or give the operand a default to make it optional)")
                values.update({f: 0, f + "_stride": 0, f + "_kind": 0})
                dtypes[name] = "f32"
                continue
            ptr, stride, dt = vec_operand(v, what, length, axis, device, op)
            values.update({f: ptr, f + "_stride": stride, f + "_kind": 0})
            dtypes[name] = dt
    save = ir.saved_node(expr)
    return Binding(EpilogueSpec.of(expr, dtypes), values,
                   None if save is None else TORCH_DTYPES[save.attrs[0]])
