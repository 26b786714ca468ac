"""The GEMM plan on sm_90a (132 SMs): the wgmma + TMA tile configs and the heuristic between them.

M <= 64 is weight streaming: M <= 16 on the swapped 16 x 128 tiles (the weight's rows are the MMA's M, the
activation's its N: a quarter of the tensor-core work of an m64 tile at M = 1; three CTAs per SM), and for the 8-bit
kinds up to M = 32 (two row blocks that read the weight together, split-K only while CTAs <= SMs); else 64 x 128
tiles (rows past M cost nothing, TMA zero-fills them), two CTAs per SM, or the persistent 128 x 128 kernel where
the 64-row tiles get few K blocks a CTA (8-bit: no split-K or fewer than 8; 16-bit: fewer than 12; see DECODE_*).
M > 64: the persistent 128 x 128 kernel when there are at least as many tiles as SMs (and the epilogue fits its
staging; with seven epilogue warps at short K or few tiles; the 8-bit kinds: see choose_8bit_persistent), else (fp8,
at most a quarter wave of 128 x 128 tiles) the 64 x 128 tile with split-K, else 128 x 128, 128 x 192 or 192 x 128 tiles
(matmul_fused's 16/32-bit kinds also 128 x 256, alone or in B-multicast pairs), whichever modelled_time says. When
there are too few output tiles to fill the SMs, K is split over a cluster of 2 or 4 CTAs (2 for M > 64), while every
CTA keeps >= 4 K blocks of 128.
`plans("sm_90a", kind)` (plan/__init__.py) lists every config and split this may choose.
"""
from __future__ import annotations

from ..runtime import kernels


# The 8-bit kinds' persistent configs (choose_8bit_persistent), K in bytes. Measured rules (docs/perf-notes.md):
#  * few tiles per CTA (from half a wave up to FEW_TILES_WAVES waves, K <= FEW_TILES_MAX_K), any number of tiles at
#    short K (<= SHORT_K_8BIT), and M > 128 below half a wave: seven epilogue warps. With few tiles per CTA, or short K,
#    the epilogue rather than the MMAs sets a tile's time, and three epilogue warps (one per SM sub-partition) are
#    latency bound; seven finish the last, unhidden tile sooner.
#  * of those, two accumulator chains (beside seven 40-register epilogue warps) from TWO_CHAIN_MIN_K: below it one
#    chain is enough and the 88-register epilogue warps test the output's alignment once per tile.
#  * otherwise, from a whole wave up to PERSISTENT_MAX_K_8BIT: persistent_128x128 (two chains, three epilogue warps).
#    The B-multicast pairs no longer lead it since the epilogue warps' one-row loop.
#  * int8 from INT8_Q128_MIN_TILES tiles up to INT8_Q128_MAX_K: two chains with seven epilogue warps. int8 has no
#    promotion, so its consumers idle more than fp8's and the epilogue warps matter more; fp8 stays on
#    persistent_128x128 there.
# int8 takes fp8's rules otherwise.
FEW_TILES_WAVES = 4
FEW_TILES_MAX_K = 4096  # bytes; above it (down, K 14336) split-K CTA-per-tile plans lead
SHORT_K_8BIT = 3072  # bytes
TWO_CHAIN_MIN_K = 2048  # bytes
PERSISTENT_MAX_K_8BIT = 16384
INT8_Q128_MIN_TILES = 10000
INT8_Q128_MAX_K = 5120


def choose_8bit_persistent(m: int, k: int, tiles: int, sms: int, in_kind: str = "fp8") -> kernels.TileConfig | None:
    """The 8-bit kinds' persistent config for an M > 64 problem of `tiles` 128 x 128 tiles and K bytes, or None
    (then the CTA-per-tile model decides)."""
    configs = kernels.GEMM_CONFIGS
    seven_warps = configs["persistent_128x128_epi7" if k >= TWO_CHAIN_MIN_K else "persistent_128x128_epi7_1chain"]
    if k <= FEW_TILES_MAX_K and (2 * tiles >= sms or m > 128) and tiles <= FEW_TILES_WAVES * sms:
        return seven_warps
    if tiles < sms or k > PERSISTENT_MAX_K_8BIT:
        return None
    if k <= SHORT_K_8BIT:
        return seven_warps
    if in_kind == "int8" and tiles >= INT8_Q128_MIN_TILES and k <= INT8_Q128_MAX_K:
        return configs["persistent_128x128_epi7"]
    return configs["persistent_128x128"]


# Output elements per unit of time of each M > 64 CTA-per-tile config relative to tile_128x128, when each runs
# whole waves (measured on the 8-bit kinds; docs/perf-notes.md). Larger tiles keep the tensor core busier per K block
# (the wait and promotion are shared by more MMA work).
TILE_RATE = {"tile_128x128": 1.0, "tile_128x192": 1.2, "tile_192x128": 1.27}


