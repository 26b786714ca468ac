"""Stream-K for the persistent sm_90a kernel with seven epilogue warps (s128n128 -> ks128n128): which tiles are
split along K, over how many CTAs, and whether it pays. The kernel (gemm_a8_sm90_stream_k.hpp) derives each CTA's
units from the same numbers; `units` below mirrors it so the CPU tests can check that the schedule covers every K
block of every tile exactly once.

A persistent launch of P CTAs over T tiles of kb K blocks lasts ceil(T / P) tile times for T / P of work: the last
partial wave (every tile, when T < P) leaves SMs idle. Here the tiles of that wave are cut into j equal K pieces
over j x (those tiles) CTAs, so it lasts about 1 / j of a tile time plus the hand-over (the later pieces' partial
tiles through a workspace to the first piece's epilogue warps). The pieces are equal so that CTAs whose tiles share
operands still read the same K blocks at the same time: stream-K proper (P equal ranges of the split tiles' K
blocks, cutting tiles anywhere) measured 20-50% slower on an H100, its CTAs reading the same B blocks many K blocks
apart and finding them evicted from L2 (docs/perf-notes.md).
"""
from __future__ import annotations

# The hand-over's cost in K blocks of MMA time, on the critical path once per launch: the first piece's epilogue
# waits for its peers' flags and adds their partial tiles (64 KB each) before it stores.
HANDOVER_BLOCKS = 4
# K blocks a piece holds at least: shorter pieces are mostly pipeline fill.
MIN_PIECE_BLOCKS = 4
# Take stream-K when the model says the launch is at least this much shorter.
MIN_GAIN = 0.05
MAX_CTAS = 1024  # kStreamKMaxCtas: flags at the workspace's start
SLOT_BYTES = 128 * 128 * 4  # kStreamKSlotBytes: one partial tile per CTA


def workspace_bytes(ctas: int) -> int:
    """The workspace of a launch of `ctas` CTAs: the flags, then one partial-tile slot per CTA."""
    return 4 * MAX_CTAS + ctas * SLOT_BYTES


def split(tiles: int, kb: int, sms: int) -> tuple[int, int, int]:
    """-> (sk_tiles, grid CTAs, sk_ctas) of a launch over `tiles` tiles of `kb` K blocks on `sms` SMs (one CTA
    each): the last partial wave's tiles (every tile below one wave), each in j = min(SMs // those tiles, kb //
    MIN_PIECE_BLOCKS) pieces on j x sk_tiles CTAs; (0, CTAs, 0) where j < 2 or whole waves leave nothing to split."""
    if tiles <= 0 or kb <= 0:
        return 0, 0, 0
    rest = tiles % sms if tiles >= sms else tiles
    grid = min(tiles, sms)
    j = min(sms // rest, kb // MIN_PIECE_BLOCKS) if rest else 0
    if j < 2:
        return 0, grid, 0
    return rest, max(grid, j * rest), j * rest


def modelled_blocks(tiles: int, kb: int, sms: int, stream_k: bool) -> float:
    """The launch's length in K blocks of one CTA's MMA time: whole waves of whole tiles, or with stream-K the
    whole waves, then the split wave's pieces plus the hand-over."""
    sk_tiles, _grid, sk_ctas = split(tiles, kb, sms) if stream_k else (0, 0, 0)
    if sk_tiles == 0:
        return -(-tiles // sms) * kb
    return (tiles - sk_tiles) // sms * kb + -(-kb * sk_tiles // sk_ctas) + HANDOVER_BLOCKS


def pays(tiles: int, kb: int, sms: int) -> bool:
    """Whether stream-K's modelled launch is at least MIN_GAIN shorter than the plain persistent one's."""
    sk_tiles, grid, sk_ctas = split(tiles, kb, sms)
    if sk_tiles == 0 or sk_ctas * sk_tiles * kb >= 2 ** 31 or grid > MAX_CTAS:
        return False
    return modelled_blocks(tiles, kb, sms, True) <= (1 - MIN_GAIN) * modelled_blocks(tiles, kb, sms, False)


def _begin(c: int, sk_ctas: int, sk_iters: int) -> int:
    return sk_iters if c >= sk_ctas else c * sk_iters // sk_ctas


def units(c: int, ctas: int, tiles: int, sk_tiles: int, sk_ctas: int,
          kb: int) -> list[tuple[str, int, int, int, int]]:
    """CTA c's units in order, as the kernel runs them: (kind, tile, k0, count, g0), kind 'whole', 'partial' (copied
    to the workspace) or 'first' (a tile's first piece: its epilogue adds the later pieces). g0: the K blocks the
    CTA ran before the unit. Mirrors stream_k_unit: the whole tiles c, c + P, ... before the last sk_tiles, then
    the CTA's range of the stream-K part's K blocks (CTAs below sk_ctas)."""
    dp_tiles = tiles - sk_tiles
    n_dp = -(-(dp_tiles - c) // ctas) if dp_tiles > c else 0
    out = [("whole", c + q * ctas, 0, kb, q * kb) for q in range(n_dp)]
    sk_iters = sk_tiles * kb
    ib, ie = _begin(c, sk_ctas, sk_iters), _begin(c + 1, sk_ctas, sk_iters)
    if ib % kb and ib < ie:
        s = ib // kb
        out.append(("partial", dp_tiles + s, ib - s * kb, min(ie, (s + 1) * kb) - ib, n_dp * kb))
    first = -(-ib // kb)
    for s in range(first, -(-ie // kb)):
        count = min(ie, (s + 1) * kb) - s * kb
        out.append(("first" if count < kb else "whole", dp_tiles + s, 0, count, n_dp * kb + s * kb - ib))
    return out


def peers(c: int, sk_ctas: int, sk_tiles: int, kb: int, s: int) -> int:
    """How many later CTAs (c + 1, ...) hold partial pieces of stream-K tile s whose first piece CTA c computes.
    Mirrors stream_k_peers."""
    sk_iters, p = sk_tiles * kb, c + 1
    while p < sk_ctas and _begin(p, sk_ctas, sk_iters) < (s + 1) * kb:
        p += 1
    return p - c - 1


def first_piece(q: int, c: int, ctas: int, tiles: int, sk_tiles: int, sk_ctas: int, kb: int) -> int:
    """The stream-K tile (0 .. sk_tiles - 1) whose first piece is CTA c's q-th unit, else -1. Mirrors
    stream_k_first_piece (the epilogue warps' lean form of the same schedule)."""
    dp_tiles = tiles - sk_tiles
    n_dp = -(-(dp_tiles - c) // ctas) if dp_tiles > c else 0
    sk_iters = sk_tiles * kb
    ib, ie = _begin(c, sk_ctas, sk_iters), _begin(c + 1, sk_ctas, sk_iters)
    if ie % kb == 0 or ie <= ib:
        return -1
    count = n_dp + (1 if ib % kb else 0) + -(-ie // kb) - -(-ib // kb)
    return ie // kb if q == count - 1 and ie // kb * kb >= ib else -1
