"""Batched GEMM for tiny matrices (m, n, k <= 64): one launch, fp32 accumulation, any input strides.

    fusedgemm.bmm_tiny(a, b)   a [B, m, k]; b [B, k, n] or [k, n] / [1, k, n] (broadcast over the batch)
    fusedgemm.bmm(a, b)        bmm_tiny when it applies (m, n, k <= 64, B > 1, f32/bf16/f16 on a GPU),
                               else torch.bmm. FUSEDGEMM_DISABLE_TINY_GEMM=1 forces torch.bmm.
Both are differentiable (the gradients are tiny batched GEMMs as well).
"""
from __future__ import annotations

import functools
import os
import warnings

import torch

from .runtime.device import current_device_index, current_raw_stream, device_guard, emulated_arch
from .runtime import kernels
from .runtime.arch import device_arch, vendor_of

_DTYPE_NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_SMEM_CAP = 48 * 1024  # portable without opting in: the default on NVIDIA, within the 64 KB LDS of gfx942
_I32_MAX = 2**31 - 1
_REGS_PER_THREAD = 128  # the kernels' register cap on NVIDIA (__launch_bounds__(256, 2)): occupancy below
# Registers the cp.async kernels use at most, by tile (their __launch_bounds__ caps on sm_90a; tests/test_build.py
# checks the build log against these), so the resident grid below counts the blocks that really fit.
_ASYNC_REGS = {(2, 4): 80, (4, 4): 80, (4, 8): 128}
_ASYNC_STAGE_BYTES = 24 * 1024  # a ring slot of about this much (or one element), see _plan_async
_ASYNC_RING_BYTES = 48 * 1024  # k-chunked plans (knob kc): a ring of about this much
_PRINT_CONFIGS = os.environ.get("FUSEDGEMM_PRINT_CONFIGS", "") not in ("", "0")
_warned_fallback = False


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


@functools.lru_cache(maxsize=None)
def _device_limits(index: int) -> tuple[int, int, int, int]:
    """(multiprocessors, shared memory, threads, registers per multiprocessor) of a GPU; H100 values where torch
    does not report one."""
    p = torch.cuda.get_device_properties(index)
    return (p.multi_processor_count, getattr(p, "shared_memory_per_multiprocessor", 0) or 228 * 1024,
            getattr(p, "max_threads_per_multi_processor", 0) or 2048,
            getattr(p, "regs_per_multiprocessor", 0) or 65536)


_H100_LIMITS = (132, 228 * 1024, 2048, 65536)


