"""The CPU model of each arch's MMA fragment mapping reproduces A . B^T from the bytes the kernel loads: the
preshuffled 8-bit B of gemm_a8 and, on AMD, the row-major bf16 / fp16 / tf32 B of matmul_fused (ragged N too).

This is what stands in for AMD hardware: see fusedgemm/fragment_model.py for the instruction models."""
import dataclasses

import numpy as np
import pytest
import torch

import fusedgemm as fg
from fusedgemm.fragment_model import ATOMS, IN_TRAITS, simulate_portable_gemm

PLAIN_B = sorted(key for key in ATOMS if not IN_TRAITS[key[1]]["preshuffled_b"])


def _decoder(dtype):
    """16 bytes -> their elements as float64 (little-endian 2- and 4-byte elements)."""
    if dtype == torch.int8:
        return lambda u8: u8.view(np.int8).astype(np.float64)
    if dtype == torch.bfloat16:  # bf16 is the top half of an fp32
        return lambda u8: (u8.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in (torch.float16, torch.float32):
        np_dtype = np.float16 if dtype == torch.float16 else np.float32
        return lambda u8: u8.view(np_dtype).astype(np.float64)
    table = torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float64).numpy()
    return lambda u8: table[u8]


def _finite_fp8(shape, dtype):
    x = (torch.randn(shape) * 2).to(dtype)
    return torch.where(torch.isfinite(x.float()), x.float(), torch.zeros(())).to(dtype)


def _random(kind, shape, arch):
    """Random elements of `kind` (tf32: fp32 values with TF32's 10 mantissa bits, which xf32 reads exactly)."""
    if kind == "int8":
        return torch.randint(-128, 128, shape, dtype=torch.int8)
    if kind == "fp8":
        return _finite_fp8(shape, fg.FP8_DTYPE_FOR_ARCH[arch])
    x = torch.randn(shape) * 4
    if kind == "tf32":
        return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)
    return x.to(torch.bfloat16 if kind == "bf16" else torch.float16)


def _bytes(t):
    return t.contiguous().view(torch.uint8).reshape(-1).numpy()


def _simulate(arch, kind, a, w, tiles=(1, 1), atom=None):
    m, k = a.shape
    n = w.shape[0]
    traits = IN_TRAITS[kind]
    b = fg.preshuffle(w).data if traits["preshuffled_b"] else w
    return simulate_portable_gemm(atom or ATOMS[(arch, kind)], _bytes(a), _bytes(b), _decoder(a.dtype), m, n, k, *tiles,
                            **traits)


def _reference(a, w):
    return a.to(torch.float64).numpy() @ w.to(torch.float64).numpy().T


# (m, n, k_bytes, tiles): K = k_bytes / element size, so every kind sees the same chunk counts: one full step,
# a partial last step, several steps with a tail, a single chunk.
SHAPES = [(16, 16, 64, (1, 1)), (7, 48, 160, (1, 2)), (33, 32, 272, (2, 1)), (5, 16, 16, (1, 1))]
# Row-major B only: N % 16 == 8, so the last 16-row block of B straddles N (rows past N load nothing).
RAGGED_N = [(7, 40, 144, (1, 2)), (18, 8, 48, (1, 1)), (33, 24, 400, (2, 2))]


