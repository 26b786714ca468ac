"""Dynamic per-row (per-token) 8-bit quantization: what feeds gemm_a8 from bf16 / fp16 / fp32 activations.

    xq, scale = fusedgemm.quantize_rows(x, "fp8")     x [..., K] -> xq [M, K] 8-bit, scale [M] fp32
    wq, sw    = fusedgemm.quantize_weight(w, "fp8")   per output channel: the same rule over w's rows

Semantics (reference.quantize_rows_reference is the float64 oracle; the kernel and the CPU path match it bit
for bit):

    absmax = max_k |x[m, k]|                         NaN-propagating
    scale  = fl32(absmax / qmax)                     1 for an all-zero row, at least 2^-126 (1 / scale finite)
    q      = round(fl32(x * fl32(1 / scale)))        nearest even, saturating at +-qmax

qmax: 448 for float8_e4m3fn (sm_90a, gfx950), 240 for float8_e4m3fnuz (gfx942), 127 for int8 (symmetric:
-128 never appears). One fp32 reciprocal per row and a multiply per element rather than a division per
element (the kernel's budget per element is a few instructions); x / scale differs from x * (1 / scale) by at
most one fp32 ulp, so a code changes only where that quotient sits on an 8-bit rounding midpoint.
Non-finite rows: a NaN makes the row's scale NaN (fp8 codes NaN, int8 codes 0); +-inf without NaN makes it
+inf, so finite values quantize to 0 and the infinities to NaN (fp8) / 0 (int8). Either way the row's GEMM
output is NaN or inf, never a silently finite number.

On a GPU it is one kernel (hip_src/include/fusedgemm/quantize_rows.hpp): one block per row, the row held in
registers between the absmax and the quantizing pass (read from memory once up to K = 32768 bf16 / 16384
fp32), on the current stream, allocating only its outputs: graph-capturable. Its floor is the bytes it moves,
M K (in_bytes + 1) + 4 M, at the device's copy bandwidth (ci/bench_quantize_rows.py times it against that and
against the torch chain amax -> div -> clamp -> to). CPU tensors take a torch path with the same fp32
operations. torch.compile traces it as torch.ops.fusedgemm.quantize_rows.
"""
from __future__ import annotations

import sys

import torch

from .checks import FP8_DTYPE_FOR_ARCH
from .epilogue.presets import did_you_mean
from .runtime import kernels
from .runtime.device import current_device_index, current_raw_stream, device_guard, emulated_arch

QMAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0, torch.int8: 127.0}
MIN_SCALE = 2.0 ** -126  # kQuantMinScale: the smallest normal fp32
_NAN_CODE = {torch.float8_e4m3fn: 0x7F, torch.float8_e4m3fnuz: 0x80}  # OutFp8E4M3's NaN codes (sign dropped)
IN_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_MAX_BLOCKS = 1 << 20  # the kernel walks rows grid-stride past this (AMD: blocks x threads < 2^32)
_I32_MAX = 2**31 - 1


