"""Stream-K for the persistent sm_90a kernels: how many tiles are split along K, over how many CTAs, and whether it
pays. The kernel side (gemm_a8_sm90_stream_k.hpp) derives each CTA's units from the same numbers; `units` below
mirrors it so the CPU tests can check the schedule covers every K block of every tile exactly once.

A persistent launch of P CTAs over T tiles of kb K blocks lasts ceil(T / P) tile times for T / P of work: at T = 96
(qkv, M = 256) 36 of 132 SMs idle through the whole kernel, and above one wave the last wave idles the rest. With
stream-K the first `sk_tiles` tiles are cut into P equal ranges of K blocks (the last partial wave plus one whole
wave; every tile when T < P) and the rest run whole, so the kernel lasts about T / P tile times plus the hand-over
of partial tiles (a 64 KB write by the CTA that starts inside a tile, a read by the one that finishes it).
"""
from __future__ import annotations

# The hand-over's cost in K blocks of MMA time (a 128 x 128 K block is 512 tensor-core cycles; writing or reading
# a 64 KB partial tile ~1000): the model below charges it once per launch, on the critical path.
HANDOVER_BLOCKS = 3
# K blocks a CTA's range holds at least (below one wave): shorter ranges are mostly pipeline fill.
MIN_RANGE_BLOCKS = 4
# Take stream-K when the model says the launch is at least this much shorter (the rest is noise and hand-over).
MIN_GAIN = 0.02
MAX_CTAS = 1024  # kStreamKMaxCtas: flags at the workspace's start
SLOT_BYTES = 128 * 128 * 4  # kStreamKSlotBytes: one partial tile per CTA


def workspace_bytes(ctas: int) -> int:
    """The workspace of a launch of `ctas` CTAs: the flags, then one partial-tile slot per CTA."""
    return 4 * MAX_CTAS + ctas * SLOT_BYTES


def split(tiles: int, kb: int, sms: int) -> tuple[int, int]:
    """-> (sk_tiles, CTAs) of a stream-K launch over `tiles` tiles of `kb` K blocks on `sms` SMs (one CTA each):
    every tile below one wave (on as many CTAs as keep MIN_RANGE_BLOCKS per range, at least one per tile), else the
    last partial wave plus one whole wave on every SM; (0, min(tiles, sms)) when whole waves leave nothing to split."""
    if tiles <= 0 or kb <= 0:
        return 0, 0
    if tiles < sms:
        ctas = max(tiles, min(sms, tiles * kb // MIN_RANGE_BLOCKS))
        return (tiles, ctas) if ctas > tiles else (0, tiles)
    rest = tiles % sms
    return (rest + sms if rest else 0), sms


def modelled_blocks(tiles: int, kb: int, sms: int, stream_k: bool) -> float:
    """The launch's length in K blocks of one CTA's MMA time: whole waves of whole tiles, or with stream-K the
    longest CTA's share plus the hand-over."""
    if not stream_k:
        return -(-tiles // sms) * kb
    sk_tiles, ctas = split(tiles, kb, sms)
    if sk_tiles == 0:
        return -(-tiles // sms) * kb
    return (tiles - sk_tiles) // ctas * kb + -(-sk_tiles * kb // ctas) + HANDOVER_BLOCKS


def pays(tiles: int, kb: int, sms: int) -> bool:
    """Whether stream-K's modelled launch is at least MIN_GAIN shorter than the plain persistent one's."""
    sk_tiles, ctas = split(tiles, kb, sms)
    if sk_tiles == 0 or ctas * sk_tiles * kb >= 2 ** 31 or ctas > MAX_CTAS:
        return False
    return modelled_blocks(tiles, kb, sms, True) <= (1 - MIN_GAIN) * modelled_blocks(tiles, kb, sms, False)


def _begin(c: int, ctas: int, sk_iters: int) -> int:
    return c * sk_iters // ctas


def units(c: int, ctas: int, tiles: int, sk_tiles: int, kb: int) -> list[tuple[str, int, int, int, int]]:
    """CTA c's units in order, as the kernel runs them: (kind, tile, k0, count, g0), kind 'whole', 'partial' (copied
    to the workspace) or 'first' (a tile's first piece: its epilogue adds the later pieces). g0: the K blocks the
    CTA ran before the unit. Mirrors stream_k_unit: the whole tiles c, c + P, ... before the last sk_tiles, then
    the CTA's range of the stream-K part's K blocks."""
    dp_tiles = tiles - sk_tiles
    n_dp = -(-(dp_tiles - c) // ctas) if dp_tiles > c else 0
    out = [("whole", c + q * ctas, 0, kb, q * kb) for q in range(n_dp)]
    sk_iters = sk_tiles * kb
    ib, ie = _begin(c, ctas, sk_iters), _begin(c + 1, ctas, sk_iters)
    if ib % kb and ib < ie:
        s = ib // kb
        out.append(("partial", dp_tiles + s, ib - s * kb, min(ie, (s + 1) * kb) - ib, n_dp * kb))
    first = -(-ib // kb)
    for s in range(first, -(-ie // kb)):
        count = min(ie, (s + 1) * kb) - s * kb
        out.append(("first" if count < kb else "whole", dp_tiles + s, 0, count, n_dp * kb + s * kb - ib))
    return out


def peers(c: int, ctas: int, sk_tiles: int, kb: int, s: int) -> int:
    """How many later CTAs (c + 1, ...) hold partial pieces of stream-K tile s whose first piece CTA c computes.
    Mirrors stream_k_peers."""
    sk_iters, p = sk_tiles * kb, c + 1
    while p < ctas and _begin(p, ctas, sk_iters) < (s + 1) * kb:
        p += 1
    return p - c - 1


def first_piece(q: int, c: int, ctas: int, tiles: int, sk_tiles: int, kb: int) -> int:
    """The stream-K tile (0 .. sk_tiles - 1) whose first piece is CTA c's q-th unit, else -1. Mirrors
    stream_k_first_piece (the epilogue warps' lean form of the same schedule)."""
    dp_tiles = tiles - sk_tiles
    n_dp = -(-(dp_tiles - c) // ctas) if dp_tiles > c else 0
    sk_iters = sk_tiles * kb
    ib, ie = _begin(c, ctas, sk_iters), _begin(c + 1, ctas, sk_iters)
    if ie % kb == 0 or ie <= ib:
        return -1
    count = n_dp + (1 if ib % kb else 0) + -(-ie // kb) - -(-ib // kb)
    return ie // kb if q == count - 1 and ie // kb * kb >= ib else -1
