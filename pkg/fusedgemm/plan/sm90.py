"""gemm_a8's plan on sm_90a (H100/H200, 132 SMs): the wgmma + TMA tile configs and the heuristic between them.

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


# The 8-bit kinds at short K on s128n128: the persistent kernel with seven epilogue warps (88 registers) and one
# accumulator chain (the consumers keep 168). At short K the epilogue, not the MMAs, sets a tile's time: three
# epilogue warps, one per SM sub-partition, are latency bound. H100, fp8 bias_silu, every plan timed rep by rep
# (docs/perf-notes.md): N 5120 K 768 M 16384 199 us against 303 on cp128n128, moe_dn (K 2048) M = 8192 235 against
# 279, N 12288 K 1536 M 16384 617 against 816; at K = 4096 2-5% behind p128n128 (qkv M = 8192 355 against 347,
# gate_up 1642 against 1569). Its B-multicast pair (measured, not kept) was 3-10% slower than it on every row.
#
# int8 takes the same rules as fp8 (below) since 2026-11-26: H100, bias_silu, plans rep by rep
# (docs/results/h100_bench_int8_plans.txt) against its old rules (persistent only from a whole wave and up to K = 8192,
# s128n128 at K <= 2048): qkv / o_proj / moe_dn M = 256 19.8 / 19.1 / 15.1 us on q128n128 against 24.5 / 21.6 / 19.5
# on the CTA-per-tile plan; down (K 14336) M = 1024 / 4096 / 8192 89.1 / 338.4 / 689.8 on p128n128 against 105.5 /
# 446.2 / 820.9; qkv / o_proj M = 1024 41.9 / 31.6 on q128n128 against 43.0 / 32.8 on p128n128.

# fp8 after the 8-block unroll of the two-chain main loop (H100, bias_silu, every plan timed rep by rep, one
# process: docs/results/h100_bench_fp8_tune_unroll8.txt):
#  * up to FEW_TILES_WAVES waves of tiles, from half a wave, and K <= FEW_TILES_MAX_K bytes: s128n128. With
#    few tiles per CTA the last tile's epilogue is not hidden, and seven epilogue warps finish it sooner: qkv M =
#    256 / 1024 21.5 / 48.6 us against 24.4 / 52.1 on p128n128, o_proj M = 1024 35.1 / 38.7, gate_up M = 256
#    67.2 / 71.6, moe_dn M = 256 15.8 / 18.6 (w128n128: 20.8); from 7.8 waves (o_proj / qkv M = 4096) the two
#    are within 1.5%, and at gate_up M = 4096 / 8192 (54 / 109 waves) s128n128 is 4-9% behind.
#  * above that: p128n128, up to K = 14336 (down M = 4096 / 8192 376 / 753 us against 437 / 824 on w192n128,
#    385 / 775 on s128n128, 381 / 757 on cp128n128): PERSISTENT_MAX_K_8BIT. At K = 4096 the B-multicast pairs
#    (cp128n128) were taken here until the epilogue warps' loop change (8445445); since then p128n128 leads them on
#    every K = 4096 row at M >= 1024: H100 by 0.4-2.8% (--tune, docs/results/h100_bench_fp8_tune_epilogue1row.txt),
#    H200 by 1.5-2.9% (qkv M = 8192 340.7 against 346.7 us, gate_up M = 8192 1594 against 1640;
#    docs/results/h200_bench_fp8_plans_p128n128_cp128n128.txt).
#  * after the epilogue warps' loop change (8445445; docs/results/h100_bench_fp8_sweep_plans.txt, the sweep with
#    plans forced rep by rep): s128n128 also below half a wave at M > 128 (N 1024 K 768 M = 256, 16 tiles: 10.8 us
#    against 14.8 on w128n128 and 11.1 on w64n128 split 4; o_proj M = 256, 64 tiles: 21.0 against 22.4 on
#    w128n128 split 2, the tuned table's entry); M <= 128 keeps the split-K tiles (not measured); and at any
#    number of tiles up to K = 3072 bytes (N 5120 K 3072 M = 4096, 9.7 waves: 123.2 us against 129.7 on
#    cp128n128 and 125.7 on p128n128).
#  * q128n128 (two chains beside seven 40-register epilogue warps; the consumers keep 216 registers) wherever the
#    rules above take s128n128 at K >= TWO_CHAIN_MIN_K bytes. H100, bias_silu, plans rep by rep
#    (docs/results/h100_bench_fp8_plans_q128n128.txt, ..._sweep_plans_q128n128.txt): moe_dn (K 2048) M = 1024 / 4096
#    / 8192 40.8 / 120.7 / 229.2 us against 41.9 / 124.0 / 237.6 on s128n128, qkv / o_proj M = 1024 47.8 / 34.7
#    against 48.8 / 35.3, N 5120 K 3072 M = 4096 121.4 against 125.2; at K = 1536 the two tie (N 2560 / 12288) and at
#    K = 768 s128n128 leads (N 5120 M = 4096 52.7 against 54.2: one chain is enough there, and the 88-register
#    warps test the output's alignment once per tile). At K = 4096 and >= 4 waves p128n128 stays ahead of both
#    (qkv M = 8192 341.7 against 348.1 on q128n128, gate_up 8192 1557 against 1610).
# The 8-bit kinds' rules (fp8's, measured above; int8 since 2026-11-26), bytes of K:
FEW_TILES_WAVES = 4
FEW_TILES_MAX_K = 4096  # bytes: down (K 14336) M = 256 keeps split-K (44.3 us against 49.6 on s128n128)
SHORT_K_8BIT = 3072  # bytes
TWO_CHAIN_MIN_K = 2048  # bytes
PERSISTENT_MAX_K_8BIT = 16384
# int8 only: q128n128 instead of p128n128 from INT8_Q128_MIN_TILES tiles (~76 waves) up to INT8_Q128_MAX_K bytes.
# H100, bias_silu, the two rep by rep (docs/results/h100_bench_int8_many_tiles_plans.txt,
# ..._persistent_plans.txt): gate_up M = 16384 / 32768 2896 / 5997 us against 3257 / 6825, N 12288 K 5120 M = 16384 /
# 32768 1587 / 3260 against 1645 / 3557, qkv M = 32768 1200 against 1244; gate_up M = 8192 (14336 tiles) tied in one
# run, 5-10% ahead in three. Below ~10000 tiles p128n128 leads by 1-2% (qkv M = 8192 / 16384 295 / 578 against 300 /
# 592), at K 14336 the two tie (down M 8192-32768). fp8 on the same shapes: p128n128 ahead on every row
# (docs/results/h100_bench_fp8_many_tiles_plans.txt): its promotion keeps the consumers busier than int8's.
INT8_Q128_MIN_TILES = 10000
INT8_Q128_MAX_K = 5120


def choose_8bit_persistent(m: int, k: int, tiles: int, sms: int, in_kind: str = "fp8") -> kernels.TileConfig | None:
    """The 8-bit kinds' persistent config for an M > 64 problem of `tiles` 128 x 128 tiles and K bytes, or None
    (then the CTA-per-tile model decides)."""
    configs = kernels.GEMM_A8_CONFIGS
    seven_warps = configs["q128n128" if k >= TWO_CHAIN_MIN_K else "s128n128"]
    if k <= FEW_TILES_MAX_K and (2 * tiles >= sms or m > 128) and tiles <= FEW_TILES_WAVES * sms:
        return seven_warps
    if tiles < sms or k > PERSISTENT_MAX_K_8BIT:
        return None
    if k <= SHORT_K_8BIT:
        return seven_warps
    if in_kind == "int8" and tiles >= INT8_Q128_MIN_TILES and k <= INT8_Q128_MAX_K:
        return configs["q128n128"]
    return configs["p128n128"]


# Output elements per unit of time of each M > 64 config relative to w128n128, when each runs whole waves
# (H200, --compare-plans at M = 4096 / 8192, fp8 and int8, all five grid shapes: 1.16-1.25 and 1.21-1.29).
# Larger tiles keep the tensor core busier per K block (the wait and promotion are shared by more MMA work).
TILE_RATE = {"w128n128": 1.0, "w128n192": 1.2, "w192n128": 1.27}


# The 16/32-bit kinds of matmul_fused (a K block holds 64 bf16 / 32 tf32 values: twice / four times the MMA
# issues per byte of fp8) take the persistent kernel (two chains, tiles grouped) up to K = 8192 bytes, from one
# wave of tiles. H100, bf16 silu, every plan timed rep by rep (ci/matmul_plans.py, docs/results/
# h100_matmul_bf16_plans_two_chains.txt): fastest on every row with K <= 4096 and >= 132 tiles -- qkv M = 1024 /
# 4096 / 8192 79 / 293 / 580 us against 93 (w128n192) / 319 / 627 (c128n256), o_proj M = 1024 (1.9 waves) 54
# against 57, moe_dn M = 1024 / 8192 57 / 352 against 69 / 444 (c128n256) and 59 / 362 in B-multicast pairs
# (cp128n128, which the plan no longer takes); at K = 14336 (down) c128n256 leads (629 against 658 at M = 4096).
PERSISTENT_MAX_K_WIDE = 8192  # bytes
# ... and from half a wave to one wave of tiles, s128n128 (one tile per CTA, so its seven epilogue warps finish the
# unhidden epilogue sooner; measured on bf16, taken for fp16 and tf32 too, whose kernels are the same): bf16 silu,
# H100, every plan rep by rep (docs/results/h100_matmul_bf16_plans_after_unroll8.txt): qkv M = 256 (96 tiles) 32.6 us against 34.8 on w128n128, moe_dn M = 256 (112) 21.4 against 25.1;
# from a whole wave p128n128 stays ahead (qkv M = 1024 79.5 against 85 on s128n128).
# w128n256 (two consumer warpgroups of m64n256: 0.625 shared-memory bytes per output element per K step against
# 0.67 on w128n192), measured after the C7514 fix (H100, bf16 silu, every plan forced): qkv M = 4096 333 us
# against 355 w128n192 / 359 persistent / 404 w128n128; down M = 4096 660 against 726 persistent / 796 / 829;
# qkv M = 1024 109 against 94 on w128n192 (whole waves: the model's job); moe_dn M = 8192 446 against 428
# persistent. Rates below: outputs per unit time relative to w128n128 at M = 4096 (the two shapes' mean).
# c128n256 (w128n256 in B-multicast pairs: a CTA reads 32 KB per K block from L2 instead of 48), H100, bf16 silu,
# every plan forced in one process (docs/perf-notes.md): qkv M = 4096 / 8192 321 / 630 us against 331 / 667 on
# w128n256, o_proj 4096 217 / 227, gate_up 4096 1422 / 1472, down 4096 632 / 656, moe_dn 8192 448 / 452 (the
# persistent kernel 427): 1.01-1.06x, mean 1.04.
# cl128n256 (c128n256 as one wave of CTAs looping over the tiles, kTileLoop: CTA start-up and the pipeline's fill
# once per CTA, and the copies run on through each tile's epilogue), H100, bf16 silu, every plan rep by rep
# (docs/results/h100_matmul_bf16_plans_tile_loop.txt): qkv M = 4096 / 8192 304 / 590 us against 320 / 623 on
# c128n256, o_proj 8192 397 / 416, gate_up 4096 1375 / 1409, down 4096 622 / 627, moe_dn 8192 402 / 451, M = 1024
# within 1 us either way: 1.01-1.12x, so it takes c128n256's place (with fewer tiles than CTAs the two are the same
# kernel run).
TILE_RATE_WIDE = {"w128n128": 1.0, "w128n192": 1.1, "w192n128": 1.05, "w128n256": 1.23, "cl128n256": 1.32}


def tile_count(cfg: kernels.TileConfig, m: int, n: int) -> int:
    """CTAs of a CTA-per-tile launch: one per tile; B-multicast pairs also run the idle partner of an odd last
    row block."""
    rows = -(-m // cfg.block_m)
    return -(-n // cfg.block_n) * (-(-rows // 2) * 2 if cfg.pair_b else rows)


def modelled_time(cfg: kernels.TileConfig, m: int, n: int, sms: int, rates: dict = TILE_RATE) -> float:
    """Relative time of an M > 64 GEMM on `cfg`: whole waves of tiles (a partial last wave costs a whole one)
    x the outputs each tile computes / the config's rate. Picks the small tile where the large ones need as
    many waves (o_proj M = 1024: w128n128), w128n192 where it saves a wave (qkv M = 1024: 66 us against 81 on
    w128n128 and 84 on w192n128), w192n128 at large M."""
    waves = -(-tile_count(cfg, m, n) // (sms * cfg.min_blocks_per_sm))
    return waves * cfg.block_m * cfg.block_n / rates[cfg.name]


# Since the tile loop hands each tile's last 64 columns to its spare warps (under the next tile's MMAs), cl128n256
# also leads the persistent kernel above K = 4096 bytes wherever its units (pairs of row blocks of a 256-wide column
# tile) fill two or more waves of pairs about as fully as p128n128's tiles fill its waves. H100, bf16 silu, every plan
# rep by rep (docs/results/h100_matmul_bf16_plans_handed_chunk.txt), cl128n256 against p128n128: qkv M = 2048 / 4096
# / 8192 148 / 284 / 558 us against 150 / 288 / 574, o_proj 2048 / 8192 102 / 374 against 104 / 383, gate_up 1024 /
# 4096 331 / 1293 against 332 / 1362; but qkv M = 1024 (96 units on 66 pairs: 73% of two waves) 103 against 76, o_proj
# 1024 (one wave, whose epilogue nothing hides) 55 against 51, and at K = 4096 bytes (moe_dn) 3-8% behind at every M.
TILE_LOOP_MIN_K_WIDE = 4096  # bytes (exclusive)
TILE_LOOP_FILL_MARGIN = 0.05


def tile_loop_fills(m: int, n: int, sms: int) -> bool:
    """Whether cl128n256's units fill at least two waves of CTA pairs within TILE_LOOP_FILL_MARGIN as fully (outputs
    / the waves' capacity) as p128n128's tiles fill its waves of CTAs."""
    loop, persistent = kernels.GEMM_A8_CONFIGS["cl128n256"], kernels.GEMM_A8_CONFIGS["p128n128"]

    def waves_and_fill(cfg: kernels.TileConfig, ctas_per_wave: int) -> tuple[int, float]:
        waves = -(-tile_count(cfg, m, n) // ctas_per_wave)
        return waves, m * n / (waves * ctas_per_wave * cfg.block_m * cfg.block_n)

    loop_waves, loop_fill = waves_and_fill(loop, sms // 2 * 2)  # whole pairs
    _waves, persistent_fill = waves_and_fill(persistent, sms)
    return loop_waves >= 2 and loop_fill >= persistent_fill - TILE_LOOP_FILL_MARGIN


def _persistent(m: int, n: int, k: int, sms: int, in_kind: str) -> kernels.TileConfig | None:
    """The persistent config of an M > 64 problem with K bytes, or None (then the CTA-per-tile model decides; for
    the 16/32-bit kinds above TILE_LOOP_MIN_K_WIDE it takes the tile loop where tile_loop_fills)."""
    tiles = tile_count(kernels.GEMM_A8_CONFIGS["p128n128"], m, n)
    if in_kind in kernels.GEMM_A8_IN:
        return choose_8bit_persistent(m, k, tiles, sms, in_kind)
    if 2 * tiles >= sms > tiles and k <= PERSISTENT_MAX_K_WIDE:
        return kernels.GEMM_A8_CONFIGS["s128n128"]
    if tiles < sms or k > PERSISTENT_MAX_K_WIDE or (k > TILE_LOOP_MIN_K_WIDE and tile_loop_fills(m, n, sms)):
        return None
    return kernels.GEMM_A8_CONFIGS["p128n128"]


# fp8 at M > 64 with at most a quarter of a wave of 128 x 128 tiles (and no persistent plan): the 64-row tile
# w64n128, split-K up to 4 while its CTAs stay within 1.25 waves (not 2: it runs two CTAs per SM, but 4-way
# splits of 64 tiles were slower). H100, bf16 out, bias_silu, every plan rep by rep (docs/results/
# h100_bench_fp8_few_tiles_plans.txt, ci/shapes_few_tiles.json): N 1024 K 5120 M = 128 / 256 / 512 13.1 / 15.2 /
# 18.8 us against 20.3 / 20.6 / 20.5 on w128n128 split 2; N 1024 K 16384 19.7 / 24.5 / 32.8 against 34.2 / 34.1
# / 34.3; N 2560 K 8192 M = 128 20.5 against 24.9; o_proj M = 128 19.2 against 20.8; down M = 128 36.6 against
# 37.1. Above a quarter wave (N 2560 K 8192 M = 256, 40 tiles; o_proj M = 256) the larger tiles stay ahead.
FP8_FEW_TILES_W64 = 4  # the 128 x 128 tile count at most sms / this
W64_MAX_WAVES = 1.25

# The 8-bit kinds at 16 < M <= 64 (H100, bias_silu, every plan rep by rep at M = 32 / 48 / 64, fp8 and int8, 50 reps:
# docs/results/h100_bench_*_m64_plans.txt; the H100 / H200 --tune runs agree):
#  * M <= DECODE_V16_MAX_M: v16n128 (two row blocks stream the weight once from DRAM, the second through L2), its
#    split-K only while the CTAs fit one per SM. fp8 / int8 M = 32 against the w64n128 plan before: qkv 16.9 / 17.9
#    us (split 1) against 18.6 / 18.6, o_proj 14.0 / 14.6 (split 2) against 15.9 / 15.7, moe_dn 12.8 / 13.1 against
#    15.3 / 15.2, down 29.9 / 32.1 against 30.7 / 30.8, gate_up 49.2 / 50.8 against 49.2 / 49.3 (geomean 0.92 / 0.96).
#    Three CTAs per SM split further (qkv split 2: 19.2 us) and lose.
#  * above: w64n128 with split-K as before, unless it gets no split or fewer than DECODE_MIN_K_BLOCKS K blocks a CTA:
#    then p128n128 (one CTA per 128 x 128 tile, half its rows zero-filled). M = 48 / 64, fp8: moe_dn (K 2048, split
#    4 leaves 4 blocks) 13.8 / 14.0 against 15.6 / 15.7 on w64n128:4, gate_up (224 tiles, no split) 48.2 / 48.7
#    against 50.1 / 50.9; int8 13.2 / 13.4 against 15.4 / 15.7, 47.6 / 47.9 against 48.7 / 50.2. Where split-K keeps
#    >= 8 blocks (qkv, o_proj, down) w64n128 stays: down M = 64 31.4 against 45.3 on p128n128 (32 CTAs for a 117 MB
#    stream), o_proj 16.3 against 18.7, qkv tied (19.2).
DECODE_V16_MAX_M = 32
DECODE_MIN_K_BLOCKS = 8
# The 16-bit kinds at 16 < M <= 64 (H100, bf16 + bias + SiLU, every plan rep by rep at M = 32 / 48 / 64, 40 reps:
# docs/results/h100_matmul_bf16_m64_plans.txt): a bf16 K block holds half of fp8's K values, so the split CTAs keep
# twice the blocks. p128n128 wins where w64n128's split leaves 8 K blocks a CTA (moe_dn, split 4: 18.7-19.2 us
# against 20.4-21.0, -8%) and loses where it leaves 16 (qkv 28-29 against 27-28, o_proj 28 against 21-22); without
# a split (gate_up, 224 tiles) the two tie (87-88 us), so w64n128 stays there. v16n128 at M = 32 was no faster than
# these (moe_dn 18.7, qkv 28-30).
DECODE_MIN_K_BLOCKS_WIDE = 12


def choose(m: int, n: int, k: int, sms: int, persistent_ok: bool, in_kind: str = "fp8") -> tuple[kernels.TileConfig, int]:
    """-> (tile config, split-K factor) for an [M, K] x [N, K] problem of input kind `in_kind` on `sms` SMs.
    F32x3 (in_kind "f32x3") has one config, t128n128, with split-K where tiles are few."""
    configs = kernels.GEMM_A8_CONFIGS
    slots = None  # the CTAs split-K may fill: the config's resident CTAs per wave, unless a rule below bounds them
    k = k * kernels.IN_BYTES[in_kind]  # the rules below count K in bytes (a stage holds 128 bytes of K)
    k_blocks = -(-k // 128)
    rates = TILE_RATE if in_kind in kernels.GEMM_A8_IN else TILE_RATE_WIDE
    if in_kind in kernels.SPLIT_IN:
        cfg = configs["t128n128"]
    elif m <= 16 or (m <= DECODE_V16_MAX_M and in_kind in kernels.GEMM_A8_IN):
        cfg = configs["v16n128"]  # weight streaming on the swapped tile: less tensor-core work than an m64 tile
        if m > 16:
            slots = sms  # two row blocks: the CTAs that share a weight slice must run together (DECODE_*)
    elif m <= 64:
        cfg = configs["w64n128"]
        if persistent_ok:
            splits = _splits(cfg, tile_count(cfg, m, n), k_blocks, sms * cfg.min_blocks_per_sm)
            if in_kind in kernels.GEMM_A8_IN:
                few_blocks = splits == 1 or k_blocks < DECODE_MIN_K_BLOCKS * splits
            else:
                few_blocks = k_blocks < DECODE_MIN_K_BLOCKS_WIDE * splits
            return (configs["p128n128"], 1) if few_blocks else (cfg, splits)
    elif persistent_ok and (persistent := _persistent(m, n, k, sms, in_kind)) is not None:
        return persistent, 1
    elif in_kind == "fp8" and FP8_FEW_TILES_W64 * tile_count(configs["w128n128"], m, n) <= sms:
        cfg, slots = configs["w64n128"], W64_MAX_WAVES * sms
    else:  # pairs need two row blocks: with one, half of their CTAs would only copy B for the other
        cfg = min((configs[name] for name in rates if m > configs[name].block_m or not configs[name].pair_b),
                  key=lambda c: modelled_time(c, m, n, sms, rates))
    if slots is None:
        slots = sms * cfg.min_blocks_per_sm
    return cfg, _splits(cfg, tile_count(cfg, m, n), k_blocks, slots)


def _splits(cfg: kernels.TileConfig, tiles: int, k_blocks: int, slots: int) -> int:
    """Split-K factor for `tiles` output tiles of `k_blocks` K blocks when `slots` CTAs can run at once: doubled
    while the CTAs fit and every one keeps >= 4 K blocks. Caps: 4 for the decode tiles (8 was slower on every
    decode shape), 2 for the larger ones (4 was 10-35% slower than 2 at M = 128 and 256: o_proj M=128 26.9 against
    22.0 us, down 45.3 / 40.4)."""
    max_splits = 1 if not cfg.splits_k else 4 if cfg.block_m <= 64 else 2
    splits = 1
    while splits < max_splits and tiles * splits * 2 <= slots and k_blocks >= 4 * splits * 2:
        splits *= 2
    return splits
