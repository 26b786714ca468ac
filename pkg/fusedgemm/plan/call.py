"""The launch plan of one checked call signature, shared by gemm_a8 and matmul_fused: the kernel (by spec), grid,
packed arguments and -- on sm_90a -- the operands' TMA tensor maps, worked out once and reused by the eager fast
paths, which then re-check only addresses and the current device (util.PlanCache holds them by call signature).
"""
from __future__ import annotations

import torch

from ..epilogue.ir import operands as _epi_operands
from . import plan_for, sm_count
from ..runtime.arch import vendor_of
from ..runtime.device import current_raw_stream
from ..runtime.gemm_spec import MATMUL_IN, OUT_CODEGEN, GemmKernel, config_fits, whole_k_blocks
from ..runtime.kernels import GEMM_CONFIGS, IN_BYTES

_MAX_GRID_Y = 65535
# A persistent config: whether the epilogue fits its staging decides whether the plan may pick one (config_fits).
PERSISTENT_CONFIG = next(name for name, cfg in GEMM_CONFIGS.items() if cfg.persistent)
_KERNELS: dict[tuple, object] = {}  # (device, GemmKernel) -> loaded kernel

# ---- TMA tensor maps (sm_90a) ---------------------------------------------------------------------------------
# Encoded by the driver on the host, cached by (address, shape): the same key always encodes the same bytes,
# so a hit is exact even if the memory was freed and reused. Weights hit every call; activations often do.
_TMAP_UINT8, _TMAP_SWIZZLE_NONE, _TMAP_SWIZZLE_128B, _TMAP_L2_128B, _TMAP_L2_256B = 0, 0, 3, 2, 3
# CUtensorMapDataType of each input kind. tf32: the copy engine rounds each fp32 value to TF32 (nearest) as it
# lands in shared memory, where the tensor core would otherwise drop the low 13 bits.
# f32x3: FLOAT32, the exact bits (the kernel splits each value into two TF32 parts itself).
TMAP_DTYPE = {"fp8": 0, "int8": 0, "bf16": 9, "fp16": 6, "tf32": 11, "f32x3": 7}
# L2 promotion of the copies: 256 B, except on the swapped decode tiles, whose few rows of A make the smaller
# promotion the faster one (docs/perf-notes.md has the measurement); the larger tiles keep 256 B.
_TMAP_L2_DECODE = _TMAP_L2_128B
_TMAP_CACHE: dict[tuple, bytes] = {}
_TMAP_CACHE_MAX = 512


def _tensor_map(key: tuple, *encode_args) -> bytes:
    tmap = _TMAP_CACHE.get(key)
    if tmap is None:
        from ..runtime.launch import encode_tensor_map_tiled

        if len(_TMAP_CACHE) >= _TMAP_CACHE_MAX:
            _TMAP_CACHE.pop(next(iter(_TMAP_CACHE)))
        tmap = _TMAP_CACHE[key] = encode_tensor_map_tiled(*encode_args)
    return tmap


def _tensor_map_a(ptr: int, m: int, k: int, block_m: int, l2: int = _TMAP_L2_256B, kind: str = "fp8",
                  ld: int | None = None) -> bytes:
    """A [M, K] row-major (row stride `ld` elements, default K); box 128 B x rows, 128-byte swizzle (what the
    wgmma A descriptor reads). Rows: the tile's, or M rounded up to 8 when M fits in one tile (a_box_rows in
    sm90_gemm_common.hpp)."""
    rows = block_m if m >= block_m else (m + 7) // 8 * 8
    return _tensor_map_k_major(ptr, m, k, rows, l2, kind, k if ld is None else ld)


