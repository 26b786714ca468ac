"""Batched GEMM for tiny matrices (m, n, k <= 64): one launch, fp32 accumulation, any input strides.

    fusedgemm.bmm_tiny(a, b)   a [B, m, k]; b [B, k, n] or [k, n] / [1, k, n] (broadcast over the batch)
    fusedgemm.bmm(a, b)        bmm_tiny when it applies (m, n, k <= 64, B > 1, f32/bf16/f16 on a GPU),
                               else torch.bmm. FUSEDGEMM_DISABLE_TINY_GEMM=1 forces torch.bmm.
Both are differentiable (the gradients are tiny batched GEMMs as well).
"""
from __future__ import annotations

import os
import warnings

import torch

from .gemm_a8 import current_raw_stream, device_guard
from .runtime import kernels

_DTYPE_NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_SMEM_CAP = 48 * 1024  # portable without opting in: the default on NVIDIA, within the 64 KB LDS of gfx942
_I32_MAX = 2**31 - 1
_warned_fallback = False


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def plan_bmm_tiny(batch: int, m: int, n: int, k: int, dtype_name: str, r: int | None = None):
    """Launch plan: micro-tile R, thread tile (tx, ty), elements per block, threads, smem bytes, grid.

    R is the smallest micro-tile that keeps one element within 64 threads (at least R*R multiply-adds per
    pair of shared-memory reads), so blocks pack several elements and share the per-block fixed costs. When
    one element already fills most of the 48 KB of shared memory (64 x 64 x 64 in fp32: 32 KB), the block
    holds one element and R is the smallest that fits it in 256 threads: more threads stage it faster."""
    if r is None:
        fits = [r for r in kernels.BMM_TINY_MICROTILES if _ceil_div(m, r) * _ceil_div(n, r) <= 64]
        r = fits[0]
        if 2 * 4 * k * r * (_ceil_div(m, r) + _ceil_div(n, r)) > _SMEM_CAP:
            r = next(r for r in kernels.BMM_TINY_MICROTILES
                     if _ceil_div(m, r) * _ceil_div(n, r) <= kernels.BMM_TINY_MAX_THREADS)
    tx, ty = _ceil_div(n, r), _ceil_div(m, r)
    per_elem_bytes = 4 * k * r * (tx + ty)  # A [m_pad, k] + B [k, n_pad] in fp32 (B counted even if broadcast)
    elems = max(1, min(kernels.BMM_TINY_MAX_THREADS // (tx * ty), _SMEM_CAP // per_elem_bytes, batch))
    threads = min(kernels.BMM_TINY_MAX_THREADS, _ceil_div(elems * tx * ty, 64) * 64)
    return dict(name=kernels.bmm_tiny_kernel_name(dtype_name, r), r=r, tx=tx, ty=ty, elems=elems, threads=threads,
                smem=elems * per_elem_bytes, grid=(_ceil_div(batch, elems), 1, 1))


def _check(a, b, out):
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"bmm_tiny: a and b must be tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.dim() != 3:
        raise ValueError(f"bmm_tiny: a must be [B, m, k], got shape {tuple(a.shape)}")
    if b.dim() not in (2, 3):
        raise ValueError(f"bmm_tiny: b must be [B, k, n], [1, k, n] or [k, n], got shape {tuple(b.shape)}")
    batch, m, k = a.shape
    b3 = b.unsqueeze(0) if b.dim() == 2 else b
    if b3.shape[0] not in (1, batch) or b3.shape[1] != k:
        raise ValueError(f"bmm_tiny: a is [B={batch}, m={m}, k={k}], b must be [{batch} or 1, {k}, n], "
                         f"got {tuple(b.shape)}")
    n = b3.shape[2]
    if a.dtype != b.dtype or a.dtype not in _DTYPE_NAME:
        raise TypeError(f"bmm_tiny: a and b must share one dtype of float32, bfloat16, float16; got {a.dtype} "
                        f"and {b.dtype}")
    if max(m, n, k) > kernels.BMM_TINY_MAX_DIM:
        raise ValueError(f"bmm_tiny: m, n, k must be <= {kernels.BMM_TINY_MAX_DIM}, got m={m}, n={n}, k={k}; "
                         "use fusedgemm.bmm (dispatches to torch.bmm) for larger matrices")
    if a.device.type != "cuda" or b.device != a.device:
        raise ValueError(f"bmm_tiny: a and b must be on the same GPU, got {a.device} and {b.device}")
    for t, name in ((a, "a"), (b3, "b")):
        if max(t.stride()[1:], default=0) > _I32_MAX or t.stride(0) < 0:
            raise ValueError(f"bmm_tiny: {name} has strides {tuple(t.stride())} beyond the kernel's 32-bit range")
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.shape != (batch, m, n) or out.dtype != a.dtype:
            raise ValueError(f"bmm_tiny: out must be [{batch}, {m}, {n}] {a.dtype}, got "
                             f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
        if out.device != a.device or not out.is_contiguous():
            raise ValueError("bmm_tiny: out must be a contiguous tensor on the device of a")
    return batch, m, n, k, b3


def launch_bmm_tiny(a: torch.Tensor, b3: torch.Tensor, out: torch.Tensor, r: int | None = None) -> torch.Tensor:
    from .runtime.launch import module_for

    batch, m, k = a.shape
    n = b3.shape[2]
    if batch == 0 or m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    plan = plan_bmm_tiny(batch, m, n, k, _DTYPE_NAME[a.dtype], r)
    dev = a.device.index
    kern = module_for("bmm_tiny", dev).kernel(plan["name"], kernels.BMM_TINY)
    sbb = 0 if b3.shape[0] == 1 else b3.stride(0)
    kern(plan["grid"], plan["threads"], plan["smem"], current_raw_stream(dev),
         a.data_ptr(), b3.data_ptr(), out.data_ptr(), batch, m, n, k, a.stride(0), a.stride(1), a.stride(2),
         sbb, b3.stride(1), b3.stride(2), plan["tx"], plan["ty"], plan["elems"])
    return out


def _bmm_tiny_forward(a, b, out=None):
    batch, m, n, k, b3 = _check(a, b, out)
    if out is None:
        out = torch.empty((batch, m, n), dtype=a.dtype, device=a.device)
    with device_guard(a.device):
        return launch_bmm_tiny(a, b3, out)


def bmm_grads(a, b, grad, needs_input_grad, mm):
    """Gradients of C = A @ B, both tiny batched GEMMs computed by `mm` (the kernel's autograd.Function in
    eager mode, the registered op under torch.compile): dA = dC @ B^T, dB = A^T @ dC (transposes are
    strided views), summed over the batch where b was broadcast."""
    b3 = b.unsqueeze(0) if b.dim() == 2 else b
    grad_a = mm(grad, b3.transpose(1, 2)) if needs_input_grad[0] else None
    grad_b = _reduce_broadcast_grad(mm(a.transpose(1, 2), grad), b) if needs_input_grad[1] else None
    return grad_a, grad_b


def _reduce_broadcast_grad(grad_b3: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """grad of b [B, k, n] from per-element grads; sums over the batch where b was broadcast."""
    if b.dim() == 2:
        return grad_b3.sum(0)
    return grad_b3.sum(0, keepdim=True) if b.shape[0] == 1 and grad_b3.shape[0] != 1 else grad_b3


def _forward_any(a, b):
    """The kernel where it has one (f32/bf16/f16 on a GPU); torch.bmm otherwise (float64, CPU)."""
    if a.is_cuda and a.dtype in _DTYPE_NAME:
        return _bmm_tiny_forward(a, b)
    return _torch_bmm(a, b)


class _BmmTinyFn(torch.autograd.Function):
    """C = A @ B with the tiny-GEMM kernel; the backward is two more tiny batched GEMMs. For dtypes without
    a kernel (float64) the same formulas run through torch.bmm, so gradcheck can check them."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _forward_any(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return bmm_grads(a, b, grad, ctx.needs_input_grad, _BmmTinyFn.apply)


def bmm_tiny(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """C = a @ b for a [B, m, k] and b [B, k, n] (or [k, n] / [1, k, n] broadcast), m, n, k <= 64.

    float32 / bfloat16 / float16 inputs, fp32 accumulation, output in the input dtype. Any strides
    (transposed views need no copy). One launch on the current stream; graph-capturable; differentiable
    (not with out=)."""
    if torch.compiler.is_compiling() and out is None:
        from . import ops

        return ops.bmm_tiny_op(a, b)
    if out is None and (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)):
        return _BmmTinyFn.apply(a, b)
    return _bmm_tiny_forward(a, b, out)


def _tiny_gemm_disabled() -> bool:
    return os.environ.get("FUSEDGEMM_DISABLE_TINY_GEMM", "") not in ("", "0")


def _torch_bmm(a, b):
    if b.dim() == 2:
        b = b.unsqueeze(0)
    return torch.bmm(a, b.expand(a.shape[0], *b.shape[1:]))


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.bmm with a fast path: bmm_tiny when m, n, k <= 64 and B > 1 (f32/bf16/f16, on a GPU), else
    torch.bmm. b may also be [k, n] or [1, k, n] (broadcast). If the fast kernel cannot launch, this warns
    once and uses torch.bmm: correctness never depends on the fast path."""
    global _warned_fallback
    eligible = (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 3 and b.dim() in (2, 3)
                and a.shape[0] > 1 and max(a.shape[1], a.shape[2], b.shape[-1]) <= kernels.BMM_TINY_MAX_DIM
                and a.dtype == b.dtype and a.is_cuda and b.device == a.device and not _tiny_gemm_disabled())
    if not eligible:
        return _torch_bmm(a, b)
    if a.dtype not in _DTYPE_NAME:  # float64: no kernel; torch.bmm forward, our backward formulas
        return _BmmTinyFn.apply(a, b) if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad) \
            else _torch_bmm(a, b)
    try:
        return bmm_tiny(a, b)
    except (ValueError, TypeError):
        raise  # bad input: the same error torch.bmm users would want to see, not a silent fallback
    except Exception as exc:  # the kernel could not be built, loaded or launched
        if not _warned_fallback:
            warnings.warn(f"fusedgemm.bmm: tiny-GEMM kernel unavailable ({exc}); using torch.bmm", RuntimeWarning)
            _warned_fallback = True
        return _torch_bmm(a, b)
