"""The tile configs of the GEMM kernel templates: ONE table for Python and C++.

Each config has a name a reader can decode and named fields. runtime/kernels.py derives the host's view
(TileConfig: grid, threads, shared memory); `python ci/hipify.py` writes hip_src/include/fusedgemm/gemm_configs.hpp
from this table (a traits struct with every field named, and the config type the kernels take), and
`python ci/hipify.py --check` fails when that header is stale.

Names (<M>x<N>: the output tile a CTA computes):
    portable_<M>x<N>[_k8]   the portable template (portable_gemm.hpp: MFMA on gfx942 / gfx950, mma.sync on sm_90a);
                            _k8: K split 8 ways over the block's warps
    cdna_lds_<M>x<N>[_k<S>] gfx942 / gfx950: A staged through LDS (double-buffered), B to registers, K loop pipelined
                            (cdna_gemm.hpp; the 8-bit kinds and bf16 / fp16); _k<S>: K split S ways over the
                            block's waves (decode)
    tile_<M>x<N>            sm_90a, one CTA per output tile (sm90_gemm.hpp)
    swap_<M>x<N>            ... computing C^T = B . A^T (decode: M <= 16 activation rows are the wgmma's N)
    pair_<M>x<N>            ... in clusters of two CTAs that share B's tile by TMA multicast
    loop_<M>x<N>            ... as one wave of CTAs looping over the tiles
    persistent_<M>x<N>      one wave of CTAs looping over the tiles, the epilogue on separate warps under the next
                            tile's MMAs (sm90_gemm_persistent.hpp): three epilogue warps and two accumulator chains,
                            or with suffix _epi7 seven epilogue warps, and _1chain one chain
    f32x3_<M>x<N>           matmul_fused's exact fp32 (three TF32 products of split operands)

Imports nothing but dataclasses, so ci/hipify.py loads this file without importing the package (and torch).
"""
from __future__ import annotations

import dataclasses

EIGHT_BIT = ("fp8", "int8")  # gemm_a8's kinds: preset kernels ahead of time, generated epilogues
WIDE = ("bf16", "fp16", "tf32")  # matmul_fused's kinds
EVERY_KIND = (*EIGHT_BIT, *WIDE)
SPLIT_TF32 = ("f32x3",)  # matmul_fused's exact fp32 (sm_90a)


class _Mfma16Grid:
    """The block shape of a config whose warps_m x warps_n warps (waves) each own tiles_m x tiles_n 16 x 16
    accumulator tiles (the fields are the subclass dataclass's)."""

    @property
    def block_m(self) -> int:
        return self.warps_m * 16 * self.tiles_m

    @property
    def block_n(self) -> int:
        return self.warps_n * 16 * self.tiles_n


@dataclasses.dataclass(frozen=True)
class PortableTile(_Mfma16Grid):
    """PortableGemmConfig (portable_gemm.hpp): warps_m x warps_n x warps_k warps, each owning tiles_m x tiles_n
    16 x 16 tiles; warps_k > 1 splits K inside the block."""
    warps_m: int
    warps_n: int
    warps_k: int
    tiles_m: int
    tiles_n: int
    steps_in_flight: int = 1  # K steps whose operands a warp loads before it issues their MMAs
    in_kinds: tuple[str, ...] = EVERY_KIND

    unit = "portable_gemm"

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n * self.warps_k


