"""The argument checks of gemm_a8 and matmul_fused: every input validated with a message saying what was expected
and what came, before any kernel is planned or compiled. check_gemm_a8_args / check_matmul_fused_args return the
normalized pieces the launch (or, for CPU tensors, the torch reference) needs. One core serves both ops: the
arch a call is checked for (arch_of), out / out_dtype (out_dtype_of, check_out), device / contiguity /
alignment (check_placement) and the epilogue forms (epilogue.presets.resolve), each with one wording."""
from __future__ import annotations

import numbers

import torch

from . import blockscale as _blockscale
from . import pending as _pending
from . import epilogue as _epi
from .epilogue.bind import VEC_TORCH, bind as _bind_epilogue
from .epilogue.codegen import DYN_KINDS
from .epilogue.presets import (activation_name, preset_for_activation, preset_name, resolve as resolve_epilogue,
                               spec_for_activation)
from .preshuffle import LAYOUT_16x16, PreshuffledWeight
from .runtime.arch import device_arch
from .runtime.device import emulated_arch
from .util import is_fake as _is_fake

_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# The fp8 variant each arch's tensor cores read. gfx942 reads e4m3fnuz; sm_90 and gfx950 read OCP e4m3fn.
FP8_DTYPE_FOR_ARCH = {"sm_90a": torch.float8_e4m3fn, "gfx950": torch.float8_e4m3fn, "gfx942": torch.float8_e4m3fnuz}
# Output types: bf16 / fp16 (preset kernels ahead of time), fp32 and the arch's fp8 (saturating; compiled just in
# time, as is any epilogue expression).
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.float8_e4m3fnuz)

def _in_kind(dtype: torch.dtype, what: str) -> str:
    if dtype in _FP8_DTYPES:
        return "fp8"
    if dtype == torch.int8:
        return "int8"
    raise TypeError(f"gemm_a8: {what} must be float8_e4m3fn, float8_e4m3fnuz or int8, got {dtype}")


def _dtype_list(dtypes) -> str:
    return ", ".join(map(str, dtypes))


def arch_of(op: str, device: torch.device, arch: str | None) -> str:
    """The arch a call is checked for: `arch` when given (tests check GPU rules on CPU tensors), 'cpu' for CPU
    tensors (the torch reference path: no kernel) -- inside fusedgemm.testing.emulate(arch) the emulated arch
    (runtime.device.emulated_arch) --, else read off the GPU."""
    if arch is not None:
        return arch
    if device.type == "cpu":
        return emulated_arch() or "cpu"
    if device.type != "cuda":
        raise ValueError(f"{op}: tensors must be on a GPU (cuda/ROCm device) or the CPU, A is on {device}")
    return device_arch(device.index if device.index is not None else torch.cuda.current_device())


def out_dtype_of(op: str, out, out_dtype, allowed: tuple, default: torch.dtype) -> torch.dtype:
    """The output dtype of a call: out_dtype, else out's dtype, else `default`; `out` a tensor of an allowed
    dtype, agreeing with out_dtype when both are given."""
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"{op}: out must be a tensor or None, got {type(out).__name__}")
        if out.dtype not in allowed:
            raise TypeError(f"{op}: out must be one of {_dtype_list(allowed)}, got an out of {out.dtype}")
        if out_dtype is None:
            out_dtype = out.dtype
        elif out.dtype != out_dtype:
            raise ValueError(f"{op}: out is {out.dtype} but out_dtype is {out_dtype}; give one of them (out_dtype "
                             "defaults to out's dtype)")
    if out_dtype is None:
        out_dtype = default
    if out_dtype not in allowed:
        raise TypeError(f"{op}: out_dtype must be one of {_dtype_list(allowed)}, got {out_dtype}")
    return out_dtype