# The 16/32-bit kinds of matmul_fused (a K block holds 64 bf16 / 32 tf32 values: two / four times the MMA issues per
# byte of fp8) take the persistent kernel (two chains, tiles grouped) from one wave of tiles up to
# PERSISTENT_MAX_K_WIDE bytes of K; above it the 256-wide tiles lead.
PERSISTENT_MAX_K_WIDE = 8192  # bytes
# From half a wave to one wave of tiles: seven epilogue warps (one tile per CTA, so the epilogue is not hidden and
# seven warps finish it sooner). Measured on bf16; fp16 and tf32 run the same kernels.
# tile_128x256: two consumer warpgroups of m64n256 read 0.625 shared-memory bytes per output element per K step
# (tile_128x192: 0.67). pair_128x256: the same in B-multicast pairs (a CTA reads 32 KB of a K block from L2, not 48).
# pair_loop_128x256: the pairs as one wave of CTAs looping over the tiles (CTA start-up and the pipeline's fill once
# per CTA, the copies running on through each tile's epilogue); with fewer tiles than CTAs it is pair_128x256's
# kernel run, so it takes pair_128x256's place. Rates as TILE_RATE, measured on bf16 (docs/perf-notes.md).
TILE_RATE_WIDE = {"tile_128x128": 1.0, "tile_128x192": 1.1, "tile_192x128": 1.05, "tile_128x256": 1.23,
                  "pair_loop_128x256": 1.32}