@dataclasses.dataclass(frozen=True)
class CdnaTile(_Mfma16Grid):
    """CdnaLdsGemmConfig (cdna_gemm.hpp, gfx942 / gfx950 only): warps_m x warps_n waves, each owning tiles_m x
    tiles_n 16 x 16 MFMA tiles; A staged through two LDS buffers of block_k_bytes per row, the preshuffled B
    straight to registers (plain B too: its loads are as coalesced, and no other wave reads its columns), the K
    loop pipelined one K block deep. The 8-bit kinds (gemm_a8) and bf16 / fp16 / tf32 (matmul_fused, B [N, K]).
    warps_k > 1: K split inside the block, slice s of the waves taking K block s of every pipeline stage of warps_k
    blocks, partial tiles summed through LDS (decode)."""
    warps_m: int
    warps_n: int
    tiles_m: int
    tiles_n: int
    block_k_bytes: int = 128  # K per LDS stage, in bytes (8 chunks of 16: the swizzle's width)
    in_kinds: tuple[str, ...] = EVERY_KIND
    presets: bool = True  # gemm_a8's preset kernels ahead of time (False: generated kernels only)
    warps_k: int = 1

    unit = "cdna_gemm"

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n * self.warps_k

    @property
    def stage_k_bytes(self) -> int:
        """K per pipeline stage, in bytes: one K block per K slice of the waves."""
        return self.block_k_bytes * self.warps_k

    @property
    def lds_bytes(self) -> int:
        return 2 * self.block_m * self.stage_k_bytes


@dataclasses.dataclass(frozen=True)
class Sm90Tile:
    """WgmmaConfig (sm90_gemm_common.hpp): the sm_90a wgmma + TMA template's configuration."""
    block_m: int  # 64, 128, 192 (consumer warpgroups of 64 rows) or 16 (swap_ab)
    stages: int  # shared-memory stages of 128 bytes of K
    block_n: int = 128
    min_blocks_per_sm: int = 1
    swap_ab: bool = False
    chains: int = 1  # independent accumulator chains per consumer warpgroup
    persistent: bool = False
    pair_b: bool = False
    epilogue_warps: int = 3  # persistent: the epilogue warps (3 or 7)
    tile_loop: bool = False
    split_tf32: bool = False  # SplitTf32<...>: F32x3's two buffers of small parts
    in_kinds: tuple[str, ...] = EVERY_KIND

    unit = "sm90_gemm"