def _tensor_map_k_major(ptr: int, rows: int, k: int, box_rows: int, l2: int, kind: str, ld: int) -> bytes:
    """A K-major [rows, K] operand (row stride `ld` elements): box 128 B of K x box_rows, 128-byte swizzle -- A,
    and matmul_fused's plain B [N, K] (copy_k_block in sm90_gemm_common.hpp)."""
    nbytes = IN_BYTES[kind]
    return _tensor_map(("k", ptr, rows, k, ld, box_rows, l2, kind), TMAP_DTYPE[kind], 2, ptr, (k, rows),
                       (ld * nbytes,), (128 // nbytes, box_rows), (1, 1), 0, _TMAP_SWIZZLE_128B, l2, 0)


def _tensor_map_b(ptr: int, n: int, k: int, block_n: int, l2: int = _TMAP_L2_256B, chunks: int = 8) -> bytes:
    """Preshuffled B as a 3-D map ordered (256 B, row block of 16, K chunk of 16 B): strides 16 K, 256. One copy
    (box 256 x block_n/16 x 8) gathers a 128-byte K step of the tile's row blocks, landing [K chunk][row][16 B]:
    the K-major core-matrix layout the wgmma B descriptor reads (sm90_gemm.hpp). chunks = 4: a B-multicast
    pair's CTA copies half of the K step."""
    return _tensor_map(("b", ptr, n, k, block_n, l2, chunks), _TMAP_UINT8, 3, ptr, (256, n // 16, k // 16),
                       (16 * k, 256), (256, block_n // 16, chunks), (1, 1, 1), 0, _TMAP_SWIZZLE_NONE, l2, 0)


def _tensor_map_b_mn(ptr: int, n: int, k: int, block_n: int, l2: int, kind: str, ld: int) -> bytes:
    """An MN-major B [K, N] (row stride `ld`): box 64 values of N (128 B) x 128 B worth of K rows, 128-byte
    swizzle; a stage takes block_n / 64 boxes (copy_k_block, MnMajorB in sm90_gemm_common.hpp)."""
    nbytes = IN_BYTES[kind]
    return _tensor_map(("bmn", ptr, n, k, ld, l2, kind), TMAP_DTYPE[kind], 2, ptr, (n, k), (ld * nbytes,),
                       (128 // nbytes, 128 // nbytes), (1, 1), 0, _TMAP_SWIZZLE_128B, l2, 0)


def kernel_for(dev: int, spec: GemmKernel):
    kernel = _KERNELS.get((dev, spec))
    if kernel is None:
        from ..runtime.launch import module_for

        kernel = module_for(spec.unit, dev, spec.source()).kernel(spec.kernel_name, spec.signature)
        if spec.smem:
            kernel.set_max_dynamic_smem(spec.smem)
        _KERNELS[(dev, spec)] = kernel
    return kernel


class CallPlan:
    """How to launch one checked call signature: kernel, grid and the argument values, worked out once.
    `run` takes the addresses of a call whose metadata matched the signature (same shapes, strides, dtypes,
    devices) -- A, B, then the Params fields named by `pointers` -- and re-checks nothing else.

    in_kind: fp8 / int8 (gemm_a8: B preshuffled) or bf16 / fp16 / tf32 (matmul_fused: B a plain [N, K] matrix
    with row stride ldb, or with b_layout 'kn' a [K, N] one; A's row stride lda). op: the name errors carry."""

    __slots__ = ("dev", "m", "n", "n_out", "k", "launch", "tma", "block_m", "b_box_rows", "b_chunks", "template",
                 "slots", "a_map", "b_map", "l2", "bias_align", "kind", "lda", "ldb", "b_layout")

    def __init__(self, dev: int, arch: str, in_kind: str, m: int, n: int, k: int, out_dtype: torch.dtype, epi,
                 values: dict, pointers: tuple[str, ...], bias_align: int = 1, lda: int | None = None,
                 ldb: int | None = None, op: str = "gemm_a8", b_layout: str = "nk", ld_out: int | None = None,
                 block_scaled: bool = False, config: str | None = None):
        self.dev, self.m, self.n, self.k, self.kind, self.b_layout = dev, m, n, k, in_kind, b_layout
        # Output columns: N / 2 for a paired epilogue (gate, up), whose outputs are [M, N / 2].
        self.n_out = n // 2 if getattr(epi, "pairs", False) else n
        self.lda, self.ldb = k if lda is None else lda, k if ldb is None else ldb
        self.bias_align = bias_align  # as check_gemm_a8_args asks (the preset fast path re-checks it)
        self.launch = None  # nothing to launch for an empty output
        self.tma = False
        self.a_map = self.b_map = (None, None)  # (address, encoded tensor map): the last one used
        if m == 0 or n == 0:
            return
        if config is not None:  # the caller's config (gemm_a8's out_group: the one template that holds a group)
            cfg, splits = GEMM_CONFIGS[config], 1
        elif block_scaled:  # gemm_a8's block-scaled fp8: its configs (blockscale.py); values carry bs_a, bs_b, ...
            from ..blockscale import block_plan

            cfg, splits = block_plan(m, n, k, dev, persistent_ok=config_fits(PERSISTENT_CONFIG, epi))
        else:
            cfg, splits = plan_for(m, n, k, dev, persistent_ok=config_fits(PERSISTENT_CONFIG, epi), in_kind=in_kind)
        if not cfg.serves(in_kind):  # only a forced config gets here
            raise ValueError(f"{op}: config {cfg.name} has no {in_kind} kernels; it serves {', '.join(cfg.in_kinds)}")
        if in_kind in MATMUL_IN and arch == "sm_90a" and not cfg.sm90:  # only a forced config
            raise ValueError(f"{op}: config {cfg.name} (mma.sync) has no {in_kind} kernel on sm_90a; the wgmma "
                             "configs serve it")
        if not config_fits(cfg.name, epi):  # only a forced config gets here
            raise ValueError(f"{op}: config {cfg.name} cannot run the epilogue {epi.expr}: it hoists more row and "
                             "column values than the persistent kernel stages (at most 3)")
        grid = (-(-n // cfg.block_n), -(-m // cfg.block_m), splits)
        cluster = (1, 1, splits)
        if cfg.pair_b:  # two CTAs per column tile and pair of row blocks, clustered along x (no split-K)
            grid, cluster = (2 * grid[0], -(-grid[1] // 2), 1), (2, 1, 1)
        if cfg.one_wave:  # one wave of CTAs, each looping over tiles (pairs: a whole number of clusters)
            grid = (min(grid[0] * grid[1], sm_count(dev) * cfg.min_blocks_per_sm) // cluster[0] * cluster[0], 1, 1)
        if grid[1] > _MAX_GRID_Y:
            raise ValueError(f"{op}: M={m} is too large for one launch (at most {_MAX_GRID_Y * cfg.block_m} rows)")
        spec = GemmKernel(arch, cfg.name, in_kind, OUT_CODEGEN[str(out_dtype).split(".")[-1]], epi, b_layout,
                          block_scaled, whole_k_blocks=whole_k_blocks(cfg.name, in_kind, k))
        kernel = kernel_for(dev, spec)
        # The packed values after A and B: M, N, K, then the Params fields; `slots` says where each per-call
        # address goes.
        names = [f.split(".", 1)[-1] for f in kernel.signature.flat_names[2:]]  # after A and B
        self.template = kernel.signature.values_in_order(
            dict(values, M=m, N=n, K=k, ld_out=ld_out or self.n_out, ld_saved=ld_out or self.n_out,
                 **{p: 0 for p in pointers}), skip=2)  # ld_out: the outputs' row stride (matmul.py, any N)
        self.slots = tuple(names.index(p) for p in pointers)
        self.tma = cfg.sm90
        # B's box: a B-multicast pair's CTAs each copy half of the tile: half of a plain K-major B's rows, half of
        # a preshuffled B's K chunks (an MN-major B's boxes are 64-column blocks either way).
        self.block_m = cfg.block_m
        plain = in_kind in MATMUL_IN
        self.b_box_rows = cfg.block_n // (2 if cfg.pair_b and plain else 1)
        self.b_chunks = 4 if cfg.pair_b and not plain else 8
        self.l2 = _TMAP_L2_DECODE if cfg.swap_ab else _TMAP_L2_256B
        # threads per warp / wave: the target arch's, not the torch build's (an AMD kernel is 64-lane waves)
        warp = 64 if vendor_of(arch) == "amd" else 32
        self.launch = kernel.bind(grid, cluster, cfg.warps * warp, spec.smem)

    def run(self, a_ptr: int, b_ptr: int, *pointers: int) -> None:
        """Launch on the current stream of the plan's device (the caller made it current). 0: no tensor."""
        if self.launch is None:
            return
        stream = current_raw_stream(self.dev)
        args = self.template.copy()
        if len(pointers) == 1:  # the common case: the output's address only
            args[self.slots[0]] = pointers[0]
        else:
            for slot, ptr in zip(self.slots, pointers):
                args[slot] = ptr
        if not self.tma:
            self.launch(stream, a_ptr, b_ptr, *args)
            return
        # Tensor maps hold the address: memoise the last one per operand (a weight's never changes), then the
        # module-wide cache.
        a_last, a_map = self.a_map
        if a_last != a_ptr:
            a_map = _tensor_map_a(a_ptr, self.m, self.k, self.block_m, self.l2, self.kind, self.lda)
            self.a_map = (a_ptr, a_map)
        b_last, b_map = self.b_map
        if b_last != b_ptr:
            if self.b_layout == "kn":
                b_map = _tensor_map_b_mn(b_ptr, self.n, self.k, self.b_box_rows, self.l2, self.kind, self.ldb)
            elif self.kind in MATMUL_IN:
                b_map = _tensor_map_k_major(b_ptr, self.n, self.k, self.b_box_rows, self.l2, self.kind, self.ldb)
            else:
                b_map = _tensor_map_b(b_ptr, self.n, self.k, self.b_box_rows, self.l2, self.b_chunks)
            self.b_map = (b_ptr, b_map)
        self.launch(stream, a_map, b_map, *args)


def expression_pointers(epilogue, operands: dict | None, saves: bool) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The Params fields a call of an epilogue expression fills per call -- the outputs, then each tensor
    operand's address in the order of `operands` (the fast path passes them in that order) -- and the
    alignment each operand address needs (bind's rules: a vector its element, an aux two elements)."""
    kinds = {name: o.kind for name, o in _epi_operands(epilogue).items()}
    fields, aligns = ["out", "saved"] if saves else ["out"], []
    for name, v in (operands or {}).items():
        if isinstance(v, torch.Tensor):
            fields.append(f"op_{name}_ptr" if kinds[name] == "scalar" else f"op_{name}")
            aligns.append(2 * v.element_size() if kinds[name] == "aux" else v.element_size())
    return tuple(fields), tuple(aligns)


def signature(t) -> tuple | None:
    """What a fast-path key records of an optional tensor argument: dtype, shape, strides and device (None for
    None). Parameters count as tensors: their addresses are read per call."""
    return None if t is None else (t.dtype, t.shape, t.stride(), t.get_device())