def check_placement(op: str, t: torch.Tensor, name: str, device: torch.device, align: int = 0,
                    check_ptr: bool = False, contiguous: bool = True) -> None:
    """t on A's device, contiguous (when asked) and, with check_ptr, `align`-byte aligned."""
    if t.device != device:
        raise ValueError(f"{op}: {name} is on {t.device}, expected {device} (the device of A)")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{op}: {name} must be contiguous, got strides {tuple(t.stride())} for shape "
                         f"{tuple(t.shape)}")
    if check_ptr and align and t.numel() and t.data_ptr() % align:
        raise ValueError(f"{op}: {name} must be {align}-byte aligned, got address {t.data_ptr():#x} "
                         f"(offset {t.data_ptr() % align}); pass a fresh contiguous tensor")


def check_out(op: str, out: torch.Tensor, shapes: tuple, n_out: int, n: int, device, align: int,
              check_ptr: bool) -> None:
    """out: one of `shapes` (the first is named in the message), on A's device, contiguous, aligned."""
    if tuple(out.shape) not in shapes:
        raise ValueError(f"{op}: out must be {list(shapes[0])}"
                         + (" (or A's leading dims + [N])" if len(shapes) > 1 and shapes[1] != shapes[0] else "")
                         + f", got {list(out.shape)}" + (" (a paired epilogue writes N / 2 columns)" if n_out != n
                                                          else ""))
    check_placement(op, out, "out", device, align, check_ptr)


def _check_tensor_placement(t: torch.Tensor, name: str, device: torch.device, align: int, check_ptr: bool):
    check_placement("gemm_a8", t, name, device, align, check_ptr)


def _scale_args(scale, name: str, length: int, device, check_ptr: bool, blocks_text: str = ""):
    """-> (tensor or None, stride, python factor). Tensor scales: fp32, one value (shape [], [1], [1, 1]) or
    `length` values: scale_a [M] or [M, 1], scale_b [N] or [1, N] (the layouts torch._scaled_mm takes)."""
    if scale is None:
        return None, 0, 1.0
    if not isinstance(scale, torch.Tensor):
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
            raise TypeError(f"gemm_a8: {name} must be a float32 tensor, a real number or None, got "
                            f"{type(scale).__module__}.{type(scale).__name__}")
        return None, 0, float(scale)
    if scale.dtype != torch.float32:
        raise TypeError(f"gemm_a8: {name} must be float32, got {scale.dtype}")
    shape = tuple(scale.shape)
    if scale.numel() == 1 and scale.dim() <= 2:
        _check_tensor_placement(scale, name, device, 4, check_ptr)
        return scale, 0, 1.0
    vector_shapes = ((length,), (length, 1)) if name == "scale_a" else ((length,), (1, length))
    if shape not in vector_shapes:
        raise ValueError(f"gemm_a8: {name} must hold 1 or {length} values as "
                         f"{' or '.join(str(list(s)) for s in vector_shapes)} (or one value){blocks_text}, got shape "
                         f"{list(shape)}")
    _check_tensor_placement(scale, name, device, 4, check_ptr)
    return scale, 1, 1.0