# Order: the order of the kernels in each unit.
CONFIGS: dict[str, PortableTile | CdnaTile | Sm90Tile] = {
    "portable_16x16_k8": PortableTile(1, 1, 8, 1, 1, steps_in_flight=4),  # decode, M <= 16: 8-way split-K
    "portable_64x16_k8": PortableTile(1, 1, 8, 4, 1, steps_in_flight=2),  # decode, M <= 64: 8-way split-K
    "portable_128x128": PortableTile(2, 4, 1, 4, 2),  # prefill: 8 warps, each 64 x 32
    # gfx942 / gfx950: A through double-buffered LDS, B straight to registers, K loop pipelined; 4 waves of 128 x 32
    # side by side along N, so each byte of A and of B leaves global memory once per block (2 x 2 waves of 64 x 64
    # load B twice: predicted L1-bound on gfx950, 57% of peak against 66%); bf16 / fp16 with plain B [N, K] too
    "cdna_lds_128x128": CdnaTile(1, 4, 8, 2),
    # gemm_a8's block-quantised output of a gate / up pair (out_group=128 of a SwiGLU epilogue, out_groups.py): 256
    # GEMM columns are one group of 128 outputs, so a block holds whole groups; 2 x 4 waves of 64 x 64 (B's columns
    # read by both rows of waves). Only that call takes it: no presets, not in the plan
    "cdna_lds_128x256": CdnaTile(2, 4, 4, 4, in_kinds=EIGHT_BIT, presets=False),
    # ... with block scales: the 8-wave block's 256 VGPRs per lane cannot hold a partial tile per K block beside 64 x 64
    # accumulators (it spills); 4 waves of 64 x 64 in one row (B's columns read once) may use the AGPRs too
    "cdna_lds_64x256": CdnaTile(1, 4, 4, 4, in_kinds=EIGHT_BIT, presets=False),
    # decode (M <= 64): A's few rows copied to LDS once per block (the register-direct _k8 tiles load them once per
    # wave: 4x B's bytes at 64 x 16, what binds them on paper), 2 waves along N x 4 K slices, 32 columns a block so
    # that N / 32 blocks fill the CUs; 64 KB of LDS
    "cdna_lds_64x32_k4": CdnaTile(1, 2, 4, 1, warps_k=4),
    # ... 8 K slices (16 waves) of 32 rows: half the K blocks per wave, so half the load waits in a wave's chain,
    # what binds the 4-slice tile where its blocks are fewer than the CUs (N = 4096, gfx950); 64 KB of LDS
    "cdna_lds_32x32_k8": CdnaTile(1, 2, 2, 1, warps_k=8),
    # M around 256: 4 waves of 64 x 16 along N x 2 K slices; a quarter of the 64 x 32 tiles' L2 bytes per output,
    # twice as many blocks as 128 x 128 tiles would have (which wait out their load latency at M = 256); 32 KB of LDS
    "cdna_lds_64x64_k2": CdnaTile(1, 4, 4, 1, warps_k=2),
    # M around 1024 (and gate / up at 256): cdna_lds_128x128's 4 waves along N with 64 rows each, so twice as many
    # blocks: 128 x 128 tiles of a 1024-row call are fewer than 2 a CU there (one wave a SIMD, waiting out its loads)
    "cdna_lds_64x128": CdnaTile(1, 4, 4, 2),
    # M <= 64: two CTAs per SM, 4 x 24 KB stages in flight each
    "tile_64x128": Sm90Tile(64, 4, min_blocks_per_sm=2),
    # 6 x 32 KB stages; two accumulator chains, so a K block's MMAs never wait in the tensor core for the previous
    # block's results, and fp8's promotion of one block runs under the next block's MMAs
    "tile_128x128": Sm90Tile(128, 6, chains=2),
    # each wgmma does 1.5x an n128 one's work for the same A bytes and per-block overhead (wait, promotion,
    # barrier); 96 + 96 accumulator registers per consumer thread; 5 x 40 KB stages
    "tile_128x192": Sm90Tile(128, 5, block_n=192),
    # the 16/32-bit kinds only (fp8's partial tile would double 128 accumulator registers per thread): 0.625
    # shared-memory bytes per output element per K step against 0.67 (n192) and 0.75 (n128); 4 x 48 KB stages
    # (5 would need 241 KB)
    "tile_128x256": Sm90Tile(128, 4, block_n=256, in_kinds=WIDE),
    # ... in B-multicast pairs: a CTA reads 16 + 16 KB of a K block from L2 instead of 16 + 32
    "pair_128x256": Sm90Tile(128, 4, block_n=256, pair_b=True, in_kinds=WIDE),
    # ... as one wave of CTAs looping over the tiles (CTA start-up and the pipeline's fill once per CTA)
    "loop_128x256": Sm90Tile(128, 4, block_n=256, tile_loop=True, in_kinds=WIDE),
    "pair_loop_128x256": Sm90Tile(128, 4, block_n=256, pair_b=True, tile_loop=True, in_kinds=WIDE),
    # large M: three consumer warpgroups keep the tensor core fed while one of them promotes; 5 x 40 KB stages
    "tile_192x128": Sm90Tile(192, 5),
    # many tiles: the epilogue on three spare warps under the next tile's MMAs; 5 x 32 KB stages (the parked tile
    # takes 64 KB), two chains, tiles grouped
    "persistent_128x128": Sm90Tile(128, 5, chains=2, persistent=True),
    # ... in B-multicast pairs: a CTA reads 16 + 8 KB of a K block from L2 instead of 16 + 16
    "pair_persistent_128x128": Sm90Tile(128, 5, chains=2, persistent=True, pair_b=True),
    # short K, where the epilogue rather than the MMAs sets a tile's time: seven 88-register epilogue warps, one chain
    "persistent_128x128_epi7_1chain": Sm90Tile(128, 5, persistent=True, epilogue_warps=7),
    # seven 40-register epilogue warps beside two chains (consumers 216 registers), for K of 2-4 KB; the 8-bit kinds
    # only (tuned on fp8)
    "persistent_128x128_epi7": Sm90Tile(128, 5, chains=2, persistent=True, epilogue_warps=7, in_kinds=EIGHT_BIT),
    # M <= 16, swapped: 4 x 18 KB stages, 3 CTAs per SM
    "swap_16x128": Sm90Tile(16, 4, min_blocks_per_sm=3, swap_ab=True),
    # matmul_fused's exact fp32 only: one chain, 4 x 32 KB stages + 2 x 32 KB of small parts
    "f32x3_128x128": Sm90Tile(128, 4, split_tf32=True, in_kinds=SPLIT_TF32),
}


