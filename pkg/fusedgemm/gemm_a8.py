"""gemm_a8: 8-bit GEMM on a preshuffled weight with a fused scale + bias + activation epilogue.

    y = act(A @ B.T * scale_a[:, None] * scale_b[None, :] + bias)     fp32 inside, rounded once

Every argument is checked here, with a message saying what was expected and what came; the kernel never
sees an input it cannot handle.
"""
from __future__ import annotations

import contextlib
import os

import torch

from .epilogues import parse_epilogue
from .preshuffle import LAYOUT_16x16, PreshuffledWeight
from .runtime import kernels
from .runtime.arch import device_arch

_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# The fp8 variant each arch's tensor cores read. gfx942 reads e4m3fnuz; sm_90 and gfx950 read OCP e4m3fn.
FP8_DTYPE_FOR_ARCH = {"sm_90a": torch.float8_e4m3fn, "gfx950": torch.float8_e4m3fn, "gfx942": torch.float8_e4m3fnuz}
OUT_DTYPES = (torch.bfloat16, torch.float16)
_OUT_NAME = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
_BIAS_NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_MAX_GRID_Y = 65535
_PRINT_CONFIGS = os.environ.get("FUSEDGEMM_PRINT_CONFIGS", "") not in ("", "0")


def _in_kind(dtype: torch.dtype, what: str) -> str:
    if dtype in _FP8_DTYPES:
        return "fp8"
    if dtype == torch.int8:
        return "int8"
    raise TypeError(f"gemm_a8: {what} must be float8_e4m3fn, float8_e4m3fnuz or int8, got {dtype}")


from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor  # noqa: E402


def _is_fake(t: torch.Tensor) -> bool:
    return isinstance(t, _FakeTensor) or t.device.type == "meta"