def check_gemm_a8_args(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, *, operands=None,
                       arch: str | None = None):
    """Validate everything; return the normalized pieces the launch needs: shapes, the epilogue spec and the
    values of its Params (outputs excepted).

    epilogue: a preset name (bias / scale_a / scale_b arguments) or an epilogue expression (fusedgemm.epilogue;
    its operands by name in `operands`). out_dtype None: out's dtype, else bfloat16. A paired expression (gate,
    up: fusedgemm.epilogue) writes n_out = N / 2 columns (out, its operands and its save() output are
    [M, N / 2]); otherwise n_out = N.
    epilogue may also be None (identity) or expression text (parsed); `expr` in the result is the expression
    (a preset's too) and `operands` its operands by name (what the CPU reference evaluates).
    arch=None: read off A's GPU, or 'cpu' for CPU tensors (arch_of). Tests pass an arch explicitly to run a
    GPU's checks on CPU tensors."""
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"gemm_a8: A must be a torch.Tensor, got {type(a).__name__}")
    if not isinstance(b, PreshuffledWeight):
        if isinstance(b, torch.Tensor):
            raise TypeError("gemm_a8: B must be preshuffled: pass fusedgemm.preshuffle(w) for an [N, K] weight "
                            f"(got a plain {b.dtype} tensor of shape {tuple(b.shape)})")
        raise TypeError(f"gemm_a8: B must be a PreshuffledWeight from fusedgemm.preshuffle, got {type(b).__name__}")
    if b.layout != LAYOUT_16x16:
        raise ValueError(f"gemm_a8: B has layout {b.layout!r}, expected {LAYOUT_16x16!r}")
    if b.groups is not None:
        raise ValueError(f"gemm_a8: B holds {b.groups} experts' weights {list(b.shape)}; a grouped weight is for "
                         "fusedgemm.grouped_gemm_a8 (pass one expert's [N, K] weight to gemm_a8)")
    epilogue = resolve_epilogue("gemm_a8", epilogue)
    if isinstance(epilogue, _epi.Node):
        uses_bias, act = None, None
        # (bias / scales by name in operands: checked below, once block scales -- main-loop scales -- are apart)
    else:
        uses_bias, act = epilogue
        epilogue = preset_name(uses_bias, act)  # its canonical (lower-case) name
        if operands:
            raise ValueError(f"gemm_a8: operands are for epilogue expressions; the preset {epilogue!r} takes "
                             "bias, scale_a and scale_b")
    out_dtype = out_dtype_of("gemm_a8", out, out_dtype, OUT_DTYPES, torch.bfloat16)
    in_kind = _in_kind(a.dtype, "A")
    _in_kind(b.dtype, "B")
    if b.dtype != a.dtype:
        raise TypeError(f"gemm_a8: B was preshuffled as {b.dtype} but A is {a.dtype}; they must match")
    if a.dim() != 2:
        raise ValueError(f"gemm_a8: A must be 2-D [M, K], got shape {tuple(a.shape)}")
    m, k = a.shape
    n, kb = b.shape
    if kb != k:
        raise ValueError(f"gemm_a8: A is [M={m}, K={k}] but B is [N={n}, K={kb}]; K must agree")
    if k == 0:
        raise ValueError(f"gemm_a8: K must be positive, got K={k}")
    # Block scales (blockscale.py: 1x128 / 128x128, selected by shape) run in the main loop; the rest as before.
    blocks, scale_a, scale_b = _blockscale.split_block_scales(scale_a, scale_b, m, n, k, a.dtype)
    if uses_bias is None:
        check_no_preset_operands(bias, scale_a, scale_b)
    if b.data.dim() != 2 or b.data.shape[0] % 16 or b.data.shape[1] % 16:
        raise ValueError(f"gemm_a8: B's stored data {list(b.data.shape)} is not a (16,16) preshuffled weight (its "
                         "extents are multiples of 16); make B with fusedgemm.preshuffle")
    device = a.device
    arch = arch_of("gemm_a8", device, arch)
    check_ptr = not _is_fake(a)
    n_out = paired_width("gemm_a8", epilogue, n)
    if in_kind == "fp8" and arch != "cpu" and a.dtype != FP8_DTYPE_FOR_ARCH[arch]:
        raise TypeError(f"gemm_a8: {arch} needs fp8 as {FP8_DTYPE_FOR_ARCH[arch]}, got {a.dtype}")
    # A whose K is not a multiple of 16 is copied into a zero-padded buffer (gemm_a8.py): any strides then
    _check_tensor_placement(a, "A", device, 16, check_ptr) if k % 16 == 0 else check_placement("gemm_a8", a, "A",
                                                                                                device, contiguous=False)
    _check_tensor_placement(b.data, "B", device, 16, check_ptr)
    if out_dtype in _FP8_DTYPES and arch != "cpu" and out_dtype != FP8_DTYPE_FOR_ARCH[arch]:
        raise TypeError(f"gemm_a8: {arch} writes fp8 as {FP8_DTYPE_FOR_ARCH[arch]}, got out_dtype {out_dtype}")
    if out is not None:
        check_out("gemm_a8", out, ((m, n_out),), n_out, n, device, 2 * out.element_size(), check_ptr)
    if blocks is not None:
        _blockscale.check_block_placement(blocks, device, check_ptr)
        _blockscale.check_block_arch(blocks, arch)
        if blocks.b is not None and n_out != n:  # a gate / up pair: the table is pair-ordered
            if n % 256:
                raise ValueError(f"gemm_a8: the block scale_b of a gate / up pair is pair-ordered per 128 gate / up "
                                 f"rows (rows 2q, 2q + 1: the gate's and the up's block q; block_scales.hpp): N must "
                                 f"be a multiple of 256, got N={n}")
            if arch == "sm_90a":
                _pending.refuse("gemm_a8", "sm90_block_scaled_pairs", "a gate / up pair with a block scale_b")
    common = dict(in_kind=in_kind, m=m, n=n, n_out=n_out, k=k, arch=arch, out_dtype=out_dtype, blocks=blocks)
    if uses_bias is None:  # an epilogue expression
        binding = _bind_epilogue(epilogue, operands, m, n_out, device)
        return dict(common, epi=binding.spec, values=binding.values, saved_dtype=binding.saved_dtype, expr=epilogue,
                    operands=dict(operands or {}), preset=None)

    if uses_bias and bias is None:
        raise ValueError(f"gemm_a8: epilogue {epilogue!r} adds a bias, but bias is None")
    if not uses_bias and bias is not None:
        raise ValueError(f"gemm_a8: a bias was given but epilogue {epilogue!r} does not use one; "
                         f"use 'bias' or 'bias_<activation>'")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"gemm_a8: bias must be a tensor or None, got {type(bias).__name__}")
        if bias.dtype not in (out_dtype, torch.float32) or bias.dtype not in VEC_TORCH:
            raise TypeError(f"gemm_a8: bias must be float32 or the out_dtype ({out_dtype}) where that is bfloat16 "
                            f"or float16, got {bias.dtype}")
        if tuple(bias.shape) != (n,):
            raise ValueError(f"gemm_a8: bias must have shape [N={n}], got {tuple(bias.shape)}")
        _check_tensor_placement(bias, "bias", device, bias.element_size(), check_ptr)
    sa, sa_stride, alpha_a = _scale_args(scale_a, "scale_a", m, device, check_ptr,
                                         _blockscale.blocks_text("scale_a", scale_a, m, n, k))
    sb, sb_stride, alpha_b = _scale_args(scale_b, "scale_b", n, device, check_ptr,
                                         _blockscale.blocks_text("scale_b", scale_b, m, n, k))
    bias_kind = 0 if bias is None else DYN_KINDS[VEC_TORCH[bias.dtype]]
    named = {"alpha": alpha_a * alpha_b, "scale_a": sa, "scale_b": sb, "bias": bias}
    return dict(common, epi=spec_for_activation(act), saved_dtype=None, preset=epilogue,
                expr=preset_for_activation(act), operands={k: v.reshape(-1) if isinstance(v, torch.Tensor) else v
                                                           for k, v in named.items() if v is not None},
                values=preset_values(_ptr(bias), bias_kind, _ptr(sa), sa_stride, _ptr(sb), sb_stride,
                                     alpha_a * alpha_b))