# A CDNA LDS config has two kernels: one for any K, and one for K filling whole K blocks (CdnaWholeKBlocks,
# cdna_gemm.hpp: no K-edge test in its loads), named as the first with this before the config (kernel names still
# end with their config).
WHOLE_K_PREFIX = "whole_k_"


def fills_k_blocks(name: str, k_bytes: int) -> bool:
    """Whether a call whose rows hold `k_bytes` bytes of K runs config `name`'s whole-K-block kernel: a CDNA LDS
    config and K a positive multiple of its pipeline stage (one K block of 128 bytes: fp8 / int8 K % 128 == 0, bf16 /
    fp16 K % 64 == 0; a split-K config's warps_k blocks)."""
    t = CONFIGS[name]
    return isinstance(t, CdnaTile) and k_bytes > 0 and k_bytes % t.stage_k_bytes == 0


def holds_groups(name: str, arch: str, width: int) -> bool:
    """Whether config `name` can write a group-quantised output (out_group) of `width` GEMM columns per group on
    `arch`: its block holds whole groups, reduced inside it -- the AMD LDS configs (across waves, through LDS) and
    sm_90a's unswapped CTA-per-tile configs without B-multicast pairs (within a warpgroup's rows:
    sm90_gemm_stores.hpp) and persistent configs (a parked row per warp: sm90_gemm_persistent.hpp)."""
    t = CONFIGS[name]
    if t.block_n != width:
        return False
    if isinstance(t, CdnaTile):
        return arch in ("gfx942", "gfx950")
    return (isinstance(t, Sm90Tile) and arch == "sm_90a"
            and not (t.swap_ab or t.tile_loop or t.split_tf32 or (t.pair_b and not t.persistent)))


# The names these configs had before they were named by their fields (docs and measurement logs use them).
FORMER_NAMES = {
    "m16n16k8": "portable_16x16_k8", "m64n16k8": "portable_64x16_k8", "m128n128": "portable_128x128",
    "w64n128": "tile_64x128", "w128n128": "tile_128x128", "w128n192": "tile_128x192",
    "w128n256": "tile_128x256", "c128n256": "pair_128x256", "l128n256": "loop_128x256",
    "cl128n256": "pair_loop_128x256", "w192n128": "tile_192x128", "p128n128": "persistent_128x128",
    "cp128n128": "pair_persistent_128x128", "s128n128": "persistent_128x128_epi7_1chain",
    "q128n128": "persistent_128x128_epi7", "v16n128": "swap_16x128", "t128n128": "f32x3_128x128",
}


def _camel(name: str) -> str:
    """tile_128x128 -> Tile128x128; persistent_128x128_epi7_1chain -> Persistent128x128Epi7_1chain."""
    out = ""
    for part in name.split("_"):
        out += ("_" if out[-1:].isdigit() and part[:1].isdigit() else "") + part[:1].upper() + part[1:]
    return out


def cpp_type(name: str) -> str:
    """The C++ config type of a config name: tile_128x128 -> ConfigTile128x128."""
    return "Config" + _camel(name)


