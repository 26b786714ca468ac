"""Stream-K's schedule (plan/stream_k.py, the mirror of gemm_a8_sm90_stream_k.hpp): every K block of every tile is
computed exactly once, each tile's later pieces reach its finisher, a CTA only waits for later CTAs, and the plan
takes stream-K where the model says it pays. The GPU tests run the kernels on these schedules."""
from __future__ import annotations

import itertools

import pytest

from fusedgemm.plan import stream_k
from fusedgemm.runtime import kernels

CASES = [(tiles, kb, sms) for tiles, kb, sms in itertools.product(
    (1, 5, 16, 64, 96, 131, 132, 133, 168, 263, 264, 265, 300, 3072), (1, 2, 3, 6, 16, 32, 112), (132, 114, 8))]


@pytest.mark.parametrize("tiles,kb,sms", CASES)
def test_schedule_covers_every_k_block_once(tiles, kb, sms):
    sk_tiles, ctas, sk_ctas = stream_k.split(tiles, kb, sms)
    assert 0 < ctas <= max(sms, 1) and sk_tiles <= tiles and sk_ctas <= ctas
    if sk_tiles:
        assert sk_ctas * sk_tiles * kb < 2 ** 31 and sk_tiles * kb >= sk_ctas  # no CTA has an empty range
        assert (tiles - sk_tiles) % ctas == 0  # the whole tiles are whole waves
        j = sk_ctas // sk_tiles
        assert j >= 2 and sk_ctas == j * sk_tiles and kb // j >= stream_k.MIN_PIECE_BLOCKS
    seen = {}
    partial_of = {}  # CTA -> tile of its partial piece
    for c in range(ctas):
        units = stream_k.units(c, ctas, tiles, sk_tiles, sk_ctas, kb)
        g = 0
        for i, (kind, t, k0, count, g0) in enumerate(units):
            assert g0 == g and count > 0 and 0 <= k0 and k0 + count <= kb, (c, units)
            g += count
            if kind != "whole" and sk_tiles:  # equal pieces: piece p of every split tile at the same K blocks
                j = sk_ctas // sk_tiles
                assert k0 == (c % j) * kb // j and k0 + count == (c % j + 1) * kb // j
            if kind == "partial":
                assert k0 > 0 and t >= tiles - sk_tiles and all(u[0] == "whole" for u in units[:i]) and \
                    partial_of.get(c) is None
                partial_of[c] = t
            else:
                assert k0 == 0 and (kind == "whole") == (count == kb)
            for k in range(k0, k0 + count):
                assert (t, k) not in seen, (t, k, c, seen[(t, k)])
                seen[(t, k)] = c
    assert len(seen) == tiles * kb
    # Each tile's first piece gathers exactly the partial pieces of its tile: the next CTAs, in order.
    gathered = []
    for c in range(ctas):
        units = stream_k.units(c, ctas, tiles, sk_tiles, sk_ctas, kb)
        for q in range(len(units) + 1):  # the epilogue warps' lean test agrees with the schedule
            want = units[q][1] - (tiles - sk_tiles) if q < len(units) and units[q][0] == "first" else -1
            assert stream_k.first_piece(q, c, ctas, tiles, sk_tiles, sk_ctas, kb) == want, (c, q, units)
        for kind, t, _k0, count, _g0 in units:
            n = stream_k.peers(c, sk_ctas, sk_tiles, kb, t - (tiles - sk_tiles))
            if kind != "first":
                continue
            peers = list(range(c + 1, c + 1 + n))
            assert peers and all(partial_of[p] == t for p in peers)
            assert count + sum(u[3] for p in peers for u in stream_k.units(p, ctas, tiles, sk_tiles, sk_ctas, kb)
                               if u[0] == "partial") == kb
            gathered += peers
    assert sorted(gathered) == sorted(partial_of)


def test_without_stream_k_the_schedule_is_the_persistent_one():
    """sk_tiles = 0 (whole waves, or a graph capture without a workspace): CTA c takes tiles c, c + P, ..."""
    for c in range(132):
        units = stream_k.units(c, 132, 400, 0, 0, 32)
        assert [u[1] for u in units] == list(range(c, 400, 132)) and {u[0] for u in units} == {"whole"}


def test_split_and_model():
    assert stream_k.split(64, 32, 132) == (64, 128, 128)  # o_proj M = 256: every tile in two pieces
    assert stream_k.split(96, 32, 132) == (0, 96, 0)  # qkv M = 256: 132 // 96 = 1 piece, nothing to split
    assert stream_k.split(448, 32, 132) == (52, 132, 104)  # gate_up M = 256: the 52 tiles of the last wave
    assert stream_k.split(3072, 32, 132) == (36, 132, 108)  # 36 tiles in 3 pieces
    assert stream_k.split(264, 32, 132) == (0, 132, 0)  # whole waves
    assert stream_k.split(16, 6, 132) == (0, 16, 0)  # pieces of 3 K blocks would be too short
    assert stream_k.split(16, 32, 132) == (16, 128, 128)  # 8 pieces of 4
    assert stream_k.pays(64, 32, 132) and stream_k.pays(448, 32, 132) and stream_k.pays(64, 112, 132)
    assert not stream_k.pays(96, 32, 132) and not stream_k.pays(264, 32, 132) and not stream_k.pays(3072, 32, 132)
    assert stream_k.workspace_bytes(132) == 4096 + 132 * 65536


def test_stream_k_configs_launch_their_base_kernels():
    from fusedgemm.epilogue.presets import spec_for_activation
    from fusedgemm.runtime.gemm_a8_spec import GemmA8Kernel

    configs = kernels.GEMM_A8_CONFIGS
    assert "kp128n128" not in configs  # three 40-register epilogue warps: no stream-K paths (kStreamK)
    for name, base in (("ks128n128", "s128n128"),):
        cfg = configs[name]
        assert cfg.stream_k and cfg.kernel == base and not configs[base].stream_k
        assert cfg.smem == configs[base].smem and cfg.warps == configs[base].warps and cfg.persistent
        spec = GemmA8Kernel("sm_90a", name, "fp8", "bf16", spec_for_activation("silu"))
        assert spec == GemmA8Kernel("sm_90a", base, "fp8", "bf16", spec_for_activation("silu"))
    names = kernels.gemm_a8_kernel_names("gemm_a8_sm90")
    assert not any(n.endswith("ks128n128") for n in names)
