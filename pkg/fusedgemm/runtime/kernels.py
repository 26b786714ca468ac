"""Kernel signatures as the host sees them: parameter names, C types, and the packed-buffer layout.

The layout follows the C ABI of the kernel parameter block (each argument at the next offset aligned to
its size). The same bytes go to cuLaunchKernel / hipModuleLaunchKernel through the `extra` buffer, and a
CPU test checks every layout against the code objects' own metadata.
"""
from __future__ import annotations

import dataclasses
import struct

from . import tile_configs

_PARAM_BANK_BASE = 0x210  # where CUDA places kernel parameters in constant bank 0 (sm_90); a CPU test checks
# ctype -> (struct format, size, alignment). "tmap": a CUtensorMap passed by value (128 bytes, 64-aligned).
_CTYPES = {"ptr": ("Q", 8, 8), "i64": ("q", 8, 8), "i32": ("i", 4, 4), "f32": ("f", 4, 4), "tmap": ("128s", 128, 64)}


def _pack_format(items) -> tuple[str, int]:
    """struct-module format of (format, size, offset) items laid out at their offsets, padded between; -> (format,
    end of the last item)."""
    fmt, pos = "", 0
    for item_fmt, size, off in items:
        fmt += "x" * (off - pos) + item_fmt
        pos = off + size
    return fmt, pos


@dataclasses.dataclass(frozen=True)
class StructType:
    """A struct passed by value as one kernel parameter (an epilogue's Params): its fields at the offsets the
    epilogue codegen laid out (and asserted in the generated C++). Packed as its fields, flattened."""
    fields: tuple[tuple[str, str], ...]  # (name, scalar ctype)
    offsets: tuple[int, ...]
    size: int
    align: int = 8

    @property
    def format(self) -> str:
        fmt, end = _pack_format((*_CTYPES[ctype][:2], off) for (_name, ctype), off in zip(self.fields, self.offsets))
        return fmt + "x" * (self.size - end)


def _ctype_info(ctype) -> tuple[str, int, int]:
    if isinstance(ctype, StructType):
        return ctype.format, ctype.size, ctype.align
    return _CTYPES[ctype]