def _cpp_bool(v: bool) -> str:
    return "true" if v else "false"


def render_header() -> str:
    """hip_src/include/fusedgemm/gemm_configs.hpp."""
    out = ["// GENERATED by ci/hipify.py from pkg/fusedgemm/runtime/tile_configs.py (the one table of tile configs):",
           "// do not edit; change the table and run `python ci/hipify.py`.",
           "// Each config: a traits struct with every field named, and the config type the kernel template takes.",
           "// FG_PORTABLE_GEMM_A8_CONFIGS(X) / FG_CDNA_GEMM_A8_CONFIGS(X) / FG_SM90_GEMM_A8_CONFIGS(X): X(name, type)",
           "// for each config of the template that has gemm_a8 preset kernels (portable_gemm.hip, cdna_gemm.hip,",
           "// sm90_gemm.hip).",
           "#pragma once", "", "namespace fg {", "",
           "template <class Tile>", "struct PortableGemmConfig;  // portable_gemm.hpp",
           "template <class Tile>", "struct CdnaLdsGemmConfig;  // cdna_gemm.hpp",
           "template <class Tile>", "struct WgmmaConfig;  // sm90_gemm_common.hpp",
           "template <class Cfg>", "struct SplitTf32;  // sm90_gemm_common.hpp", ""]
    lists: dict[str, list[str]] = {"portable_gemm": [], "cdna_gemm": [], "sm90_gemm": []}
    for name, t in CONFIGS.items():
        traits = _camel(name) + "Shape"
        if isinstance(t, PortableTile):
            fields = [("int", "kWarpsM", t.warps_m), ("int", "kWarpsN", t.warps_n), ("int", "kWarpsK", t.warps_k),
                      ("int", "kTilesM", t.tiles_m), ("int", "kTilesN", t.tiles_n),
                      ("int", "kStepsInFlight", t.steps_in_flight)]
            config = f"PortableGemmConfig<{traits}>"
        elif isinstance(t, CdnaTile):
            fields = [("int", "kWarpsM", t.warps_m), ("int", "kWarpsN", t.warps_n), ("int", "kWarpsK", t.warps_k),
                      ("int", "kTilesM", t.tiles_m), ("int", "kTilesN", t.tiles_n),
                      ("int", "kBlockKBytes", t.block_k_bytes)]
            config = f"CdnaLdsGemmConfig<{traits}>"
        else:
            fields = [("int", "kBlockM", t.block_m), ("int", "kBlockN", t.block_n), ("int", "kStages", t.stages),
                      ("int", "kMinBlocksPerSm", t.min_blocks_per_sm), ("bool", "kSwapAB", t.swap_ab),
                      ("int", "kChains", t.chains), ("bool", "kPersistent", t.persistent),
                      ("bool", "kPairB", t.pair_b), ("int", "kEpilogueWarps", t.epilogue_warps),
                      ("bool", "kTileLoop", t.tile_loop)]
            config = f"SplitTf32<WgmmaConfig<{traits}>>" if t.split_tf32 else f"WgmmaConfig<{traits}>"
        out.append(f"struct {traits} {{  // {name}")
        for ctype, field, value in fields:
            out.append(f"  static constexpr {ctype} {field} = {_cpp_bool(value) if ctype == 'bool' else value};")
        out += ["};", f"using {cpp_type(name)} = {config};", ""]
        if any(k in t.in_kinds for k in EIGHT_BIT) and getattr(t, "presets", True):
            lists[t.unit].append(f"  X({name}, fg::{cpp_type(name)})")
    out.append("}  // namespace fg")
    for unit, items in lists.items():
        out += ["", f"#define FG_{unit.upper()}_A8_CONFIGS(X) \\", " \\\n".join(items)]
    return "\n".join(out) + "\n"


HEADER_PATH = "include/fusedgemm/gemm_configs.hpp"  # under hip_src/
