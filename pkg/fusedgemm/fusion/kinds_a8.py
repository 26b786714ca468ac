"""The 8-bit GEMM kinds a fused region may start with, and their torch meaning (what the model's call computes):
torch._scaled_mm / torch._int_mm over a transposed [N, K] weight, fg.gemm_a8 (its registered ops, as
torch.compile records a call) and fg.nn.Linear8. program.execute runs them through execute_a8; program_a8 lowers
them to one gemm_a8 call.

Kinds (Gemm.kind, fields after the family separated by ':'; the args in order):
    scaled_mm:<out>:<w|b>[:fast_accum]   (a, W or b, scale_a, scale_b, bias|NONE)     torch._scaled_mm(a, b, ...)
        "w": the region holds the weight W [N, K] and b = W.t() (the .t() node stays outside the region);
        "b": the region holds b [K, N] itself (gemm_a8 takes it only when it is the transpose of a contiguous W)
    int_mm:<w|b>                         (a, W or b)                                  torch._int_mm(a, b) (int32)
    gemm_a8:<epilogue>:<out>             (a, B, bias|NONE, scale_a|NONE|C, scale_b|NONE|C), Gemm.alpha the op's alpha
    gemm_a8_expr:<out>:<names>:<expr>    (a, B, the tensor operands named in <names>, in that order)
    linear8:<activation>                 (x, weight, weight_scale, bias|NONE): fg.nn.Linear8's forward
B / weight: the `.data` of a PreshuffledWeight (what the registered gemm_a8 ops and Linear8 hold). <out>: one of
OUT_DTYPES' names.
"""
from __future__ import annotations

import torch

from ..epilogue import evaluate, parse
from ..nn.linear8 import linear8_forward
from ..preshuffle import PreshuffledWeight, unshuffle
from ..reference import gemm_a8_reference
from ..runtime.device import emulated_arch
from ..util import cached_on, is_fake

OUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
              "e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
OUT_NAMES = {v: k for k, v in OUT_DTYPES.items()}
FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
A8_FAMILIES = ("scaled_mm", "int_mm", "gemm_a8", "gemm_a8_expr", "linear8")  # 8-bit kinds: program_a8.py


def a8_family(kind: str) -> str:
    """The 8-bit GEMM family of a kind ("scaled_mm:bf16:w" -> "scaled_mm"), or "" (not an 8-bit GEMM)."""
    family = kind.partition(":")[0]
    return family if family in A8_FAMILIES else ""


def fields(kind: str) -> tuple[str, list]:
    family = a8_family(kind)
    rest = kind[len(family) + 1:]
    if family == "gemm_a8_expr":
        return family, rest.split(":", 2)
    return family, rest.split(":") if rest else []


def _is_fake(t) -> bool:
    return isinstance(t, torch.Tensor) and is_fake(t)


def _unshuffled(w: torch.Tensor) -> torch.Tensor:
    return unshuffle(PreshuffledWeight(w))


def execute_a8(g, a: list):
    """The GEMM's own torch meaning (program.execute): what the model's call computes, on any device."""
    family, f = fields(g.kind)
    x = a[0]
    if family == "scaled_mm":
        b = a[1].t() if f[1] == "w" else a[1]
        return torch._scaled_mm(x, b, a[2], a[3], bias=a[4], out_dtype=OUT_DTYPES[f[0]],
                                use_fast_accum=len(f) > 2)
    if family == "int_mm":
        return torch._int_mm(x, a[1].t() if f[0] == "w" else a[1])
    if family == "linear8":
        if _is_fake(x):
            return x.new_empty((*x.shape[:-1], a[1].shape[0]))

        kernels = x.is_cuda or emulated_arch() is not None  # (CPU tensors inside fusedgemm.testing.emulate)
        return linear8_forward(x, a[1], a[2], a[3], f[0], _wrapper(a[1]) if kernels else None)
    w = a[1]
    if family == "gemm_a8":
        epilogue, out = f[0], OUT_DTYPES[f[1]]
        sa, sb, alpha = a[3], a[4], g.alpha
        if not isinstance(sa, torch.Tensor) and sa is not None:
            sa, alpha = None, alpha * float(sa)
        if not isinstance(sb, torch.Tensor) and sb is not None:
            sb, alpha = None, alpha * float(sb)
        if x.device.type == "cpu" and emulated_arch() is None:  # the float64 reference of the kernel's formula

            sa = alpha if sa is None else sa.double() * alpha
            return gemm_a8_reference(x, _unshuffled(w), a[2], scale_a=sa, scale_b=sb, epilogue=epilogue,
                                     out_dtype=out)
        return torch.ops.fusedgemm.gemm_a8(x, w, a[2], sa, sb, alpha, epilogue, out)
    out, names, text = OUT_DTYPES[f[0]], [n for n in f[1].split(",") if n], f[2]
    if x.device.type == "cpu" and emulated_arch() is None:

        acc = x.double() @ _unshuffled(w).double().t()
        return evaluate(parse(text), acc, dict(zip(names, a[2:])), out_dtype=out).to(out)
    return torch.ops.fusedgemm.gemm_a8_expr(x, w, text, ",".join(names), list(a[2:]), "", [], out)[0]


def _wrapper(b: torch.Tensor):
    """A PreshuffledWeight of b itself (no copy), cached on b: it keeps gemm_a8's launch plans between calls."""
    key = (b.data_ptr(), tuple(b.shape), b.stride(), b.dtype, b.device)  # the same storage: no version needed
    return cached_on(b, "_fusedgemm_a8_wrapper", key, lambda: PreshuffledWeight(b.detach()))