def preset_values(bias_ptr: int, bias_kind: int, sa_ptr: int, sa_stride: int, sb_ptr: int, sb_stride: int,
                  alpha: float) -> dict:
    """The Params values of a preset epilogue (epilogue/presets.py): absent operands are null pointers."""
    return {"op_alpha_ptr": 0, "op_alpha": alpha, "op_alpha_pad": 0,
            "op_scale_a": sa_ptr, "op_scale_a_stride": sa_stride, "op_scale_a_kind": 0,
            "op_scale_b": sb_ptr, "op_scale_b_stride": sb_stride, "op_scale_b_kind": 0,
            "op_bias": bias_ptr, "op_bias_stride": 1, "op_bias_kind": bias_kind}


def check_no_preset_operands(bias, scale_a, scale_b) -> None:
    """An epilogue expression takes every operand by name: the preset arguments must be None (block scales, which
    the main loop applies, are taken apart before this check)."""
    if bias is not None or scale_a is not None or scale_b is not None:
        raise ValueError("gemm_a8: with an epilogue expression, pass every operand (bias, scales) by name in "
                         "operands={...}; bias, scale_a and scale_b must be None (scale_a / scale_b may be block "
                         "scales: [M, ceil(K/128)] / [ceil(N/128), ceil(K/128)])")


