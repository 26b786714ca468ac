"""A CPU model of each arch's MMA fragment mapping, driven by the preshuffled byte layout.

This stands in for the hardware we cannot run (gfx942, gfx950) and cross-checks the NVIDIA mapping: it
replays what gemm_a8's kernel template does lane by lane (the addresses each lane loads, how the loaded
16-byte vectors become MMA registers, how accumulator registers map to output elements) and hands the
registers to a model of the MMA instruction written from the vendor's published operand layouts. If the
preshuffle addressing, the lane maps or the register packing were wrong, the product would be wrong.

Instruction models (operand element -> (lane, byte) as the ISA documents define them):
  sm90  mma.sync m16n8k32 (e4m3 / s8): g = lane / 4, t = lane % 4
        A reg r byte i: row g + 8*(r % 2), k = 4t + i + 16*(r // 2);  B reg r byte i: k = 4t + i + 16r, n = g
        C reg r: row g + 8*(r // 2), col 2t + r % 2
  CDNA  v_mfma 16x16xK (fp8 / i8), wave64: A lane l byte i: row l % 16, k = (K/4)*(l // 16) + i (B mirrored:
        col l % 16); D lane l reg e: row 4*(l // 16) + e, col l % 16. K = 32 on gfx942; 128 (fp8, f8f6f4) and
        64 (i8) on gfx950.
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
    """a_regs, b_regs [64 lanes, kpl bytes] -> D contribution [64 lanes, 4 regs] for v_mfma_*_16x16x(4*kpl)."""
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
    # (A frag values [lanes, vecs, 16], B frag values [lanes, vecs, 16]) -> acc contribution [lanes, acc_per_lane]
    mma: Callable[[np.ndarray, np.ndarray], np.ndarray]


def _sm90_mma(fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
    acc = np.zeros((32, 8))
    for h in range(2):
        for kh in range(2):
            w = lambda frag, v, word: frag[:, v, 4 * word: 4 * word + 4]
            a_regs = np.stack([w(fa, 0, 2 * kh), w(fa, 1, 2 * kh), w(fa, 0, 2 * kh + 1), w(fa, 1, 2 * kh + 1)], 1)
            b_regs = np.stack([w(fb, h, 2 * kh), w(fb, h, 2 * kh + 1)], 1)
            acc[:, 4 * h: 4 * h + 4] += sm90_mma_m16n8k32(a_regs, b_regs)
    return acc


def _gfx942_mma(fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
    # Two MFMA 16x16x32: the low 8 bytes of the lane's vector, then the high 8 bytes.
    return sum(cdna_mfma_16x16(fa[:, 0, 8 * h: 8 * h + 8], fb[:, 0, 8 * h: 8 * h + 8]) for h in range(2))


def _gfx950_mma(fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
    # One MFMA over all the lane's vectors concatenated (32 bytes for 16x16x128 fp8, 16 for 16x16x64 i8).
    return cdna_mfma_16x16(fa.reshape(64, -1), fb.reshape(64, -1))


_CDNA_COMMON = dict(warp_size=64, rows_per_lane=1, lane_row=lambda l, i: l % 16, acc_per_lane=4,
                    acc_row=lambda l, e: 4 * (l // 16) + e, acc_col=lambda l, e: l % 16)

ATOMS: dict[tuple[str, str], AtomModel] = {}
for _kind in ("fp8", "int8"):
    ATOMS[("sm_90a", _kind)] = AtomModel(
        "sm90", 32, 4, 2, 1, lambda l, i: l // 4 + 8 * i, lambda l, j: l % 4, 8,
        lambda l, e: l // 4 + 8 * ((e >> 1) & 1), lambda l, e: 8 * (e >> 2) + 2 * (l % 4) + (e & 1), _sm90_mma)
    ATOMS[("gfx942", _kind)] = AtomModel("gfx942", chunks_per_step=4, chunks_per_lane=1,
                                         lane_chunk=lambda l, j: l // 16, mma=_gfx942_mma, **_CDNA_COMMON)
ATOMS[("gfx950", "fp8")] = AtomModel("gfx950-fp8", chunks_per_step=8, chunks_per_lane=2,
                                     lane_chunk=lambda l, j: 2 * (l // 16) + j, mma=_gfx950_mma, **_CDNA_COMMON)
ATOMS[("gfx950", "int8")] = AtomModel("gfx950-int8", chunks_per_step=4, chunks_per_lane=1,
                                      lane_chunk=lambda l, j: l // 16, mma=_gfx950_mma, **_CDNA_COMMON)


# ---- the kernel template, replayed ------------------------------------------------------------------------------
def simulate_gemm_a8(atom: AtomModel, a_bytes: np.ndarray, b_shuffled_bytes: np.ndarray, decode: Callable,
                     M: int, N: int, K: int, tiles_m: int = 1, tiles_n: int = 1) -> np.ndarray:
    """Replay gemm_a8_tile's loads, MMAs and output mapping for one warp per (tiles_m*16) x (tiles_n*16)
    output tile. a_bytes: [M*K] uint8 row-major; b_shuffled_bytes: [N*K] uint8 in the preshuffled layout;
    decode: uint8 array -> float values. Returns the fp32/int accumulator [M, N] (no epilogue)."""
    num_chunks = K // 16
    out = np.full((M, N), np.nan)
    lanes = range(atom.warp_size)
    nvec = atom.rows_per_lane * atom.chunks_per_lane
    for m_warp in range(0, M, 16 * tiles_m):
        for n_warp in range(0, N, 16 * tiles_n):
            acc = np.zeros((tiles_m, tiles_n, atom.warp_size, atom.acc_per_lane))
            for c0 in range(0, num_chunks, atom.chunks_per_step):
                fa = np.zeros((tiles_m, atom.warp_size, nvec, 16))
                fb = np.zeros((tiles_n, atom.warp_size, nvec, 16))
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
                                    fa[tm, lane, v] = decode(a_bytes[row * K + 16 * chunk: row * K + 16 * chunk + 16])
                            for tn in range(tiles_n):
                                n_block = n_warp // 16 + tn
                                if 16 * n_block < N:
                                    off = n_block * 16 * K + 256 * chunk + 16 * r
                                    fb[tn, lane, v] = decode(b_shuffled_bytes[off: off + 16])
                for tm in range(tiles_m):
                    for tn in range(tiles_n):
                        acc[tm, tn] += atom.mma(fa[tm], fb[tn])
            for tm in range(tiles_m):
                for tn in range(tiles_n):
                    for lane in lanes:
                        for e in range(atom.acc_per_lane):
                            row = m_warp + 16 * tm + atom.acc_row(lane, e)
                            col = n_warp + 16 * tn + atom.acc_col(lane, e)
                            if row < M and col < N:
                                if not np.isnan(out[row, col]):
                                    raise AssertionError(f"output ({row}, {col}) written twice")
                                out[row, col] = acc[tm, tn, lane, e]
    return out
