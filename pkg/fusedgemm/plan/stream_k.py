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
    """CTA c's units in order, as the kernel runs them: (kind, tile, k0, count, g0), kind 'partial' (written to
    the workspace), 'first' (a tile's first piece: its finisher adds the later pieces) or 'whole'. g0: the K blocks
    the CTA ran before the unit. Mirrors stream_k_partial_unit / stream_k_park_unit."""
    sk_iters = sk_tiles * kb
    ib, ie = _begin(c, ctas, sk_iters), _begin(c + 1, ctas, sk_iters)
    out = []
    if ib % kb and ib < ie:
        t = ib // kb
        out.append(("partial", t, ib - t * kb, min(ie, (t + 1) * kb) - ib, 0))
    first = -(-ib // kb)
    sk_units = -(-ie // kb) - first
    for q in range(sk_units):
        t = first + q
        count = min(ie, (t + 1) * kb) - t * kb
        out.append(("first" if count < kb else "whole", t, 0, count, t * kb - ib))
    d = 0
    while (t := sk_tiles + c + d * ctas) < tiles:
        out.append(("whole", t, 0, kb, ie - ib + d * kb))
        d += 1
    return out


def contributors(c: int, ctas: int, sk_tiles: int, kb: int, tile: int) -> list[int]:
    """The CTAs whose partial pieces the finisher of `tile` (CTA c) adds, in order. Mirrors stream_k_gather."""
    sk_iters, out = sk_tiles * kb, []
    for p in range(c + 1, ctas):
        b = _begin(p, ctas, sk_iters)
        if b >= (tile + 1) * kb:
            break
        if b != _begin(p + 1, ctas, sk_iters):
            out.append(p)
    return out
