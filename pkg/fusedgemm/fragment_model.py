"""A CPU model of each arch's MMA fragment mapping, driven by the bytes the kernel loads.

This stands in for the hardware we cannot run (gfx942, gfx950) and cross-checks the NVIDIA mapping: it
replays what the kernel template portable_gemm_tile (portable_gemm.hpp: gemm_a8 and, on AMD, matmul_fused) does lane by
lane (the addresses each lane loads: A row-major, B preshuffled (8-bit kinds) or row-major (bf16 / fp16 /
tf32); how the loaded 16-byte vectors become MMA registers; how accumulator registers map to output
elements) and hands the registers to a model of the MMA instruction written from the vendor's published
operand layouts. If the addressing, the masking, the lane maps or the register packing were wrong, the
product would be wrong (or a read would fall outside the operands: the model raises).

Instruction models (operand element -> (lane, register slot) as the ISA documents define them):
  sm90  mma.sync m16n8k32 (e4m3 / s8): g = lane / 4, t = lane % 4
        A reg r byte i: row g + 8*(r % 2), k = 4t + i + 16*(r // 2);  B reg r byte i: k = 4t + i + 16r, n = g
        C reg r: row g + 8*(r // 2), col 2t + r % 2
  CDNA  v_mfma 16x16xK, wave64, kpl = K / 4 values per lane: A lane l value i: row l % 16, k = kpl*(l // 16) + i
        (B mirrored: col l % 16); D lane l reg e: row 4*(l // 16) + e, col l % 16. Per lane and MFMA:
          gfx942  fp8/i8 16x16x32: 8 bytes   bf16/f16 16x16x16: 4 values   xf32 16x16x8: 2 fp32
          gfx950  f8f6f4 16x16x128: 32 bytes   i8 16x16x64: 16 bytes   bf16/f16 16x16x32: 8 values
                  f32 16x16x4: 1 fp32 (gfx950 has no xf32: its Tf32 kind runs exact fp32)
        The model multiplies in fp64: xf32's TF32 rounding of the operands is not modelled (tests feed values
        that TF32 holds exactly).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np


# ---- instruction models ----------------------------------------------------------------------------------------
def sm90_mma_m16n8k32(a_regs: np.ndarray, b_regs: np.ndarray) -> np.ndarray:
    """a_regs [32 lanes, 4 regs, 4 bytes], b_regs [32, 2, 4] (values) -> C contribution [32 lanes, 4 regs]."""
    A = np.zeros((16, 32))
    B = np.zeros((32, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r in range(4):
            for i in range(4):
                A[g + 8 * (r % 2), 4 * t + i + 16 * (r // 2)] = a_regs[lane, r, i]
        for r in range(2):
            for i in range(4):
                B[4 * t + i + 16 * r, g] = b_regs[lane, r, i]
    C = A @ B
    out = np.zeros((32, 4))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r in range(4):
            out[lane, r] = C[g + 8 * (r // 2), 2 * t + r % 2]
    return out


def cdna_mfma_16x16(a_regs: np.ndarray, b_regs: np.ndarray) -> np.ndarray:
    """a_regs, b_regs [64 lanes, kpl values] -> D contribution [64 lanes, 4 regs] for v_mfma_*_16x16x(4*kpl)."""
    kpl = a_regs.shape[1]
    A = np.zeros((16, 4 * kpl))
    B = np.zeros((4 * kpl, 16))
    for lane in range(64):
        A[lane % 16, kpl * (lane // 16): kpl * (lane // 16 + 1)] = a_regs[lane]
        B[kpl * (lane // 16): kpl * (lane // 16 + 1), lane % 16] = b_regs[lane]
    D = A @ B
    return np.array([[D[4 * (lane // 16) + e, lane % 16] for e in range(4)] for lane in range(64)])


# ---- atoms: the kernel's lane maps and register packing (mirrors hip_src/include/fusedgemm/arch/*.hpp) ----------
@dataclasses.dataclass(frozen=True)
class AtomModel:
    name: str
    warp_size: int
    chunks_per_step: int
    rows_per_lane: int
    chunks_per_lane: int
    lane_row: Callable[[int, int], int]
    lane_chunk: Callable[[int, int], int]
    acc_per_lane: int
    acc_row: Callable[[int, int], int]
    acc_col: Callable[[int, int], int]
    # (A frag values [lanes, vecs, 16 / elem_bytes], B frag values, the same) -> acc contribution
    # [lanes, acc_per_lane]
    mma: Callable[[np.ndarray, np.ndarray], np.ndarray]
    # Paired epilogues (gate, up): the lane ^ pair_lane_xor holds column acc_col + 1, same rows (kPairLaneXor of
    # the CDNA atoms, which hold one column per lane); None: a lane's own accumulators come in column pairs
    # (sm90 mma.sync: kStoreVec = 2).
    pair_lane_xor: int | None = None


def _sm90_mma(fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
    acc = np.zeros((32, 8))
    for h in range(2):
        for kh in range(2):
            w = lambda frag, v, word: frag[:, v, 4 * word: 4 * word + 4]
            a_regs = np.stack([w(fa, 0, 2 * kh), w(fa, 1, 2 * kh), w(fa, 0, 2 * kh + 1), w(fa, 1, 2 * kh + 1)], 1)
            b_regs = np.stack([w(fb, h, 2 * kh), w(fb, h, 2 * kh + 1)], 1)
            acc[:, 4 * h: 4 * h + 4] += sm90_mma_m16n8k32(a_regs, b_regs)
    return acc


def _cdna_mma(parts: int, mfma_k: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The atom's mma: the lane's vectors, concatenated, split into `parts` consecutive runs of values, run i
    the operand of MFMA i (v_mfma_*_16x16x<mfma_k>: mfma_k / 4 values per lane)."""
    def mma(fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
        a, b = fa.reshape(64, -1), fb.reshape(64, -1)
        n = a.shape[1] // parts
        if n * parts != a.shape[1] or 4 * n != mfma_k:
            raise AssertionError(f"{a.shape[1]} values per lane do not make {parts} x 16x16x{mfma_k} MFMAs")
        return sum(cdna_mfma_16x16(a[:, n * i: n * (i + 1)], b[:, n * i: n * (i + 1)]) for i in range(parts))
    return mma


_CDNA_COMMON = dict(warp_size=64, rows_per_lane=1, lane_row=lambda l, i: l % 16, acc_per_lane=4,
                    acc_row=lambda l, e: 4 * (l // 16) + e, acc_col=lambda l, e: l % 16, pair_lane_xor=1)
# One 16-byte chunk per lane, chunk l / 16 of the 4 in a step (every CDNA atom but gfx950's fp8).
_CDNA_CHUNK = dict(chunks_per_step=4, chunks_per_lane=1, lane_chunk=lambda l, j: l // 16, **_CDNA_COMMON)

# InTraits<In> (platform.hpp): element bytes and whether B comes preshuffled (else row-major [N, K]).
IN_TRAITS: dict[str, dict] = {
    "fp8": dict(elem_bytes=1, preshuffled_b=True), "int8": dict(elem_bytes=1, preshuffled_b=True),
    "bf16": dict(elem_bytes=2, preshuffled_b=False), "fp16": dict(elem_bytes=2, preshuffled_b=False),
    "tf32": dict(elem_bytes=4, preshuffled_b=False),
}

ATOMS: dict[tuple[str, str], AtomModel] = {}
for _kind in ("fp8", "int8"):
    ATOMS[("sm_90a", _kind)] = AtomModel(
        "sm90", 32, 4, 2, 1, lambda l, i: l // 4 + 8 * i, lambda l, j: l % 4, 8,
        lambda l, e: l // 4 + 8 * ((e >> 1) & 1), lambda l, e: 8 * (e >> 2) + 2 * (l % 4) + (e & 1), _sm90_mma)
# gfx942: 8 bytes per lane per MFMA, so a chunk is two MFMAs (low half, high half) for every kind.
for _kind, _k in (("fp8", 32), ("int8", 32), ("bf16", 16), ("fp16", 16), ("tf32", 8)):
    ATOMS[("gfx942", _kind)] = AtomModel(f"gfx942-{_kind}", mma=_cdna_mma(2, _k), **_CDNA_CHUNK)
ATOMS[("gfx950", "fp8")] = AtomModel("gfx950-fp8", chunks_per_step=8, chunks_per_lane=2,
                                     lane_chunk=lambda l, j: 2 * (l // 16) + j, mma=_cdna_mma(1, 128), **_CDNA_COMMON)
# gfx950: one MFMA per chunk (i8 16x16x64, bf16 / f16 16x16x32), but four for tf32 (exact f32 16x16x4).
for _kind, _parts, _k in (("int8", 1, 64), ("bf16", 1, 32), ("fp16", 1, 32), ("tf32", 4, 4)):
    ATOMS[("gfx950", _kind)] = AtomModel(f"gfx950-{_kind}", mma=_cdna_mma(_parts, _k), **_CDNA_CHUNK)


# ---- the kernel template, replayed ------------------------------------------------------------------------------
def simulate_portable_gemm(atom: AtomModel, a_bytes: np.ndarray, b_bytes: np.ndarray, decode: Callable,
                     M: int, N: int, K: int, tiles_m: int = 1, tiles_n: int = 1, *, elem_bytes: int = 1,
                     preshuffled_b: bool = True, paired: bool = False) -> np.ndarray:
    """Replay portable_gemm_tile's loads, MMAs and output mapping for one warp per (tiles_m*16) x (tiles_n*16)
    output tile. K counts elements of elem_bytes bytes (IN_TRAITS[kind] gives elem_bytes and preshuffled_b).
    a_bytes: [M*K*elem_bytes] uint8, A row-major; b_bytes: [N*K*elem_bytes] uint8, B in the preshuffled
    (16,16) layout (1-byte elements) or row-major [N, K]; decode: 16 uint8 -> 16 / elem_bytes float values.
    Returns the accumulator [M, N] (no epilogue). paired: replay a paired epilogue's store instead (portable_gemm.hpp
    store_tile with Epi::kPairs): each lane of an even column takes its partner's value by the lane exchange, and
    the result is [M, N / 2, 2] of (gate, up) = (column 2j, column 2j + 1) pairs as the store sees them."""
    row_bytes = K * elem_bytes
    if row_bytes % 16 or (preshuffled_b and (elem_bytes != 1 or N % 16)) or N % 8:
        raise ValueError(f"unsupported shape: K={K} x {elem_bytes} bytes, N={N}, preshuffled_b={preshuffled_b}")
    if a_bytes.size != M * row_bytes or b_bytes.size != N * row_bytes:
        raise ValueError("operand sizes do not match M, N, K")
    num_chunks = row_bytes // 16
    vals = 16 // elem_bytes

    def load(buf: np.ndarray, off: int) -> np.ndarray:
        if off < 0 or off + 16 > buf.size:
            raise AssertionError(f"16-byte load at {off} outside an operand of {buf.size} bytes")
        return decode(buf[off: off + 16])

    out = np.full((M, N // 2, 2) if paired else (M, N), np.nan)
    lanes = range(atom.warp_size)
    nvec = atom.rows_per_lane * atom.chunks_per_lane
    for m_warp in range(0, M, 16 * tiles_m):
        for n_warp in range(0, N, 16 * tiles_n):
            acc = np.zeros((tiles_m, tiles_n, atom.warp_size, atom.acc_per_lane))
            for c0 in range(0, num_chunks, atom.chunks_per_step):
                fa = np.zeros((tiles_m, atom.warp_size, nvec, vals))
                fb = np.zeros((tiles_n, atom.warp_size, nvec, vals))
                for lane in lanes:
                    for j in range(atom.chunks_per_lane):
                        chunk = c0 + atom.lane_chunk(lane, j)
                        if chunk >= num_chunks:
                            continue
                        for i in range(atom.rows_per_lane):
                            v = i * atom.chunks_per_lane + j
                            r = atom.lane_row(lane, i)
                            for tm in range(tiles_m):
                                row = m_warp + 16 * tm + r
                                if row < M:
                                    fa[tm, lane, v] = load(a_bytes, row * row_bytes + 16 * chunk)
                            for tn in range(tiles_n):
                                n_block = n_warp // 16 + tn
                                if preshuffled_b:  # masked by 16-row blocks
                                    if 16 * n_block < N:
                                        fb[tn, lane, v] = load(b_bytes, n_block * 16 * K + 256 * chunk + 16 * r)
                                elif 16 * n_block + r < N:  # row-major: masked row by row, addressed as A
                                    fb[tn, lane, v] = load(b_bytes, (16 * n_block + r) * row_bytes + 16 * chunk)
                for tm in range(tiles_m):
                    for tn in range(tiles_n):
                        acc[tm, tn] += atom.mma(fa[tm], fb[tn])
            for tm in range(tiles_m):
                for tn in range(tiles_n):
                    if paired:
                        _store_pairs(atom, acc[tm, tn], out, m_warp + 16 * tm, n_warp + 16 * tn, M, N)
                        continue
                    for lane in lanes:
                        for e in range(atom.acc_per_lane):
                            row = m_warp + 16 * tm + atom.acc_row(lane, e)
                            col = n_warp + 16 * tn + atom.acc_col(lane, e)
                            if row < M and col < N:
                                if not np.isnan(out[row, col]):
                                    raise AssertionError(f"output ({row}, {col}) written twice")
                                out[row, col] = acc[tm, tn, lane, e]
    return out


def _store_pairs(atom: AtomModel, acc: np.ndarray, out: np.ndarray, m0: int, n0: int, M: int, N: int) -> None:
    """A paired store of one 16x16 tile acc [lanes, acc_per_lane]: exchange with lane ^ pair_lane_xor (every
    lane), then the even column's lane stores (its value, the partner's) at output column col / 2 (portable_gemm.hpp),
    or, with pair_lane_xor None, a lane's accumulator pairs (e, e + 1) are the (gate, up) pair."""
    for lane in range(atom.warp_size):
        for e in range(atom.acc_per_lane):
            row, col = m0 + atom.acc_row(lane, e), n0 + atom.acc_col(lane, e)
            if atom.pair_lane_xor is None:
                if e % 2:
                    continue
                pair = (acc[lane, e], acc[lane, e + 1])
            else:
                pair = (acc[lane, e], acc[lane ^ atom.pair_lane_xor, e])
            if col % 2 or row >= M or col >= N:
                continue
            if not np.isnan(out[row, col // 2, 0]):
                raise AssertionError(f"output ({row}, {col // 2}) written twice")
            out[row, col // 2] = pair


# ---- sm90 wgmma D fragment (sm90_gemm_common.hpp acc_row / acc_col) -----------------------------------------
def sm90_wgmma_acc_row(t: int, j: int) -> int:
    """Row of accumulator element j of consumer thread t (within its warpgroup) in an m64nN wgmma D tile."""
    return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((j >> 1) & 1)


def sm90_wgmma_acc_col(t: int, j: int) -> int:
    return 8 * (j >> 2) + 2 * (t & 3) + (j & 1)


SM90_SWAPPED_PAIR_XOR = 4  # store_swapped: the thread holding D row acc_row + 1 (an even row's up), same column