def current_raw_stream(device_index: int) -> int:
    """The current stream's handle, cheaply (this is on the per-call hot path)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return get(device_index) if get is not None else torch.cuda.current_stream(device_index).cuda_stream


def current_device_index() -> int:
    get = getattr(torch._C, "_cuda_getDevice", None)
    return get() if get is not None else torch.cuda.current_device()


def device_guard(device: torch.device):
    """Make `device` current for a launch (kernels load per device); free when it already is."""
    return contextlib.nullcontext() if device.index == current_device_index() else torch.cuda.device(device)


_KERNELS: dict[tuple, object] = {}


def _check_tensor_placement(t: torch.Tensor, name: str, device: torch.device, align: int, check_ptr: bool):
    if t.device != device:
        raise ValueError(f"gemm_a8: {name} is on {t.device}, expected {device} (the device of A)")
    if not t.is_contiguous():
        raise ValueError(f"gemm_a8: {name} must be contiguous, got strides {tuple(t.stride())} for shape "
                         f"{tuple(t.shape)}")
    if check_ptr and t.numel() and t.data_ptr() % align:
        raise ValueError(f"gemm_a8: {name} must be {align}-byte aligned, got address {t.data_ptr():#x} "
                         f"(offset {t.data_ptr() % align}); pass a fresh contiguous tensor")


def _scale_args(scale, name: str, length: int, device, check_ptr: bool):
    """-> (tensor or None, stride, python factor). Tensor scales: fp32 of `length` values or a single one."""
    if scale is None:
        return None, 0, 1.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float, torch.Tensor)):
        raise TypeError(f"gemm_a8: {name} must be a float32 tensor, a Python number or None, got "
                        f"{type(scale).__name__}")
    if not isinstance(scale, torch.Tensor):
        return None, 0, float(scale)
    if scale.dtype != torch.float32:
        raise TypeError(f"gemm_a8: {name} must be float32, got {scale.dtype}")
    if scale.numel() == 1:
        _check_tensor_placement(scale, name, device, 4, check_ptr)
        return scale, 0, 1.0
    if scale.numel() != length or max(scale.shape) != length:
        raise ValueError(f"gemm_a8: {name} must hold 1 or {length} values, got shape {tuple(scale.shape)}")
    _check_tensor_placement(scale, name, device, 4, check_ptr)
    return scale, 1, 1.0


def _choose_config(m: int, n: int, k: int) -> kernels.TileConfig:
    """Decode-size M (<= 64): one 16-column slab of B per block with 8-way split-K inside the block, so
    N/16 blocks of 8 warps stream the weight with many loads in flight; 16 or 64 rows per tile. Larger M:
    128 x 128 tiles (operand reuse)."""
    name = "m16n16k8" if m <= 16 else "m64n16k8" if m <= 64 else "m128n128"
    cfg = kernels.GEMM_A8_CONFIGS[name]
    if _PRINT_CONFIGS:
        print(f"[fusedgemm] gemm_a8 M={m} N={n} K={k} -> {name}")
    return cfg


def check_gemm_a8_args(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, *, arch: str | None = None):
    """Validate everything; return the normalized pieces the launch needs.

    arch=None: the tensors must be on a GPU and the arch is read off it. Tests pass an arch explicitly to
    run every check on CPU tensors."""
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"gemm_a8: A must be a torch.Tensor, got {type(a).__name__}")
    if not isinstance(b, PreshuffledWeight):
        if isinstance(b, torch.Tensor):
            raise TypeError("gemm_a8: B must be preshuffled: pass fusedgemm.preshuffle(w) for an [N, K] weight "
                            f"(got a plain {b.dtype} tensor of shape {tuple(b.shape)})")
        raise TypeError(f"gemm_a8: B must be a PreshuffledWeight from fusedgemm.preshuffle, got {type(b).__name__}")
    if b.layout != LAYOUT_16x16:
        raise ValueError(f"gemm_a8: B has layout {b.layout!r}, expected {LAYOUT_16x16!r}")
    uses_bias, act = parse_epilogue(epilogue)
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"gemm_a8: out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
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
    if k == 0 or k % 16:
        raise ValueError(f"gemm_a8: K must be a positive multiple of 16, got K={k}")
    if n % 16:
        raise ValueError(f"gemm_a8: N must be a multiple of 16, got N={n}")
    device = a.device
    if arch is None:
        if device.type != "cuda":
            raise ValueError(f"gemm_a8: tensors must be on a GPU (cuda/ROCm device), A is on {device}")
        arch = device_arch(device.index if device.index is not None else torch.cuda.current_device())
    check_ptr = not _is_fake(a)
    if in_kind == "fp8" and a.dtype != FP8_DTYPE_FOR_ARCH[arch]:
        raise TypeError(f"gemm_a8: {arch} needs fp8 as {FP8_DTYPE_FOR_ARCH[arch]}, got {a.dtype}")
    _check_tensor_placement(a, "A", device, 16, check_ptr)
    _check_tensor_placement(b.data, "B", device, 16, check_ptr)

    if uses_bias and bias is None:
        raise ValueError(f"gemm_a8: epilogue {epilogue!r} adds a bias, but bias is None")
    if not uses_bias and bias is not None:
        raise ValueError(f"gemm_a8: a bias was given but epilogue {epilogue!r} does not use one; "
                         f"use 'bias' or 'bias_<activation>'")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"gemm_a8: bias must be a tensor or None, got {type(bias).__name__}")
        if bias.dtype not in (out_dtype, torch.float32):
            raise TypeError(f"gemm_a8: bias must be {out_dtype} (the out_dtype) or torch.float32, got {bias.dtype}")
        if tuple(bias.shape) != (n,):
            raise ValueError(f"gemm_a8: bias must have shape [N={n}], got {tuple(bias.shape)}")
        _check_tensor_placement(bias, "bias", device, bias.element_size(), check_ptr)
    sa, sa_stride, alpha_a = _scale_args(scale_a, "scale_a", m, device, check_ptr)
    sb, sb_stride, alpha_b = _scale_args(scale_b, "scale_b", n, device, check_ptr)

    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"gemm_a8: out must be a tensor or None, got {type(out).__name__}")
        if tuple(out.shape) != (m, n) or out.dtype != out_dtype:
            raise ValueError(f"gemm_a8: out must be [{m}, {n}] {out_dtype}, got {tuple(out.shape)} {out.dtype}")
        _check_tensor_placement(out, "out", device, 4, check_ptr)
    return dict(in_kind=in_kind, act=act, m=m, n=n, k=k, sa=sa, sa_stride=sa_stride, sb=sb, sb_stride=sb_stride,
                alpha=alpha_a * alpha_b)


def launch_gemm_a8(a: torch.Tensor, b_data: torch.Tensor, bias, sa, sa_stride: int, sb, sb_stride: int,
                   alpha: float, act: str, in_kind: str, out: torch.Tensor) -> None:
    """Launch on the current stream. All arguments already validated."""
    from .runtime.launch import module_for

    m, k = a.shape
    n = b_data.shape[0]
    if m == 0 or n == 0:
        return
    cfg = _choose_config(m, n, k)
    grid = ((n + cfg.block_n - 1) // cfg.block_n, (m + cfg.block_m - 1) // cfg.block_m, 1)
    if grid[1] > _MAX_GRID_Y:
        raise ValueError(f"gemm_a8: M={m} is too large for one launch (at most {_MAX_GRID_Y * cfg.block_m} rows)")
    dev = a.device.index
    key = (dev, in_kind, out.dtype, act, cfg.name)
    kernel = _KERNELS.get(key)
    if kernel is None:
        name = kernels.gemm_a8_kernel_name(in_kind, _OUT_NAME[out.dtype], act, cfg.name)
        kernel = _KERNELS[key] = module_for("gemm_a8", dev).kernel(name, kernels.GEMM_A8)
    bias_kind = kernels.BIAS_KIND[None if bias is None else _BIAS_NAME[bias.dtype]]
    stream = current_raw_stream(dev)
    warp = 32 if torch.version.hip is None else 64
    kernel(grid, cfg.warps * warp, 0, stream,
           a.data_ptr(), b_data.data_ptr(), out.data_ptr(), 0 if bias is None else bias.data_ptr(),
           0 if sa is None else sa.data_ptr(), 0 if sb is None else sb.data_ptr(),
           m, n, k, bias_kind, sa_stride, sb_stride, alpha)


def gemm_a8(a: torch.Tensor, b: PreshuffledWeight, bias: torch.Tensor | None = None, *, scale_a=None, scale_b=None,
            epilogue: str = "none", out_dtype: torch.dtype = torch.bfloat16,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """y = act(a @ w.T * scale_a[:, None] * scale_b[None, :] + bias), one kernel, rounded once.

    a: [M, K] fp8 (e4m3fn on sm_90/gfx950, e4m3fnuz on gfx942) or int8, contiguous, on the GPU.
    b: fusedgemm.preshuffle(w) for w [N, K] of a's dtype. N % 16 == 0, K % 16 == 0.
    bias: [N] in out_dtype or float32, or None (epilogue names say whether a bias is added).
    scale_a: float32 [M] (per token) or one value (tensor or Python number) or None (1.0).
    scale_b: float32 [N] (per channel) or one value or None.
    epilogue: none | bias | bias_relu | bias_silu | bias_gelu | bias_gelu_erf | relu | silu | gelu | gelu_erf
              (gelu = tanh approximation, gelu_erf = exact).
    out_dtype: torch.bfloat16 or torch.float16. out: optional [M, N] contiguous output to write.
    Runs on torch.cuda.current_stream(); no host synchronisation; CUDA-graph capturable.
    """
    if torch.compiler.is_compiling():
        return _gemm_a8_traced(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out)
    p = check_gemm_a8_args(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out)
    if out is None:
        out = torch.empty((p["m"], p["n"]), dtype=out_dtype, device=a.device)
    with device_guard(a.device):
        launch_gemm_a8(a, b.data, bias, p["sa"], p["sa_stride"], p["sb"], p["sb_stride"], p["alpha"], p["act"],
                       p["in_kind"], out)
    return out


def _gemm_a8_traced(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out):
    """Under torch.compile: call the registered op (its real implementation validates everything at run
    time; its fake implementation checks shapes at trace time). Python-number scales fold into alpha."""
    from . import ops

    if not isinstance(b, PreshuffledWeight):
        raise TypeError(f"gemm_a8: B must be a PreshuffledWeight from fusedgemm.preshuffle, got {type(b).__name__}")
    alpha = 1.0
    if isinstance(scale_a, (int, float)) and not isinstance(scale_a, bool):
        alpha, scale_a = alpha * float(scale_a), None
    if isinstance(scale_b, (int, float)) and not isinstance(scale_b, bool):
        alpha, scale_b = alpha * float(scale_b), None
    y = ops.gemm_a8_op(a, b.data, bias, scale_a, scale_b, alpha, epilogue, out_dtype)
    if out is not None:
        out.copy_(y)
        return out
    return y