@dataclasses.dataclass(frozen=True)
class Signature:
    params: tuple[tuple[str, str], ...]  # (name, ctype) in kernel order

    @property
    def offsets(self) -> tuple[int, ...]:
        offs, pos = [], 0
        for _name, ctype in self.params:
            _fmt, size, align = _ctype_info(ctype)
            # Alignment is of the absolute constant-bank address: the parameter block starts at bank offset
            # 0x210 on sm_90 (16-aligned, so only 64-aligned tensor maps see it: the first one lands at 48).
            pos = -(-(pos + _PARAM_BANK_BASE) // align) * align - _PARAM_BANK_BASE
            offs.append(pos)
            pos += size
        return tuple(offs)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(_ctype_info(c)[1] for _n, c in self.params)

    def _packing(self, count: int) -> struct.Struct:
        """The struct packing of the first `count` parameters at their offsets."""
        items = ((*_ctype_info(ctype)[:2], off) for (_name, ctype), off in zip(self.params[:count], self.offsets))
        return struct.Struct("<" + _pack_format(items)[0])

    @property
    def struct(self) -> struct.Struct:
        return self._packing(len(self.params))

    def prefix_struct(self, count: int) -> struct.Struct:
        """The packing of the first `count` parameters alone (scalars and pointers only), at their offsets: a
        bound launch with fixed trailing arguments repacks just these (runtime.launch.Kernel.bind)."""
        params = self.params[:count]
        if len(params) != count or any(isinstance(c, StructType) for _n, c in params):
            raise ValueError(f"prefix_struct({count}): the first {count} parameters must be scalars or pointers")
        return self._packing(count)

    @property
    def flat_names(self) -> tuple[str, ...]:
        """The packed values in order: struct parameters contribute their fields ('ep.out', ...)."""
        out = []
        for name, ctype in self.params:
            out += [f"{name}.{f}" for f, _c in ctype.fields] if isinstance(ctype, StructType) else [name]
        return tuple(out)

    def values_in_order(self, values: dict, skip: int = 0) -> list:
        """The packed values from a {name: value} dict (a struct field 'ep.x' by its field name 'x'), in
        flat_names order from the `skip`-th on. A name without a value is a KeyError naming it."""
        names = self.flat_names[skip:]
        missing = [f for f in names if f.split(".", 1)[-1] not in values]
        if missing:
            raise KeyError(f"no value for kernel argument(s) {missing}")
        return [values[f.split(".", 1)[-1]] for f in names]


def epilogue_params_type(epi_spec) -> StructType:
    """The kernel parameter of an epilogue (fusedgemm.epilogue.codegen.EpilogueSpec): its Params struct."""
    from ..epilogue.codegen import params_layout, params_offsets

    fields = params_layout(epi_spec)
    offsets, size = params_offsets(fields)
    return StructType(tuple(fields), tuple(offsets), size)


def gemm_args_type(unit: str, epi_spec, block_scaled: bool = False, grouped: bool = False) -> StructType:
    """The one argument of a GEMM kernel, gemm_a8's or matmul_fused's (PortableGemmArgs / Sm90GemmArgs): A, B
    (pointers; the sm_90a template: TMA tensor maps), M, N, K, then the epilogue's Params fields, each at its natural
    alignment. block_scaled (Sm90GemmBlockArgs): then the block scales, bs_a, bs_b (pointers) and bs_k_blocks.
    grouped (PortableGemmGroupedArgs / Sm90GemmGroupedArgs): then the groups (GroupArgs, gemm_groups.hpp):
    grp_index (pointer), grp_count, grp_rows."""
    ab = (("a_map", "tmap"), ("b_map", "tmap")) if unit == "sm90_gemm" else (("a", "ptr"), ("b", "ptr"))
    fields, offsets, pos = [], [], 0
    for name, ctype in (*ab, ("M", "i32"), ("N", "i32"), ("K", "i32")):
        _fmt, size, align = _CTYPES[ctype]
        pos = -(-pos // align) * align
        fields.append((name, ctype))
        offsets.append(pos)
        pos += size
    ep = epilogue_params_type(epi_spec)
    base = -(-pos // ep.align) * ep.align
    fields += ep.fields
    offsets += [base + o for o in ep.offsets]
    end = base + ep.size
    if block_scaled:  # BlockScaleArgs {const float* a, * b; int k_blocks;} (8-aligned, 24 bytes)
        pos = -(-end // 8) * 8
        fields += [("bs_a", "ptr"), ("bs_b", "ptr"), ("bs_k_blocks", "i32")]
        offsets += [pos, pos + 8, pos + 16]
        end = pos + 24
    if grouped:  # GroupArgs {const int* index; int groups; int rows;} (8-aligned, 16 bytes)
        pos = -(-end // 8) * 8
        fields += [("grp_index", "ptr"), ("grp_count", "i32"), ("grp_rows", "i32")]
        offsets += [pos, pos + 8, pos + 12]
        end = pos + 16
    align = max(ep.align, 64 if unit == "sm90_gemm" else 8)
    return StructType(tuple(fields), tuple(offsets), -(-end // align) * align, align)


def gemm_arg_offsets(unit: str, epi_spec) -> tuple[int, int]:
    """(offset of M, offset of the epilogue's Params) in the argument struct: what the entry points assert."""
    args = gemm_args_type(unit, epi_spec)
    names = [f for f, _c in args.fields]
    return args.offsets[names.index("M")], args.offsets[names.index("out")]


def gemm_signature(unit: str, epi_spec, block_scaled: bool = False, grouped: bool = False) -> Signature:
    return Signature((("args", gemm_args_type(unit, epi_spec, block_scaled, grouped)),))


GEMM_A8_IN = {"fp8": "fp8", "int8": "i8"}  # gemm_a8's kinds -> their kernel-name part
# The input kinds of matmul_fused (always JIT-generated kernels on the same templates).
WIDE_IN = tile_configs.WIDE
ALL_IN = tile_configs.EVERY_KIND  # what a config serves unless it says otherwise
# fp32 exact to about fp32 (F32x3: three TF32 products of split operands), sm_90a, on its own config only.
SPLIT_IN = tile_configs.SPLIT_TF32
MATMUL_IN = (*WIDE_IN, *SPLIT_IN)
IN_BYTES = {"fp8": 1, "int8": 1, "bf16": 2, "fp16": 2, "tf32": 4, "f32x3": 4}  # bytes of one element in memory
GEMM_A8_OUT = {"bfloat16": "bf16", "float16": "f16"}  # the preset (ahead-of-time) kernels' output types


@dataclasses.dataclass(frozen=True)
class TileConfig:
    name: str
    block_m: int
    block_n: int
    warps: int  # warps per block (64-lane waves on AMD)
    unit: str = "portable_gemm"  # the source unit / code object that holds the kernels (build.UNITS)
    smem: int = 0  # dynamic shared-memory bytes per block
    min_blocks_per_sm: int = 1
    swap_ab: bool = False  # wgmma tiles computing C^T = B . A^T (decode; WgmmaConfig::kSwapAB)
    persistent: bool = False  # one wave of CTAs looping over tiles, epilogue warps (WgmmaConfig::kPersistent)
    # The input kinds with kernels on this config: the 8-bit gemm_a8 kinds (ahead-of-time presets and generated
    # epilogues) and matmul_fused's 16/32-bit ones; a config without the 8-bit kinds has no preset kernels.
    in_kinds: tuple[str, ...] = ALL_IN
    # CTAs in clusters of two along grid x that share B's tile by TMA multicast (WgmmaConfig::kPairB): the grid
    # is (2 x column tiles, pairs of row blocks), no split-K, and each CTA's B box holds half of the tile.
    pair_b: bool = False
    # One wave of CTAs looping over tiles of the CTA-per-tile kernel, each tile stored by the consumers through a
    # 64 x 64 fp32 buffer per warpgroup, but for its last 64 columns, which the producer warpgroup's spare warps
    # store under the next tile's MMAs (WgmmaConfig::kTileLoop): the grid is one wave, like a persistent config's;
    # no split-K.
    tile_loop: bool = False
    presets: bool = True  # gemm_a8's preset kernels are in the ahead-of-time unit (tile_configs.CdnaTile.presets)

    @property
    def sm90(self) -> bool:
        """Whether the config is one of the sm_90a wgmma + TMA template's (unit sm90_gemm), not the portable one's."""
        return self.unit == "sm90_gemm"

    @property
    def one_wave(self) -> bool:
        """Whether the grid is one wave of CTAs that loop over the tiles (persistent or tile-loop configs)."""
        return self.persistent or self.tile_loop

    def serves(self, in_kind: str) -> bool:
        return in_kind in self.in_kinds

    @property
    def splits_k(self) -> bool:
        """Whether K may be split over a cluster: the sm_90 wgmma configs, but for the persistent ones and the
        B-multicast pairs (whose cluster is the pair)."""
        return self.sm90 and not self.one_wave and not self.pair_b


def _consumer_warps(t: tile_configs.Sm90Tile) -> int:
    """A WgmmaConfig's consumer warps: 64 rows a warpgroup (swapped: one warpgroup)."""
    return 4 if t.swap_ab else t.block_m // 16


def _sm90_config(name: str, t: tile_configs.Sm90Tile) -> TileConfig:
    """The host's view of a WgmmaConfig (and SplitTf32) of hip_src/include/fusedgemm/sm90_gemm_common.hpp: the
    same arithmetic on the table's fields (K step 128 B)."""
    # stages, then (persistent) the parked fp32 tile, its rows' scales, its columns' scales and biases, or (tile
    # loop) a 64 x 64 fp32 store buffer per consumer warpgroup, then the barriers (+2 persistent or tile loop: the
    # parked tile's or the handed chunk's full / empty); SplitTf32: then, 1024-aligned, two stage-sized buffers of
    # small parts
    block_m, block_n = t.block_m, t.block_n
    parked = ((block_m * block_n * 4 + block_m * 4 + 2 * block_n * 4) if t.persistent
              else block_m // 64 * 64 * 64 * 4 if t.tile_loop else 0)
    stage = block_m * 128 + block_n * 128
    end = t.stages * stage + parked + (2 * t.stages + 2 * (t.persistent or t.tile_loop)) * 8
    smem = (-(-end // 1024) * 1024 + 2 * stage if t.split_tf32 else end) + 1024
    consumer_warps = _consumer_warps(t)
    # kSetMaxNReg (3 consumer warpgroups, 192- or 256-wide tiles, two accumulator chains or persistent): the
    # producer is a warpgroup (persistent: the copy warp and the epilogue warps, one or two warpgroups), else one warp
    if t.persistent:
        producer_warps = 1 + t.epilogue_warps
    elif consumer_warps == 12 or block_n > 128 or t.chains > 1:
        producer_warps = 4
    else:
        producer_warps = 1
    return TileConfig(name, block_m, block_n, consumer_warps + producer_warps, t.unit, smem, t.min_blocks_per_sm,
                      t.swap_ab, t.persistent, t.in_kinds, t.pair_b, t.tile_loop)


def _config(name: str, t) -> TileConfig:
    if isinstance(t, (tile_configs.PortableTile, tile_configs.CdnaTile)):  # CDNA: static LDS, no dynamic shared memory
        return TileConfig(name, t.block_m, t.block_n, t.warps, t.unit, in_kinds=t.in_kinds,
                          presets=getattr(t, "presets", True))
    return _sm90_config(name, t)


# Every tile config of both templates, by name (the table: runtime/tile_configs.py).
GEMM_CONFIGS = {name: _config(name, t) for name, t in tile_configs.CONFIGS.items()}

# BlockScaled<Config>'s scale ring (sm90_gemm_common.hpp): slots per consumer warp, floats per slot.
SCALE_RING_SLOTS, SCALE_RING_SLOT_FLOATS = 4, 20


def _stage_fewer_smem(name: str) -> int:
    """Dynamic shared memory of sm_90a config `name`'s layout with a stage fewer (what BlockScaled<Config> of a
    persistent config and GroupedPersistent<Config> give up for the shared memory they add)."""
    t = tile_configs.CONFIGS[name]
    return _sm90_config(name, dataclasses.replace(t, stages=t.stages - 1)).smem


def block_scaled_smem(name: str) -> int:
    """Dynamic shared memory of config `name`'s block-scaled sm_90a kernels (BlockScaled<Config>): the config's
    layout with a stage fewer on the persistent ones, then the scale ring."""
    t = tile_configs.CONFIGS[name]
    base = _stage_fewer_smem(name) if t.persistent else GEMM_CONFIGS[name].smem
    return base + SCALE_RING_SLOTS * _consumer_warps(t) * SCALE_RING_SLOT_FLOATS * 4


# GroupedPersistent<Config>'s group table (gemm_groups.hpp kGroupTableMax, kGroupTableBytes): groups it holds, bytes.
GROUP_TABLE_MAX = 1024
GROUP_TABLE_BYTES = -(-(3 * GROUP_TABLE_MAX + 1) * 4 // 16) * 16


def grouped_persistent_smem(name: str) -> int:
    """Dynamic shared memory of persistent config `name`'s grouped kernels (GroupedPersistent<Config>): the config's
    layout with a stage fewer, then the group table."""
    return _stage_fewer_smem(name) + GROUP_TABLE_BYTES


def has_whole_k_kernels(config: str) -> bool:
    """Whether `config` has a second kernel for K filling whole K blocks (the CDNA LDS configs)."""
    return isinstance(tile_configs.CONFIGS[config], tile_configs.CdnaTile)


def gemm_a8_kernel_name(in_kind: str, out_dtype: str, act: str, config: str, whole_k_blocks: bool = False) -> str:
    """A preset kernel of the ahead-of-time units: fg_gemm_a8_<in>_<out>_<activation>_[whole_k_]<config>."""
    return (f"fg_gemm_a8_{GEMM_A8_IN[in_kind]}_{GEMM_A8_OUT[out_dtype]}_{act}_"
            f"{tile_configs.WHOLE_K_PREFIX if whole_k_blocks else ''}{config}")


def gemm_a8_kernel_names(unit: str = "portable_gemm") -> list[str]:
    """Every preset kernel of an ahead-of-time unit (the CDNA LDS configs' twice: any K, and whole K blocks)."""
    from ..epilogue.presets import ACTIVATIONS

    return [gemm_a8_kernel_name(i, o, a, c, w) for c, cfg in GEMM_CONFIGS.items() if cfg.unit == unit and cfg.presets
            for w in ((False, True) if has_whole_k_kernels(c) else (False,))
            for i in GEMM_A8_IN if cfg.serves(i) for o in GEMM_A8_OUT for a in ACTIVATIONS]


BMM_TINY = Signature((
    ("a", "ptr"), ("b", "ptr"), ("c", "ptr"), ("batch", "i32"), ("m", "i32"), ("n", "i32"), ("k", "i32"),
    ("sab", "i64"), ("sam", "i32"), ("sak", "i32"), ("sbb", "i64"), ("sbk", "i32"), ("sbn", "i32"),
    ("a_mode", "i32"), ("b_mode", "i32"), ("tx", "i32"), ("ty", "i32"), ("elems", "i32"), ("lda", "i32"),
    ("ldb", "i32"), ("a_elem", "i32"), ("b_elem", "i32"), ("num_blocks", "i32"), ("stages", "i32"),
    ("kc", "i32"),
))
BMM_TINY_DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
BMM_TINY_MICROTILES = (2, 4)  # R: each thread computes an R x R block of C
# (RM, RN) of the f32 cp.async kernels -> their __launch_bounds__ threads (FG_BMM_TINY_ASYNC_ENTRY in bmm_tiny.hip)
BMM_TINY_ASYNC_TILES = {(2, 4): 256, (4, 4): 256, (4, 8): 128}
BMM_TINY_ASYNC_FIXED_TX = {(4, 8): (8,)}  # tiles that also have kernels with tx fixed at compile time (_tx<TX>)
BMM_TINY_MAX_STAGES = 8  # kBmmTinyMaxStages: depth of the cp.async ring
BMM_TINY_MAX_DIM = 64
BMM_TINY_MAX_THREADS = 256  # kBmmTinyMaxThreads in hip_src/include/fusedgemm/bmm_tiny.hpp
BMM_TINY_QUADS = 4  # kBmmTinyQuads: 4-value quads each thread stages per operand and group
# Operand mode bits: kAlongJ, kVector, kDense in bmm_tiny.hpp.
BMM_TINY_ALONG_J, BMM_TINY_VECTOR, BMM_TINY_DENSE = 1, 2, 4


def bmm_tiny_kernel_name(dtype: str, r: int) -> str:
    return f"fg_bmm_tiny_{BMM_TINY_DTYPES[dtype]}_r{r}"


def bmm_tiny_async_kernel_name(rm: int, rn: int, tx: int = 0) -> str:
    """The cp.async kernel of tile rm x rn; the one with tx fixed at compile time where there is one."""
    fixed = tx in BMM_TINY_ASYNC_FIXED_TX.get((rm, rn), ())
    return f"fg_bmm_tiny_f32_async_{rm}x{rn}" + (f"_tx{tx}" if fixed else "")


def bmm_tiny_kernel_names() -> list[str]:
    return ([bmm_tiny_kernel_name(d, r) for d in BMM_TINY_DTYPES for r in BMM_TINY_MICROTILES]
            + [bmm_tiny_async_kernel_name(rm, rn) for rm, rn in BMM_TINY_ASYNC_TILES]
            + [bmm_tiny_async_kernel_name(rm, rn, tx)
               for (rm, rn), txs in BMM_TINY_ASYNC_FIXED_TX.items() for tx in txs])


# quantize_rows (hip_src/quantize_rows.hip): x [M, K] rows (row stride ld elements) -> q [M, K], scale [M];
# blocks: the grid's size (the kernel walks rows grid-stride).
QUANTIZE_ROWS = Signature((("x", "ptr"), ("ld", "i64"), ("q", "ptr"), ("scale", "ptr"), ("M", "i32"), ("K", "i32"),
                           ("blocks", "i32")))
QUANTIZE_ROWS_IN = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
QUANTIZE_ROWS_OUT = {"float8_e4m3fn": "e4m3fn", "float8_e4m3fnuz": "e4m3fnuz", "int8": "i8"}
QUANTIZE_ROWS_MAX_THREADS = 512  # kQuantMaxThreads in hip_src/include/fusedgemm/quantize_rows.hpp
QUANTIZE_ROWS_CACHED_PACKS = 8  # kQuantCachedPacks: 16-byte packs per thread held in registers between passes


def quantize_rows_kernel_name(in_dtype: str, out_dtype: str, vector: bool) -> str:
    """in_dtype / out_dtype: torch dtype names (bfloat16, float8_e4m3fn, ...); vector: the 16-byte-pack path."""
    return (f"fg_quantize_rows_{QUANTIZE_ROWS_IN[in_dtype]}_{QUANTIZE_ROWS_OUT[out_dtype]}_"
            f"{'v16' if vector else 'e1'}")


def quantize_rows_kernel_names() -> list[str]:
    return [quantize_rows_kernel_name(i, o, v) for i in QUANTIZE_ROWS_IN for o in QUANTIZE_ROWS_OUT
            for v in (True, False)]