def _ptr(t) -> int:
    return t.data_ptr() if isinstance(t, torch.Tensor) else 0


def paired_width(op: str, epilogue, n: int) -> int:
    """The output width of a GEMM of N columns: N / 2 for a paired expression (gate, up: each adjacent column
    pair of an interleaved weight makes one output), else N."""
    if not isinstance(epilogue, _epi.Node) or not _epi.is_paired(epilogue):
        return n
    if n % 2:
        raise ValueError(f"{op}: a paired epilogue (gate / up) needs an even number of weight rows (gate, up "
                         f"interleaved), got N={n}")
    return n // 2


# ---- matmul_fused ----------------------------------------------------------------------------------------------
MATMUL_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "tf32"}
MATMUL_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# activation= names: the IR's one-argument unary ops (gelu = tanh approximation, gelu_erf = exact erf).
MATMUL_ACTIVATIONS = ("none", *_epi.ir.UNARY)
PRECISIONS = ("tf32", "ieee")


def fp32_precision(precision) -> str:
    """fp32 inputs: 'tf32' or 'ieee'; None follows torch.get_float32_matmul_precision() ('highest': ieee)."""
    if precision is None:
        return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    if precision not in PRECISIONS:
        raise ValueError(f"matmul_fused: precision must be 'tf32', 'ieee' or None (torch's float32 matmul "
                         f"precision), got {precision!r}")
    return precision


def matmul_expression(activation: str, c_kind: str | None, has_bias: bool, save_pre: str | None = None):
    """The epilogue of matmul_fused's keyword form: act(alpha * acc + beta * c + bias), each term present only
    when given; c_kind: 'aux' ([M, N]), 'n_vec' ([N]), 'm_vec' ([M, 1]) or None. save_pre: also write the
    pre-activation (the autograd forward keeps it for the backward) in this IR dtype."""
    y = _epi.acc * _epi.scalar("alpha")
    if c_kind is not None:
        y = y + getattr(_epi, c_kind)("c") * _epi.scalar("beta")
    if has_bias:
        y = y + _epi.n_vec("bias")
    if save_pre is not None:
        y = _epi.save(y, save_pre)
    return y if activation == "none" else _epi.unary(activation, y)


def number_or_scalar_tensor(v, name: str, device=None):
    """alpha / beta of matmul_fused: a real number (-> float) or a 1-element float32 tensor (on `device`, when
    given); anything else is a TypeError naming what came."""
    if isinstance(v, torch.Tensor):
        if v.numel() != 1 or v.dtype != torch.float32:
            raise TypeError(f"matmul_fused: {name} must be a number or a 1-element float32 tensor, got {v.dtype} of "
                            f"shape {tuple(v.shape)}")
        if device is not None and v.device != device:
            raise ValueError(f"matmul_fused: {name} is on {v.device}, expected {device} (the device of A)")
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"matmul_fused: {name} must be a number or a 1-element float32 tensor, got "
                        f"{type(v).__name__}")
    return float(v)


def _c_form(c, m: int, n: int, lead: tuple, dtypes) -> tuple[str, torch.Tensor]:
    """-> (IR leaf kind, 2-D/1-D tensor) of c: [M, N] (or a's leading dims + [N]) -> aux; [N] / [1, N] -> n_vec;
    [M, 1] -> m_vec."""
    if not isinstance(c, torch.Tensor):
        raise TypeError(f"matmul_fused: c must be a tensor or None, got {type(c).__name__}")
    if c.dtype not in dtypes:
        raise TypeError(f"matmul_fused: c must be {' or '.join(map(str, dtypes))} (the input, output or float32 "
                        f"type), got {c.dtype}")
    shape = tuple(c.shape)
    if shape in ((m, n), (*lead, n)) and c.dim() >= 2:
        c2 = c.reshape(m, n)
        if m > 1 and n > 1 and c2.data_ptr() != c.data_ptr():
            raise ValueError("matmul_fused: c cannot be viewed as [M, N] without a copy")
        return "aux", c2
    if shape in ((n,), (1, n)):
        return "n_vec", c.reshape(n)
    if shape == (m, 1):
        return "m_vec", c.reshape(m)
    raise ValueError(f"matmul_fused: c must be [M={m}, N={n}] (or A's leading dims + [N]), [N] / [1, N] or "
                     f"[M, 1], got shape {list(shape)}")