@functools.lru_cache(maxsize=4096)
def plan_bmm_tiny(batch: int, m: int, n: int, k: int, dtype_name: str, broadcast_b: bool = False,
                  limits: tuple[int, int, int, int] = _H100_LIMITS, r: int | None = None, elems: int | None = None,
                  threads: int | None = None, persistent: bool = True, per_sm: int | None = None,
                  async_copy: bool = False, rm: int | None = None, rn: int | None = None,
                  stages: int | None = None, kc: int | None = None, fixed_tx: bool = True) -> dict:
    """Launch plan: micro-tile R, thread tile (tx, ty), elements per group, threads, shared-memory layout, grid.

    async_copy: the f32 cp.async kernels (_plan_async: tile rm x rn, `stages` ring slots, k-chunks of kc),
    which the launcher asks for when the operands allow it (_async_ok); r selects the register-staged kernels.

    A group (`elems` batch elements) is what a block stages at once: each thread holds up to BMM_TINY_QUADS
    quads (4 values) of A and of B, and the group's A and B must fit 48 KB of shared memory. Groups hold as
    many elements as fit, but no more than spreads the batch over ~2 groups per multiprocessor (small batches
    are latency-bound: more, smaller blocks). The grid is what stays resident (`persistent`): each block loops
    over groups, loading the next while it computes the current one. R = 4 (16 multiply-adds per pair of
    shared-memory reads) unless a thread would then compute much longer than with R = 2 (_compute_cost); r,
    elems, threads, persistent and per_sm (resident blocks per multiprocessor the grid assumes) are knobs for
    the benchmark."""
    if async_copy and r is None:
        if dtype_name != "float32" or k % 4:
            raise ValueError(f"bmm_tiny: the cp.async kernels need float32 and k % 4 == 0, got {dtype_name}, k={k}")
        return _plan_async(batch, m, n, k, broadcast_b, limits, rm, rn, elems, stages, threads, persistent, per_sm,
                           kc, fixed_tx)
    sms, smem_per_sm, threads_per_sm, regs_per_sm = limits
    quads = kernels.BMM_TINY_QUADS
    if r is None:  # the micro-tile with the shorter per-thread compute (benchmark: docs/perf-notes.md, bmm_tiny)
        plans = []
        for rr in (4, 2):
            try:
                plans.append(plan_bmm_tiny(batch, m, n, k, dtype_name, broadcast_b, limits, rr, elems, threads,
                                           persistent, per_sm))
            except ValueError:
                pass
        # Small batches (<= 8 elements per multiprocessor) are latency-bound: R = 4's fewer shared-memory reads
        # per multiply-add shorten each element's critical path, whatever the compute-cost estimate says.
        if plans[0]["r"] == 4 and batch <= 8 * sms:
            return plans[0]
        return min(plans, key=_compute_cost)
    if r not in kernels.BMM_TINY_MICROTILES:
        raise ValueError(f"bmm_tiny: micro-tile r must be one of {kernels.BMM_TINY_MICROTILES}, got {r}")
    tx, ty = _ceil_div(n, r), _ceil_div(m, r)
    if tx * ty > kernels.BMM_TINY_MAX_THREADS:
        raise ValueError(f"bmm_tiny: r={r} needs {tx * ty} threads per element for m={m}, n={n} (max 256)")
    k4 = _round_up(k, 4)
    lda = k4 + 4 if k4 % 8 == 0 else k4  # rows R apart (R = 2, 4) in different banks
    ldb = max(tx * r, _round_up(n, 4))
    a_elem = max(ty * r, _round_up(m, 4)) * lda
    b_elem = k4 * ldb
    # Quads per element in either orientation (the kernel runs them along the smaller stride).
    qa = max(_ceil_div(k, 4) * m, _ceil_div(m, 4) * k)
    qb = 0 if broadcast_b else max(_ceil_div(n, 4) * k, _ceil_div(k, 4) * n)
    per_elem = a_elem + (0 if broadcast_b else b_elem)
    fixed = b_elem if broadcast_b else 0
    max_threads = kernels.BMM_TINY_MAX_THREADS
    if elems is None:
        fit = min(quads * max_threads // max(qa, qb), (_SMEM_CAP // 4 - fixed) // per_elem)
        elems = max(1, min(fit, _ceil_div(batch, 2 * sms)))
    elems = min(elems, batch)
    if threads is None:
        need = max(_ceil_div(elems * max(qa, qb), quads), tx * ty, min(elems * tx * ty, max_threads))
        threads = min(max_threads, _round_up(need, 64))
    smem = 4 * (elems * per_elem + fixed)
    if elems * max(qa, qb) > quads * threads or threads < tx * ty or smem > _SMEM_CAP:
        raise ValueError(f"bmm_tiny: plan elems={elems}, threads={threads} does not fit ({m}x{n}x{k}, r={r})")
    groups = _ceil_div(batch, elems)
    if per_sm is None:
        per_sm = min(threads_per_sm // threads, smem_per_sm // (smem + 1024),
                     regs_per_sm // (threads * _REGS_PER_THREAD), 32)
    grid = min(groups, sms * max(1, per_sm)) if persistent else groups
    return dict(name=kernels.bmm_tiny_kernel_name(dtype_name, r), r=r, tx=tx, ty=ty, elems=elems, threads=threads,
                lda=lda, ldb=ldb, a_elem=a_elem, b_elem=b_elem, smem=smem, grid=(grid, 1, 1), k4=k4, stages=1, kc=k4)


def _plan_async(batch: int, m: int, n: int, k: int, broadcast_b: bool, limits: tuple[int, int, int, int],
                rm: int | None, rn: int | None, elems: int | None, stages: int | None, threads: int | None,
                persistent: bool, per_sm: int | None, kc: int | None, fixed_tx: bool = True) -> dict:
    """Plan of the f32 cp.async kernels (bmm_tiny.hpp, bmm_tiny_async_block; k % 4 == 0).

    Tile: among the RM x RN of kernels.BMM_TINY_ASYNC_TILES that waste the fewest padded outputs, the largest
    (fewest shared-memory reads per multiply-add) that still gives an element >= 16 threads, else the one that
    gives it the most (docs/perf-notes.md lists the tiles this picks for the benchmark shapes). fixed_tx: the
    kernel with tx fixed at compile time where the tile has one for this tx (kernels.BMM_TINY_ASYNC_FIXED_TX;
    the same code minus address arithmetic). A ring slot holds `elems` elements: up to ~128 threads' worth of
    tiles and ~_ASYNC_STAGE_BYTES, at least one element; 2 slots (one in flight while one computes: more slots
    cost more shared memory per block, so fewer blocks fit). kc < k (a knob) streams each element in k-chunks
    through a ring of ~_ASYNC_RING_BYTES: more blocks fit, but each chunk costs a barrier and a copy round, so
    the default is the whole k. Above 48 KB of shared memory the launcher opts in."""
    sms, smem_per_sm, threads_per_sm, regs_per_sm = limits
    sizes = {t: _ceil_div(n, t[1]) * _ceil_div(m, t[0]) for t in kernels.BMM_TINY_ASYNC_TILES}
    tiles = [t for t, most in kernels.BMM_TINY_ASYNC_TILES.items() if (rm is None or t[0] == rm)
             and (rn is None or t[1] == rn) and sizes[t] <= most]
    if not tiles:
        raise ValueError(f"bmm_tiny: no cp.async tile rm={rm}, rn={rn} of {tuple(kernels.BMM_TINY_ASYNC_TILES)} "
                         f"fits m={m}, n={n}")
    waste = min(_round_up(m, t[0]) * _round_up(n, t[1]) for t in tiles)
    tiles = [t for t in tiles if _round_up(m, t[0]) * _round_up(n, t[1]) == waste]
    enough = [t for t in tiles if sizes[t] >= 16]
    rm, rn = max(enough, key=lambda t: t[0] * t[1]) if enough else max(tiles, key=lambda t: sizes[t])
    max_threads = kernels.BMM_TINY_ASYNC_TILES[rm, rn]
    tx, ty = _ceil_div(n, rn), _ceil_div(m, rm)
    tpe = tx * ty
    ldb = tx * rn

    def slot_floats(kc_: int) -> int:  # one element's A chunk [ty rm][lda] and B chunk [kc][ldb]
        return ty * rm * (kc_ + 4 if kc_ % 8 == 0 else kc_) + (0 if broadcast_b else kc_ * ldb)

    kc = k if kc is None else kc
    if kc <= 0 or kc % 4 or k % kc:
        raise ValueError(f"bmm_tiny: kc must be a multiple of 4 that divides k={k}, got {kc}")
    lda = kc + 4 if kc % 8 == 0 else kc  # = 4 mod 8: the adjacent rows a warp reads fall in different banks
    a_elem, b_elem = ty * rm * lda, kc * ldb
    per_elem = slot_floats(kc)
    fixed = k * ldb if broadcast_b else 0
    if elems is None:
        elems = 1 if kc < k else max(1, min(128 // tpe, _ASYNC_STAGE_BYTES // (4 * per_elem), _ceil_div(batch, sms)))
    elems = min(elems, batch)
    if stages is None:  # chunks: a ring of ~_ASYNC_RING_BYTES
        stages = 2 if kc == k else max(2, min(kernels.BMM_TINY_MAX_STAGES, _ASYNC_RING_BYTES // (4 * elems * per_elem)))
    if threads is None:
        threads = min(max_threads, _round_up(max(elems * tpe, 32), 32))
    smem = 4 * (stages * elems * per_elem + fixed)
    if not 2 <= stages <= kernels.BMM_TINY_MAX_STAGES or threads < tpe or threads > max_threads \
            or smem > smem_per_sm - 1024 or (kc < k and elems * tpe > threads):
        raise ValueError(f"bmm_tiny: cp.async plan elems={elems}, stages={stages}, threads={threads}, kc={kc} does "
                         f"not fit ({m}x{n}x{k}, tile {rm}x{rn})")
    groups = _ceil_div(batch, elems)
    if per_sm is None:
        per_sm = min(threads_per_sm // threads, smem_per_sm // (smem + 1024),
                     regs_per_sm // (threads * _ASYNC_REGS[rm, rn]), 32)
    grid = min(groups, sms * max(1, per_sm)) if persistent else groups
    return dict(name=kernels.bmm_tiny_async_kernel_name(rm, rn, tx if fixed_tx else 0), r=0, rm=rm, rn=rn, tx=tx,
                ty=ty, elems=elems, threads=threads, lda=lda, ldb=ldb, a_elem=a_elem, b_elem=b_elem, smem=smem,
                grid=(grid, 1, 1), k4=k, stages=stages, kc=kc)


def _async_ok(dtype_name: str, a_mode: int, b_mode: int, broadcast_b: bool, arch: str) -> bool:
    """Whether the cp.async kernels can stage these operands: f32, A (and B unless broadcast) in 16-byte quads
    along their rows. NVIDIA arches only: on AMD the kernels compile (plain copies) but the register-staged ones
    are what was designed for CDNA's LDS and not yet compared on a GPU."""
    rows = kernels.BMM_TINY_ALONG_J | kernels.BMM_TINY_VECTOR
    return (dtype_name == "float32" and vendor_of(arch) == "nvidia" and a_mode & rows == rows
            and (broadcast_b or b_mode & rows == rows))


def _compute_cost(plan: dict) -> int:
    """Instructions one thread issues to compute a group: passes over the group's elements x steps of 4 in k
    x (R + 4 shared-memory reads + 4 R^2 multiply-adds). Small batches are latency-bound and big ones wait on
    memory, so the shorter serial compute wins; R = 4 on a tie (fewer shared-memory reads in total)."""
    r, tpe = plan["r"], plan["tx"] * plan["ty"]
    passes = _ceil_div(plan["elems"], plan["threads"] // tpe)
    return passes * plan["k4"] // 4 * (r + 4 + 4 * r * r) + (r == 2)


def _operand_mode(ptr: int, elem_size: int, s_batch: int, s_i: int, s_j: int, rows: int, cols: int,
                  broadcast: bool = False) -> int:
    """How the kernel stages X[e][i][j] (rows x cols, strides s_batch, s_i, s_j; `broadcast`: one matrix,
    staged once): quads of 4 values run along the smaller stride (kAlongJ if that is j); one vector load per
    quad when it is 1, the extent a multiple of 4 and every quad aligned (kVector); kDense if rows and
    elements are also packed back to back (quad q of a group at 4 q)."""
    along_j = rows == 1 or (cols > 1 and abs(s_j) <= abs(s_i))
    fast, s_fast, slow, s_slow = (cols, s_j, rows, s_i) if along_j else (rows, s_i, cols, s_j)
    vec = (s_fast == 1 and fast % 4 == 0 and (slow == 1 or s_slow % 4 == 0) and s_batch % 4 == 0
           and ptr % (4 * elem_size) == 0)
    dense = vec and along_j and (rows == 1 or s_i == cols) and (broadcast or s_batch == rows * cols)
    return ((kernels.BMM_TINY_ALONG_J if along_j else 0) | (kernels.BMM_TINY_VECTOR if vec else 0)
            | (kernels.BMM_TINY_DENSE if dense else 0))


def _check_tensors(a, b, who: str = "bmm_tiny") -> None:
    for t, name in ((a, "a"), (b, "b")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{who}: {name}: expected a torch.Tensor, got {type(t).__name__}")


def _check(a, b, out):
    """Every check of a bmm_tiny call, the same with and without autograd; returns (batch, m, n, k, b as 3-D)."""
    _check_tensors(a, b)
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
    if b.device != a.device:
        raise ValueError(f"bmm_tiny: a and b must be on one device (a GPU, or the CPU: the torch reference), got "
                         f"{a.device} and {b.device}")
    if a.device.type not in ("cuda", "cpu"):
        raise ValueError(f"bmm_tiny: tensors must be on a GPU (cuda/ROCm device) or the CPU, a is on {a.device}")
    for t, name in ((a, "a"), (b3, "b")):  # offsets inside one matrix are 32-bit in the kernel
        if (t.shape[1] - 1) * t.stride(1) + (t.shape[2] - 1) * t.stride(2) + 3 * max(t.stride()[1:]) > _I32_MAX \
                or min(t.stride()) < 0:
            raise ValueError(f"bmm_tiny: {name} has strides {tuple(t.stride())} beyond the kernel's 32-bit range")
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.shape != (batch, m, n) or out.dtype != a.dtype:
            raise ValueError(f"bmm_tiny: out must be [{batch}, {m}, {n}] {a.dtype}, got "
                             f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
        if out.device != a.device or not out.is_contiguous():
            raise ValueError("bmm_tiny: out must be a contiguous tensor on the device of a")
    return batch, m, n, k, b3


def plan_for(a: torch.Tensor, b3: torch.Tensor, **knobs) -> tuple[dict, int, int, int, int]:
    """(plan, a_mode, b_mode, sab, sbb) for out = a @ b3 (a [B, m, k], b3 [B or 1, k, n] on a GPU): the
    cp.async kernels where the operands allow them (_async_ok) unless knobs say otherwise."""
    batch, m, k = a.shape
    n = b3.shape[2]
    sab = a.stride(0) if batch > 1 else m * k
    sbb = 0 if b3.shape[0] == 1 or batch == 1 else b3.stride(0)
    es = a.element_size()
    a_mode = _operand_mode(a.data_ptr(), es, sab, a.stride(1), a.stride(2), m, k)
    b_mode = _operand_mode(b3.data_ptr(), es, sbb, b3.stride(1), b3.stride(2), k, n, sbb == 0)
    dtype_name = _DTYPE_NAME[a.dtype]
    async_ok = _async_ok(dtype_name, a_mode, b_mode, sbb == 0, device_arch(a.device.index))
    if knobs.get("async_copy") and not async_ok:
        raise ValueError(f"bmm_tiny: async_copy needs float32 operands in 16-byte rows (modes a={a_mode}, b={b_mode})")
    if "r" not in knobs:  # r picks a register-staged kernel
        knobs.setdefault("async_copy", async_ok)
    plan = plan_bmm_tiny(batch, m, n, k, dtype_name, sbb == 0, _device_limits(a.device.index), **knobs)
    return plan, a_mode, b_mode, sab, sbb


# Eager hot path (a tiny batch's kernel runs for a few us, less than the Python around it). A call without
# out= looks up everything its launch depends on -- shapes, strides, dtypes and devices of a and b, and their
# 16-byte alignment -- in _FAST: a hit gives the output shape and a launch bound to its grid (Kernel.bind),
# so it skips the checks and the planning; a miss takes the checked path, which fills it. launch_bmm_tiny
# (out=, benchmark knobs) keeps its own cache of launches.
_FAST: dict = {}        # (a and b metadata, alignments) -> _FastLaunch
_LAUNCHES: dict = {}    # (shapes, strides, dtype, device, 16-byte alignment of a and b) -> (kernel, fixed args)
_CACHE_LIMIT = 4096     # entries per cache; past this it starts over (shapes that change every call)


class _FastLaunch:
    __slots__ = ("dev", "device", "out_shape", "launch")

    def __init__(self, device: torch.device, out_shape: tuple, launch):
        self.dev, self.device, self.out_shape, self.launch = device.index, device, out_shape, launch


def _prepare_launch(a: torch.Tensor, b3: torch.Tensor, knobs: dict) -> tuple:
    """(kernel, grid, threads, smem, arguments after the three pointers) of out = a @ b3."""
    from .runtime.launch import module_for

    batch, m, k = a.shape
    n = b3.shape[2]
    dev = a.device.index
    plan, a_mode, b_mode, sab, sbb = plan_for(a, b3, **knobs)
    if _PRINT_CONFIGS:
        print(f"[fusedgemm] bmm_tiny batch={batch} m={m} n={n} k={k} modes a={a_mode} b={b_mode} -> "
              + " ".join(f"{key}={val}" for key, val in plan.items()))
    kern = module_for("bmm_tiny", dev).kernel(plan["name"], kernels.BMM_TINY)
    if plan["smem"] > _SMEM_CAP:
        kern.set_max_dynamic_smem(plan["smem"])  # the opt-in above 48 KB; a no-op once the limit is this high
    return (kern, plan["grid"], plan["threads"], plan["smem"],
            (batch, m, n, k, sab, a.stride(1), a.stride(2), sbb, b3.stride(1), b3.stride(2), a_mode, b_mode,
             plan["tx"], plan["ty"], plan["elems"], plan["lda"], plan["ldb"], plan["a_elem"], plan["b_elem"],
             plan["grid"][0], plan["stages"], plan["kc"]))


def _cached_launch(a: torch.Tensor, b3: torch.Tensor) -> tuple:
    """_prepare_launch of the default plan, cached in _LAUNCHES (the operand modes depend on the pointers only
    through their 16-byte alignment)."""
    key = (a.shape, a.stride(), b3.shape, b3.stride(), a.dtype, a.device, a.data_ptr() & 15, b3.data_ptr() & 15)
    launch = _LAUNCHES.get(key)
    if launch is None:
        if len(_LAUNCHES) >= _CACHE_LIMIT:
            _LAUNCHES.clear()
        launch = _LAUNCHES[key] = _prepare_launch(a, b3, {})
    return launch


def launch_bmm_tiny(a: torch.Tensor, b3: torch.Tensor, out: torch.Tensor, **knobs) -> torch.Tensor:
    """out = a @ b3 with the kernel (inputs checked by _check); knobs go to plan_bmm_tiny (benchmark only)."""
    batch, m, k = a.shape
    n = b3.shape[2]
    if batch == 0 or m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    kern, grid, threads, smem, args = _prepare_launch(a, b3, knobs) if knobs else _cached_launch(a, b3)
    kern(grid, threads, smem, current_raw_stream(a.device.index), a.data_ptr(), b3.data_ptr(), out.data_ptr(), *args)
    return out


def _bmm_tiny_forward(a, b, out=None):
    key = None
    if out is None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        a_ptr, b_ptr = a.data_ptr(), b.data_ptr()
        # Devices by index (get_device: a CUDA index, -1 for CPU and meta tensors, which never match an entry):
        # cheaper than building two torch.device objects per call, as is the cached device of torch.empty.
        key = (a.shape, a.stride(), a.dtype, a.get_device(), b.shape, b.stride(), b.dtype, b.get_device(), a_ptr & 15,
               b_ptr & 15)
        hit = _FAST.get(key)
        if hit is not None and hit.dev == current_device_index():
            out = torch.empty(*hit.out_shape, dtype=a.dtype, device=hit.device)
            hit.launch(current_raw_stream(hit.dev), a_ptr, b_ptr, out.data_ptr())
            return out
    batch, m, n, k, b3 = _check(a, b, out)  # bad inputs raise here and are never cached
    if out is None:
        out = torch.empty((batch, m, n), dtype=a.dtype, device=a.device)
    if a.device.type == "cpu" and emulated_arch() is None:  # no kernel: the torch reference, float64 inside,
        # rounded once (inside fusedgemm.testing.emulate: the emulated kernel)
        return out.copy_(torch.matmul(a.double(), b3.double()))
    with device_guard(a.device):
        launch_bmm_tiny(a, b3, out)
        if key is not None and min(batch, m, n, k) > 0:
            _remember_fast(key, a, b3, (batch, m, n))
    return out


def _remember_fast(key: tuple, a: torch.Tensor, b3: torch.Tensor, out_shape: tuple) -> None:
    """Record the launch of a call that just ran checked (out=None, non-empty problem) under its _FAST key."""
    kern, grid, threads, smem, args = _cached_launch(a, b3)  # planned by that call's launch_bmm_tiny
    if len(_FAST) >= _CACHE_LIMIT:
        _FAST.clear()
    _FAST[key] = _FastLaunch(a.device, out_shape, kern.bind(grid, (1, 1, 1), threads, smem, tail=args))


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
    """bmm_tiny's forward where it takes the dtype (f32/bf16/f16: the kernel, on the CPU its reference); torch.bmm
    otherwise (float64)."""
    if a.dtype in _DTYPE_NAME:
        return _bmm_tiny_forward(a, b)
    return _torch_bmm(a, b)


class _BmmTinyFn(torch.autograd.Function):
    """C = A @ B with the tiny-GEMM kernel; the backward is two more tiny batched GEMMs. For dtypes without
    a kernel (float64) the same formulas run through torch.bmm, so gradcheck can check them. Internal: bmm_tiny
    validates its inputs (_check) before applying it, fusedgemm.bmm applies it to float64 on a GPU."""

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
    (not with out=). a and b must be on one device; inputs the kernel does not take (float64, m, n or k > 64)
    raise, with or without requires_grad: fusedgemm.bmm is the call that falls back to torch.bmm.
    CPU tensors: the same checks, output dtype and shape, computed by a torch reference (float64 inside, rounded
    once; no kernel runs)."""
    if torch.compiler.is_compiling() and out is None:
        return torch.ops.fusedgemm.bmm_tiny(a, b)  # registered below
    if out is None and torch.is_grad_enabled():
        try:
            grad = a.requires_grad or b.requires_grad
        except AttributeError:  # not a tensor: _check's TypeError below
            grad = False
        if grad:
            _check(a, b, None)  # the checks of the call without grad (_BmmTinyFn would run torch.bmm on the CPU)
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
                and a.dtype == b.dtype and (a.is_cuda or emulated_arch() is not None) and b.device == a.device
                and not _tiny_gemm_disabled())
    if not eligible:
        _check_tensors(a, b, "fusedgemm.bmm")
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


# ---- torch.library op: what torch.compile records of bmm_tiny (differentiable) -------------------------------
@torch.library.custom_op("fusedgemm::bmm_tiny", mutates_args=())
def bmm_tiny_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
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
    a, b = ctx.saved_tensors
    return bmm_grads(a, b, grad, ctx.needs_input_grad, bmm_tiny_op)


bmm_tiny_op.register_autograd(_bmm_tiny_backward, setup_context=_bmm_tiny_setup)