def tile_count(cfg: kernels.TileConfig, m: int, n: int) -> int:
    """CTAs of a CTA-per-tile launch: one per tile; B-multicast pairs also run the idle partner of an odd last
    row block."""
    rows = -(-m // cfg.block_m)
    return -(-n // cfg.block_n) * (-(-rows // 2) * 2 if cfg.pair_b else rows)


def modelled_time(cfg: kernels.TileConfig, m: int, n: int, sms: int, rates: dict = TILE_RATE) -> float:
    """Relative time of an M > 64 GEMM on `cfg`: whole waves of tiles (a partial last wave costs a whole one)
    x the outputs each tile computes / the config's rate. Picks the small tile where the large ones need as
    many waves, the wider tile where it saves a wave, the taller one at large M."""
    waves = -(-tile_count(cfg, m, n) // (sms * cfg.min_blocks_per_sm))
    return waves * cfg.block_m * cfg.block_n / rates[cfg.name]


# The tile loop hands each tile's last 64 columns to its spare warps (under the next tile's MMAs), so above
# TILE_LOOP_MIN_K_WIDE bytes of K pair_loop_128x256 also leads the persistent kernel wherever its units (pairs of row
# blocks of a 256-wide column tile) fill two or more waves of pairs about as fully as persistent_128x128's tiles fill
# its waves (tile_loop_fills). Where they fill a wave less fully, or form one wave whose epilogue nothing hides, the
# persistent kernel stays ahead.
TILE_LOOP_MIN_K_WIDE = 4096  # bytes (exclusive)
TILE_LOOP_FILL_MARGIN = 0.05


def tile_loop_fills(m: int, n: int, sms: int) -> bool:
    """Whether pair_loop_128x256's units fill at least two waves of CTA pairs within TILE_LOOP_FILL_MARGIN as
    fully (outputs / the waves' capacity) as persistent_128x128's tiles fill its waves of CTAs."""
    loop, persistent = kernels.GEMM_CONFIGS["pair_loop_128x256"], kernels.GEMM_CONFIGS["persistent_128x128"]

    def waves_and_fill(cfg: kernels.TileConfig, ctas_per_wave: int) -> tuple[int, float]:
        waves = -(-tile_count(cfg, m, n) // ctas_per_wave)
        return waves, m * n / (waves * ctas_per_wave * cfg.block_m * cfg.block_n)

    loop_waves, loop_fill = waves_and_fill(loop, sms // 2 * 2)  # whole pairs
    _waves, persistent_fill = waves_and_fill(persistent, sms)
    return loop_waves >= 2 and loop_fill >= persistent_fill - TILE_LOOP_FILL_MARGIN


def persistent_choice(m: int, n: int, k: int, sms: int, in_kind: str) -> kernels.TileConfig | None:
    """The persistent config of an M > 64 problem with K bytes, or None (then the CTA-per-tile model decides; for
    the 16/32-bit kinds above TILE_LOOP_MIN_K_WIDE it takes the tile loop where tile_loop_fills)."""
    tiles = tile_count(kernels.GEMM_CONFIGS["persistent_128x128"], m, n)
    if in_kind in kernels.GEMM_A8_IN:
        return choose_8bit_persistent(m, k, tiles, sms, in_kind)
    if 2 * tiles >= sms > tiles and k <= PERSISTENT_MAX_K_WIDE:
        return kernels.GEMM_CONFIGS["persistent_128x128_epi7_1chain"]
    if tiles < sms or k > PERSISTENT_MAX_K_WIDE or (k > TILE_LOOP_MIN_K_WIDE and tile_loop_fills(m, n, sms)):
        return None
    return kernels.GEMM_CONFIGS["persistent_128x128"]


# fp8 at M > 64 with at most a quarter of a wave of 128 x 128 tiles (and no persistent plan): the 64-row tile, split-K
# up to 4 while its CTAs stay within W64_MAX_WAVES waves (not 2, although it runs two CTAs per SM: 4-way splits of
# 64 tiles were slower). Above a quarter wave the larger tiles lead.
FP8_FEW_TILES_W64 = 4  # the 128 x 128 tile count at most sms / this
W64_MAX_WAVES = 1.25

# The 8-bit kinds at 16 < M <= 64:
#  * M <= DECODE_V16_MAX_M: swap_16x128 (two row blocks stream the weight once from DRAM, the second through L2), its
#    split-K only while the CTAs fit one per SM (three CTAs per SM split further and lose).
#  * above: tile_64x128 with split-K, unless it gets no split or fewer than DECODE_MIN_K_BLOCKS K blocks a CTA: then
#    persistent_128x128 (one CTA per 128 x 128 tile, half its rows zero-filled). Where split-K keeps enough blocks per
#    CTA (qkv, o_proj, down) the split 64-row tiles stream the weight faster.
DECODE_V16_MAX_M = 32
DECODE_MIN_K_BLOCKS = 8
# The 16-bit kinds at 16 < M <= 64: a bf16 K block holds half of fp8's K values, so the split CTAs need twice the
# blocks before the persistent kernel stops paying; without a split the two tie and tile_64x128 stays. swap_16x128
# is no faster than these at M = 32.
DECODE_MIN_K_BLOCKS_WIDE = 12


def choose(m: int, n: int, k: int, sms: int, persistent_ok: bool, in_kind: str = "fp8") -> tuple[kernels.TileConfig, int]:
    """-> (tile config, split-K factor) for an [M, K] x [N, K] problem of input kind `in_kind` on `sms` SMs.
    F32x3 (in_kind "f32x3") has one config, f32x3_128x128, with split-K where tiles are few."""
    configs = kernels.GEMM_CONFIGS
    slots = None  # the CTAs split-K may fill: the config's resident CTAs per wave, unless a rule below bounds them
    k = k * kernels.IN_BYTES[in_kind]  # the rules below count K in bytes (a stage holds 128 bytes of K)
    k_blocks = -(-k // 128)
    rates = TILE_RATE if in_kind in kernels.GEMM_A8_IN else TILE_RATE_WIDE
    if in_kind in kernels.SPLIT_IN:
        cfg = configs["f32x3_128x128"]
    elif m <= 16 or (m <= DECODE_V16_MAX_M and in_kind in kernels.GEMM_A8_IN):
        cfg = configs["swap_16x128"]  # weight streaming on the swapped tile: less tensor-core work than an m64 tile
        if m > 16:
            slots = sms  # two row blocks: the CTAs that share a weight slice must run together (DECODE_*)
    elif m <= 64:
        cfg = configs["tile_64x128"]
        if persistent_ok:
            splits = _splits(cfg, tile_count(cfg, m, n), k_blocks, sms * cfg.min_blocks_per_sm)
            if in_kind in kernels.GEMM_A8_IN:
                few_blocks = splits == 1 or k_blocks < DECODE_MIN_K_BLOCKS * splits
            else:
                few_blocks = k_blocks < DECODE_MIN_K_BLOCKS_WIDE * splits
            return (configs["persistent_128x128"], 1) if few_blocks else (cfg, splits)
    elif persistent_ok and (persistent := persistent_choice(m, n, k, sms, in_kind)) is not None:
        return persistent, 1
    elif in_kind == "fp8" and FP8_FEW_TILES_W64 * tile_count(configs["tile_128x128"], m, n) <= sms:
        cfg, slots = configs["tile_64x128"], W64_MAX_WAVES * sms
    else:  # pairs need two row blocks: with one, half of their CTAs would only copy B for the other
        cfg = min((configs[name] for name in rates if m > configs[name].block_m or not configs[name].pair_b),
                  key=lambda c: modelled_time(c, m, n, sms, rates))
    if slots is None:
        slots = sms * cfg.min_blocks_per_sm
    return cfg, _splits(cfg, tile_count(cfg, m, n), k_blocks, slots)


def _splits(cfg: kernels.TileConfig, tiles: int, k_blocks: int, slots: int) -> int:
    """Split-K factor for `tiles` output tiles of `k_blocks` K blocks when `slots` CTAs can run at once: doubled
    while the CTAs fit and every one keeps >= 4 K blocks. Caps: 4 for the decode tiles (8 was slower on every
    decode shape), 2 for the larger ones (4 was slower than 2 at M = 128 and 256)."""
    max_splits = 1 if not cfg.splits_k else 4 if cfg.block_m <= 64 else 2
    splits = 1
    while splits < max_splits and tiles * splits * 2 <= slots and k_blocks >= 4 * splits * 2:
        splits *= 2
    return splits