@pytest.mark.parametrize("arch,kind", sorted(ATOMS))
@pytest.mark.parametrize("m,n,k_bytes,tiles", SHAPES)
def test_model_reproduces_gemm(arch, kind, m, n, k_bytes, tiles, seed):
    k = k_bytes // IN_TRAITS[kind]["elem_bytes"]
    a, w = _random(kind, (m, k), arch), _random(kind, (n, k), arch)
    got = _simulate(arch, kind, a, w, tiles)
    assert not np.isnan(got).any(), "every output element written"
    np.testing.assert_allclose(got, _reference(a, w), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("arch,kind", PLAIN_B)
@pytest.mark.parametrize("m,n,k_bytes,tiles", RAGGED_N)
def test_model_row_major_b_with_ragged_n(arch, kind, m, n, k_bytes, tiles, seed):
    """matmul_fused's B: row-major [N, K], masked row by row; N % 16 == 8 (no load outside A or B: the model
    raises on one)."""
    k = k_bytes // IN_TRAITS[kind]["elem_bytes"]
    a, w = _random(kind, (m, k), arch), _random(kind, (n, k), arch)
    got = _simulate(arch, kind, a, w, tiles)
    assert got.shape == (m, n) and not np.isnan(got).any(), "every output element written, none past N"
    np.testing.assert_allclose(got, _reference(a, w), rtol=1e-12, atol=1e-9)


def test_model_detects_a_wrong_layout(seed):
    """The check can fail: reading B unshuffled (or with a wrong lane map) gives a wrong product."""
    a = torch.randint(-128, 128, (16, 64), dtype=torch.int8)
    w = torch.randint(-128, 128, (32, 64), dtype=torch.int8)
    want = _reference(a, w)
    unshuffled = _bytes(w)
    for key in [("sm_90a", "int8"), ("gfx942", "int8"), ("gfx950", "int8")]:
        got = simulate_portable_gemm(ATOMS[key], _bytes(a), unshuffled, _decoder(torch.int8), 16, 32, 64)
        assert not np.allclose(got, want)


@pytest.mark.parametrize("arch,kind", PLAIN_B)
def test_model_detects_a_wrong_row_major_path(arch, kind, seed):
    """The check can fail for the row-major kinds: B's values meeting A's values of another k (B's lane
    vector with its halves swapped, or B's lanes reading the next chunk) give wrong products."""
    eb = IN_TRAITS[kind]["elem_bytes"]
    a, w = _random(kind, (16, 64 // eb), arch), _random(kind, (32, 64 // eb), arch)
    want = _reference(a, w)
    atom = ATOMS[(arch, kind)]
    good = atom.mma

    def halves_swapped(fa, fb):  # fb [lanes, vecs, values]
        vals = fb.shape[-1]
        return good(fa, np.concatenate([fb[..., vals // 2:], fb[..., :vals // 2]], axis=-1))

    def next_chunk(fa, fb):  # lane l's B is lane l + 16's: same row, the next chunk
        return good(fa, np.roll(fb, -16, axis=-3))

    for wrong in (halves_swapped, next_chunk):
        got = _simulate(arch, kind, a, w, atom=dataclasses.replace(atom, mma=wrong))
        assert not np.allclose(got, want), wrong.__name__


# ---- paired epilogues (gate, up): where each lane finds its column pair ---------------------------------------
@pytest.mark.parametrize("arch,kind", sorted(ATOMS))
@pytest.mark.parametrize("m,n,k_bytes,tiles", SHAPES[:3])
def test_model_paired_store_gets_column_pairs(arch, kind, m, n, k_bytes, tiles, seed):
    """Replaying store_tile's paired path (lane exchange by pair_lane_xor on CDNA, a lane's own pairs on sm_90a)
    hands every (column 2j, column 2j + 1) pair of the product, at the right rows, to exactly one store."""
    k = k_bytes // IN_TRAITS[kind]["elem_bytes"]
    a, w = _random(kind, (m, k), arch), _random(kind, (n, k), arch)
    traits = IN_TRAITS[kind]
    b = fg.preshuffle(w).data if traits["preshuffled_b"] else w
    got = simulate_portable_gemm(ATOMS[(arch, kind)], _bytes(a), _bytes(b), _decoder(a.dtype), m, n, k, *tiles,
                           **traits, paired=True)
    ref = _reference(a, w)
    assert not np.isnan(got).any(), "every pair stored"
    np.testing.assert_allclose(got[..., 0], ref[:, 0::2], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got[..., 1], ref[:, 1::2], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("arch,kind", sorted(k for k in ATOMS if ATOMS[k].pair_lane_xor is not None))
def test_cdna_partner_lane_holds_the_next_column(arch, kind):
    """kPairLaneXor: for every lane of an even column and every accumulator, lane ^ 1 holds column + 1, same row."""
    atom = ATOMS[(arch, kind)]
    x = atom.pair_lane_xor
    for lane in range(atom.warp_size):
        for e in range(atom.acc_per_lane):
            col = atom.acc_col(lane, e)
            if col % 2 == 0:
                assert atom.acc_col(lane ^ x, e) == col + 1
                assert atom.acc_row(lane ^ x, e) == atom.acc_row(lane, e)


def test_cdna_wrong_partner_is_caught(seed):
    """The paired replay can fail: a partner lane of the wrong distance gives wrong up values."""
    a, w = _random("bf16", (16, 32), "gfx942"), _random("bf16", (16, 32), "gfx942")
    atom = dataclasses.replace(ATOMS[("gfx942", "bf16")], pair_lane_xor=16)
    got = simulate_portable_gemm(atom, _bytes(a), _bytes(w), _decoder(a.dtype), 16, 16, 32, elem_bytes=2,
                           preshuffled_b=False, paired=True)
    assert not np.allclose(got[..., 1], _reference(a, w)[:, 1::2])


def test_sm90_swapped_partner_thread():
    """store_swapped (kSwapAB): D rows are weight rows (GEMM columns). For every consumer thread t whose row is
    even (t & 4 == 0), thread t ^ 4 -- the same warp -- holds row + 1 at the same D column (activation row), for
    every accumulator element; odd rows are exactly the threads with t & 4."""
    from fusedgemm.fragment_model import SM90_SWAPPED_PAIR_XOR as X, sm90_wgmma_acc_col as col, \
        sm90_wgmma_acc_row as row

    for t in range(128):
        assert (t ^ X) // 32 == t // 32, "a shuffle stays in the warp"
        for j in range(16):  # m64n16: 8 per MMA; the layout repeats every 4 elements along j
            assert (row(t, j) % 2 == 0) == (t & X == 0)
            if t & X == 0:
                assert row(t ^ X, j) == row(t, j) + 1 and col(t ^ X, j) == col(t, j)