def check_matmul_fused_args(a, b, bias, c, alpha, beta, activation, epilogue, operands, layout, out_dtype, out,
                            precision, *, save_pre: bool = False, arch: str | None = None):
    """Validate a matmul_fused call; return what the launch needs: in_kind, m, n, n_out (N / 2 for a paired
    epilogue), k, arch, out_dtype, epi,
    values, saved_dtype, a2 ([M, K] view of A), b_nk ([N, K] view of B, or None for layout 'kn': the caller
    transposes it), lead (A's leading dims), precision ('tf32' / 'ieee' for fp32), expr and operands (what the
    CPU reference evaluates). arch: as check_gemm_a8_args. beta None: 1 with c, else 0 (torch.addmm's)."""
    op = "matmul_fused"
    activation, epilogue = keyword_form(op, activation, epilogue, bias)
    if beta is None:
        beta = 0.0 if c is None else 1.0
    for t, name in ((a, "A"), (b, "B")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in MATMUL_DTYPES:
            raise TypeError(f"{op}: {name} must be bfloat16, float16 or float32, got {t.dtype}"
                            + (" (8-bit inputs: fusedgemm.gemm_a8)" if t.dtype in (*_FP8_DTYPES, torch.int8) else ""))
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: A and B must have the same dtype, got A {a.dtype} and B {b.dtype} (mixed input "
                        "types are not promoted: convert one)")
    if layout not in ("nk", "kn"):
        raise ValueError(f"{op}: layout must be 'nk' (B is [N, K], an nn.Linear weight) or 'kn' (B is [K, N]), "
                         f"got {layout!r}")
    if b.dim() != 2:
        raise ValueError(f"{op}: B must be 2-D, got shape {tuple(b.shape)}")
    if a.dim() < 1:
        raise ValueError(f"{op}: A must be [..., K], got a 0-d tensor")
    n, kb = b.shape if layout == "nk" else (b.shape[1], b.shape[0])
    k = a.shape[-1]
    lead = tuple(a.shape[:-1])
    if kb != k:
        raise ValueError(f"{op}: A is [..., K={k}] but B ({layout}) is {list(b.shape)} with K={kb}; K must agree")
    device = a.device
    check_placement(op, b, "B", device, contiguous=False)
    arch = arch_of(op, device, arch)
    in_kind = MATMUL_DTYPES[a.dtype]
    prec = fp32_precision(precision)  # validated for every dtype; it matters for fp32 only
    prec = prec if in_kind == "tf32" else None
    if prec == "ieee" and arch in ("sm_90a", "cpu"):  # the CPU reference is exact fp32 (float64 inside) too
        in_kind = "f32x3"  # exact fp32 from three TF32 products of split operands (elsewhere: the unfused path)
    if k == 0:  # any other K and N: matmul.py pads what the kernels cannot read in place
        raise ValueError(f"{op}: K must be positive, got K={k}")
    out_dtype = out_dtype_of(op, out, out_dtype, MATMUL_OUT_DTYPES, a.dtype)
    m = 1
    for d in lead:
        m *= d
    a2 = a.reshape(m, k)
    b_nk = b if layout == "nk" else None
    operand_dtypes = tuple(dict.fromkeys((a.dtype, out_dtype, torch.float32)))
    n_out = paired_width(op, epilogue, n)
    if isinstance(epilogue, _epi.Node):
        if bias is not None or c is not None or activation != "none" or not _is_default(alpha, 1.0) \
                or not _is_default(beta, 0.0):  # (beta None became 0 above: c is None)
            raise ValueError(f"{op}: with epilogue=<expression>, pass every operand by name in operands={{...}} "
                             "(acc is A @ B); bias, c, alpha, beta and activation must keep their defaults")
        expr, ops = epilogue, dict(operands or {})
        # aux operands may come shaped like the output (A's leading dims + [N]): viewed as [M, N].
        for name, o in _epi.operands(expr).items():
            v = ops.get(name)
            if o.kind == "aux" and isinstance(v, torch.Tensor) and len(lead) != 1 and \
                    tuple(v.shape) == (*lead, n_out):
                v2 = v.reshape(m, n_out)
                if m > 1 and n_out > 1 and v2.data_ptr() != v.data_ptr():
                    raise ValueError(f"{op}: aux({name}) cannot be viewed as [M, N] without a copy")
                ops[name] = v2
    else:
        if operands:
            raise ValueError(f"{op}: operands are for epilogue expressions (epilogue=...)")
        ops = {"alpha": number_or_scalar_tensor(alpha, "alpha", device)}
        beta = number_or_scalar_tensor(beta, "beta", device)
        c_kind = None
        if c is not None:
            if isinstance(c, torch.Tensor):
                check_placement(op, c, "c", device, contiguous=False)
            c_kind, c2 = _c_form(c, m, n, lead, operand_dtypes)
            if isinstance(beta, float) and beta == 0.0:
                c_kind = None  # as torch.addmm: beta = 0 ignores c (NaN in c does not propagate)
            else:
                ops.update(c=c2, beta=beta)
        elif not _is_default(beta, 0.0):
            raise ValueError(f"{op}: beta is given but c is None")
        if bias is not None:
            if not isinstance(bias, torch.Tensor):
                raise TypeError(f"{op}: bias must be a tensor or None, got {type(bias).__name__}")
            if bias.dtype not in operand_dtypes:
                raise TypeError(f"{op}: bias must be {' or '.join(map(str, operand_dtypes))}, got {bias.dtype}")
            if tuple(bias.shape) not in ((n,), (1, n)):
                raise ValueError(f"{op}: bias must have shape [N={n}], got {list(bias.shape)}")
            check_placement(op, bias, "bias", device, contiguous=False)
            ops["bias"] = bias.reshape(n)
        save_dtype = _epi.DTYPE_NAMES[a.dtype]
        expr = matmul_expression(activation, c_kind, bias is not None,
                                 save_dtype if save_pre and activation != "none" else None)
    if out is not None:
        check_out(op, out, ((m, n_out), (*lead, n_out)), n_out, n, device, 0, False)
    binding = _bind_epilogue(expr, ops, m, n_out, device, op=op)
    return dict(in_kind=in_kind, m=m, n=n, n_out=n_out, k=k, arch=arch, out_dtype=out_dtype, epi=binding.spec,
                values=binding.values, saved_dtype=binding.saved_dtype, a2=a2, b_nk=b_nk, lead=lead,
                precision=prec, expr=expr, operands=ops)


def keyword_form(op: str, activation, epilogue, bias):
    """matmul_fused's activation= / epilogue= -> (activation name, expression or None). None means identity;
    names are case-insensitive; a preset name (epilogue.presets: 'bias_silu', 'gelu', ...) is the keyword form
    of its activation, whose bias must then be given (or not) as the name says; expression text is parsed."""
    act = activation_name(op, activation, MATMUL_ACTIVATIONS)
    form = resolve_epilogue(op, epilogue)
    if isinstance(form, _epi.Node):
        return act, form
    uses_bias, preset_act = form
    if epilogue is None:
        return act, None
    if act != "none":
        raise ValueError(f"{op}: give activation={activation!r} or epilogue={epilogue!r}, not both")
    if uses_bias and bias is None:
        raise ValueError(f"{op}: epilogue {epilogue!r} adds a bias, but bias is None")
    if not uses_bias and bias is not None:
        raise ValueError(f"{op}: a bias was given but epilogue {epilogue!r} does not use one; use 'bias' or "
                         "'bias_<activation>' (or activation=...)")
    return preset_act, None


def _is_default(v, default: float) -> bool:
    return not isinstance(v, torch.Tensor) and not isinstance(v, bool) and isinstance(v, numbers.Real) \
        and float(v) == default