def resolve_dtype(dtype, device: torch.device | None = None, op: str = "quantize_rows") -> torch.dtype:
    """'fp8' -> the fp8 variant the device's GEMMs read (FP8_DTYPE_FOR_ARCH; float8_e4m3fn off a GPU),
    'int8' -> torch.int8 (names case-insensitive: 'FP8'); a torch dtype among QMAX's is taken as is. Errors name
    `op`, the call that was given the dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in QMAX:
            raise TypeError(f"{op}: dtype must be 'fp8', 'int8' or one of {', '.join(map(str, QMAX))}, got {dtype}")
        return dtype
    name = dtype.lower() if isinstance(dtype, str) else dtype
    if name == "int8":
        return torch.int8
    if name == "fp8":
        if device is not None and device.type == "cuda":
            return _fp8_of_device(device.index if device.index is not None else torch.cuda.current_device())
        emulated = emulated_arch() if device is None or device.type == "cpu" else None  # (CPU: inside emulate())
        return torch.float8_e4m3fn if emulated is None else FP8_DTYPE_FOR_ARCH[emulated]
    hint = did_you_mean(dtype, ("fp8", "int8")) if isinstance(dtype, str) else ""
    raise ValueError(f"{op}: dtype must be 'fp8', 'int8' or a torch 8-bit dtype, got {dtype!r}{hint}")


def _assume_constant_result(fn):
    """torch.compiler.assume_constant_result(fn) without importing torch._dynamo, which costs ~0.7 s of `import
    fusedgemm` (2-core CPU machine) where nothing else needs it: the decorator only marks fn with this attribute
    (test_quant_cpu checks that torch's still does exactly that)."""
    if "torch._dynamo" in sys.modules:
        return torch.compiler.assume_constant_result(fn)
    fn._dynamo_marked_constant = True
    return fn


@_assume_constant_result  # under torch.compile: evaluated once while tracing, a constant after
def _fp8_of_device(index: int) -> torch.dtype:
    from .runtime.arch import device_arch

    return FP8_DTYPE_FOR_ARCH[device_arch(index)]


def _rows(x: torch.Tensor, who: str) -> torch.Tensor:
    """x [..., K] as [M, K] with unit last stride: a view where torch can make one, else a copy."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in IN_DTYPES:
        raise TypeError(f"{who}: x must be float32, bfloat16 or float16, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError(f"{who}: x must have at least one dimension [..., K], got a 0-d tensor")
    k = x.shape[-1]
    m = x.numel() // k if k else _prod(x.shape[:-1])
    x2 = x if x.dim() == 2 else x.reshape(m, k)
    if k > 1 and x2.stride(1) != 1:
        x2 = x2.contiguous()
    return x2


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# ---- the CPU path: the oracle's fp32 operations as torch ops --------------------------------------------------
def codes_from_fp32(t: torch.Tensor, qdtype: torch.dtype) -> torch.Tensor:
    """fp32 values (x * (1 / scale)) -> 8-bit codes: nearest even, saturating at +-qmax; NaN -> the format's
    NaN code (fp8) or 0 (int8). torch's own cast would turn values past qmax into NaN, hence the clamp first."""
    qmax = QMAX[qdtype]
    if qdtype == torch.int8:
        return torch.nan_to_num(t, nan=0.0).clamp(-qmax, qmax).round().to(torch.int8)
    codes = t.clamp(-qmax, qmax).to(qdtype).view(torch.uint8)
    codes = torch.where(torch.isnan(t), torch.full_like(codes, _NAN_CODE[qdtype]), codes)
    return codes.view(qdtype)


def quantize_rows_torch(x2: torch.Tensor, qdtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's arithmetic with torch fp32 ops (IEEE division, no FMA), for CPU tensors: x2 [M, K]."""
    xf = x2.to(torch.float32)
    m, k = xf.shape
    if k == 0:
        return torch.empty((m, 0), dtype=qdtype, device=x2.device), torch.ones(m, dtype=torch.float32, device=x2.device)
    absmax = xf.abs().amax(dim=1)  # NaN-propagating
    scale = absmax / QMAX[qdtype]
    scale = torch.where(scale < MIN_SCALE, torch.full_like(scale, MIN_SCALE), scale)  # NaN < x: False, kept
    scale = torch.where(absmax == 0, torch.ones_like(scale), scale)
    inv = 1.0 / scale
    return codes_from_fp32(xf * inv[:, None], qdtype), scale


# ---- the kernel -----------------------------------------------------------------------------------------------
def plan_quantize_rows(m: int, k: int, elem_size: int, vector: bool) -> tuple[int, int]:
    """(threads, blocks): the fewest threads (a multiple of 64, one AMD wave) whose registers hold the whole
    row (kQuantCachedPacks packs each), at most 512 (longer rows: a tail read twice); one block per row up to
    _MAX_BLOCKS."""
    pack = 16 // elem_size if vector else 1
    per_thread = kernels.QUANTIZE_ROWS_CACHED_PACKS
    packs = k // pack
    threads = -(-packs // per_thread)
    threads = min(kernels.QUANTIZE_ROWS_MAX_THREADS, max(64, -(-threads // 64) * 64))
    return threads, min(m, _MAX_BLOCKS)


# (shape, strides, dtype, device, 16-byte alignment of x, code dtype) -> _Launch; filled by the checked path.
_LAUNCHES: dict = {}
_CACHE_LIMIT = 4096


class _Launch:
    __slots__ = ("dev", "device", "m", "k", "launch", "args", "qdtype")

    def __init__(self, device, m, k, launch, args, qdtype):
        self.dev, self.device, self.m, self.k, self.launch, self.args, self.qdtype = (device.index, device, m, k,
                                                                                      launch, args, qdtype)


def _prepare(x2: torch.Tensor, qdtype: torch.dtype) -> _Launch:
    from .runtime.launch import module_for

    m, k = x2.shape
    if m > _I32_MAX or k > _I32_MAX:
        raise ValueError(f"quantize_rows: M and K must be below 2^31, got M={m}, K={k}")
    es = x2.element_size()
    ld = x2.stride(0) if m > 1 else k
    vector = x2.data_ptr() % 16 == 0 and (ld * es) % 16 == 0 and (k * es) % 16 == 0
    threads, blocks = plan_quantize_rows(m, k, es, vector)
    name = kernels.quantize_rows_kernel_name(str(x2.dtype).removeprefix("torch."),
                                             str(qdtype).removeprefix("torch."), vector)
    kern = module_for("quantize_rows", x2.device.index).kernel(name, kernels.QUANTIZE_ROWS)
    return _Launch(x2.device, m, k, kern.bind((blocks, 1, 1), (1, 1, 1), threads, 0), (ld, m, k, blocks), qdtype)


def _quantize_rows_gpu(x2: torch.Tensor, qdtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    key = (x2.shape, x2.stride(), x2.dtype, x2.get_device(), x2.data_ptr() & 15, qdtype)
    hit = _LAUNCHES.get(key)
    if hit is None or hit.dev != current_device_index():
        m, k = x2.shape
        if m == 0 or k == 0:
            return (torch.empty((m, k), dtype=qdtype, device=x2.device),
                    torch.ones(m, dtype=torch.float32, device=x2.device))
        with device_guard(x2.device):
            hit = _prepare(x2, qdtype)
        if len(_LAUNCHES) >= _CACHE_LIMIT:
            _LAUNCHES.clear()
        _LAUNCHES[key] = hit
    xq = torch.empty((hit.m, hit.k), dtype=qdtype, device=hit.device)
    scale = torch.empty(hit.m, dtype=torch.float32, device=hit.device)
    ld, m, k, blocks = hit.args
    with device_guard(x2.device):
        hit.launch(current_raw_stream(hit.dev), x2.data_ptr(), ld, xq.data_ptr(), scale.data_ptr(), m, k, blocks)
    return xq, scale


def quantize_rows_forward(x: torch.Tensor, qdtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's implementation: the kernel for GPU tensors, the torch path for CPU ones (the emulated kernel inside
    fusedgemm.testing.emulate)."""
    x2 = _rows(x, "quantize_rows")
    if x2.device.type == "cuda":
        return _quantize_rows_gpu(x2, qdtype)
    if x2.device.type != "cpu":
        raise ValueError(f"quantize_rows: x must be on a GPU or the CPU, got {x2.device}")
    if emulated_arch() is not None:
        return _quantize_rows_gpu(x2, qdtype)
    return quantize_rows_torch(x2, qdtype)


def quantize_rows(x: torch.Tensor, dtype="fp8", *, group: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row absmax quantization: x [..., K] (float32 / bfloat16 / float16; leading dims flattened; any row
    stride with a unit last stride is read in place, other layouts are copied first) -> (xq [M, K] 8-bit,
    scale [M] float32) with x ~= xq * scale[:, None].

    dtype: 'fp8' (the device's variant: float8_e4m3fn on sm_90a / gfx950 and the CPU, float8_e4m3fnuz on
    gfx942), 'int8' (names case-insensitive), or one of those torch dtypes. The rule (module docstring):
    scale = absmax / qmax (1 for a zero row, at least 2^-126), xq = round_nearest_even(x * (1 / scale)) saturated
    at +-qmax.
    GPU: one kernel on the current stream, no host synchronisation, CUDA-graph capturable; CPU: torch ops,
    same results bit for bit.
    group (DeepSeek-V3's 1 x 128 activation blocks: group=128): one scale per `group` consecutive values of a row,
    scale [M, ceil(K / group)] (what gemm_a8 takes as a block scale_a). The same rule per group: the row's groups are
    quantized as rows of their own (the same kernel over the [M * K / group, group] view; a K that is not a multiple
    of group is copied into a zero-padded buffer first, zeros changing no group's absmax)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize_rows: expected a torch.Tensor, got {type(x).__name__}")
    if group is not None:
        return _quantize_groups(x, dtype, group)
    qdtype = resolve_dtype(dtype, x.device)
    if torch.compiler.is_compiling():
        xq, scale = torch.ops.fusedgemm.quantize_rows(x, qdtype)  # registered below
        return xq, scale
    return quantize_rows_forward(x, qdtype)


def _quantize_groups(x: torch.Tensor, dtype, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_rows(x, dtype, group=group): each row's groups of `group` values as rows of their own."""
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ValueError(f"quantize_rows: group must be a positive int (128: DeepSeek-V3's 1 x 128 blocks), got "
                         f"{group!r}")
    if x.dim() == 0:
        raise ValueError("quantize_rows: x must have at least one dimension [..., K]")
    k = x.shape[-1]
    x2 = x.reshape(-1, k)
    kp = -(-k // group) * group
    if kp != k:
        x2 = torch.nn.functional.pad(x2, (0, kp - k))
    q, scale = quantize_rows(x2.reshape(-1, group), dtype)
    q = q.reshape(-1, kp)
    return (q if kp == k else q[:, :k].contiguous()), scale.reshape(-1, kp // group)


def quantize_weight(w: torch.Tensor, dtype="fp8", *, block: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel weight quantization: w [N, K] (nn.Linear layout) -> (wq [N, K] 8-bit, scale [N]
    float32), the quantize_rows rule over w's rows, so w ~= wq * scale[:, None]. float64 weights are rounded
    to float32 first. Returns the plain layout: fusedgemm.preshuffle(wq) is what gemm_a8 reads.
    block=128 (DeepSeek-V3's 128 x 128 weight blocks): one scale per block, scale [ceil(N/128), ceil(K/128)] (what
    gemm_a8 takes as a block scale_b), the same rule over each block's values (torch ops: a load-time step)."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError(f"quantize_weight: expected a 2-D weight [N, K], got "
                         f"{tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__}")
    w = w.detach()
    if w.dtype == torch.float64:
        w = w.to(torch.float32)
    qdtype = resolve_dtype(dtype, w.device, "quantize_weight")
    if block is None:
        return quantize_rows(w, qdtype)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"quantize_weight: block must be a positive int (128: 128 x 128 blocks), got {block!r}")
    n, k = w.shape
    nb, kb = -(-n // block), -(-k // block)
    wf = torch.nn.functional.pad(w.to(torch.float32), (0, kb * block - k, 0, nb * block - n))
    blocks = wf.reshape(nb, block, kb, block).permute(0, 2, 1, 3).reshape(nb * kb, block * block)
    q, scale = quantize_rows_torch(blocks, qdtype)  # the rule per block (as quantize_rows per row)
    q = q.reshape(nb, kb, block, block).permute(0, 2, 1, 3).reshape(nb * block, kb * block)[:n, :k].contiguous()
    return q, scale.reshape(nb, kb)


# ---- torch.library op: what torch.compile records of quantize_rows ---------------------------------------------
@torch.library.custom_op("fusedgemm::quantize_rows", mutates_args=())
def quantize_rows_op(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] -> (codes [M, K] of dtype, scale [M] float32); the kernel on a GPU, torch ops on the CPU."""
    return quantize_rows_forward(x, dtype)


@quantize_rows_op.register_fake
def _quantize_rows_fake(x, dtype):
    k = x.shape[-1]
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    return x.new_empty((m, k), dtype=dtype), x.new_empty((m,), dtype=torch.float32)
