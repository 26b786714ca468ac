"""Matrix-core (v_mfma_*) semantics of CDNA3 (gfx942) and CDNA4 (gfx950), on register dwords, vectorised in numpy.

    execute(name, a, b, c, *, arch, cbsz=0, abid=0, blgp=0, op_sel=0, neg=0) -> D
a: uint32 [64, n_a], b: uint32 [64, n_b] (the source VGPR/AGPR dwords of each lane of the wave64), c: uint32
[64, n_c] (fp32 or int32 bit patterns). Returns D, uint32 [64, n_c]. Inputs are never modified.

Operand layout (one rule for every dense MFMA here; the CDNA3 / CDNA4 ISA guides' chapter "Matrix Arithmetic
Instructions" describe it and AMD's matrix instruction calculator, github.com/ROCm/amd_matrix_instruction_calculator,
prints it per instruction; tests/test_emulator_mfma.py checks this module against the calculator's formulas for
every CDNA3 mnemonic and, the calculator having no CDNA4 tables, the gfx950-only forms against IREE's MMA layout
tables (iree-org/iree IREEGPUAttrs.cpp getSingleSubgroupLayout)):
  M x N x K, `blocks` independent blocks, each lane holding V = M*K*blocks/64 values of A (and of B):
  * kpl = V values per lane; the value slot v of a lane sits in bits [bits*v, bits*(v+1)) of the lane's dwords
    concatenated little-endian (dword r = bits 32r .. 32r+31), bits the element width (32 / 16 / 8 / 6 / 4).
  * A[b][i][k] is in lane  i + M*b + M*blocks*(k // kpl),  slot k % kpl.
    B[b][k][j] is in lane  j + N*b + N*blocks*(k // kpl),  slot k % kpl.          (M == N for every MFMA)
  * D[b][i][j] (and C):  M = 4 (the 16-block 4x4 forms):  lane j + 4*b, register i.
      M = 16 / 32:  lane j + N*(g % (64/N)), register 4*(g // (64/N)) + i % 4 + (M*N/64)*b,  with g = i // 4,
      i.e. rows in groups of 4, the row groups striped over the lane groups first and then over registers
      (the "4-row groups" of the 32x32 layout: D[i][j] of 32x32 is in register 4*(i//8) + i%4, lane j + 32*((i//4)%2)).
  Modifiers (ISA "broadcast" controls; the calculator's semantics; only where the calculator lists them as
  supported for the instruction, else ValueError):
  * CBSZ / ABID (multi-block forms): block b reads A from block (b // 2^cbsz) * 2^cbsz + abid.
  * BLGP (multi-block forms and the single-block f32 forms): lane L of B reads the dwords of lane
      0: L   1: L % 32   2: 32 + L % 32   3: (L + 16) % 64   4..7: 16*(blgp - 4) + L % 16.
  * gfx950 f8f6f4 forms: CBSZ is A's format and BLGP is B's (0 fp8 e4m3, 1 bf8 e5m2, 2 fp6 e2m3, 3 bf6 e3m2,
    4 fp4 e2m1); the operand then holds 8 / 6 / 4 dwords per lane (32 values of 8 / 6 / 4 bits).
  * op_sel / neg: no MFMA this module implements takes them (neg is the f64 forms' and op_sel the scale
    forms' byte select, given here as scale_sel_a / scale_sel_b); non-zero -> ValueError.

Element formats: f32; xf32 (gfx942 only: fp32 dwords with the 13 low mantissa bits dropped, see
numerics.f32_to_xf32_truncate); f16 / bf16 (two per dword, element 2v in the low half); i8 (four per dword,
byte order = k order, signed); fp8 / bf8 (four per dword): e4m3fnuz / e5m2fnuz on gfx942, OCP e4m3fn / e5m2 on
gfx950 (also for the CDNA3-era v_mfma_*_fp8_* mnemonics there: MLIR's amdgpu dialect maps f8E4M3FN / f8E5M2 to
them on gfx950 and the FNUZ types on gfx942); fp6 / fp4 (f8f6f4 only; value v of a lane at bits [6v, 6v+6) /
[4v, 4v+4) of its 6 / 4 dwords taken as one little-endian bit stream -- the packing LLVM's <6 x i32> / <4 x i32>
operand types and the v_cvt_scalef32_pk32_*fp6* conversions imply; an assumption to confirm on hardware).

Numerics (what is modelled, and why):
  * Floating-point forms: every product A[i][k]*B[k][j] is formed exactly (every input format here, f32
    included, has products exact in float64); the K products of a block and C[i][j] are summed in float64 and
    the sum is rounded once to fp32 (RNE; overflow -> Inf; NaN -> 0x7FC00000). The CDNA3 / CDNA4 ISA documents
    specify neither the order nor the intermediate precision of an MFMA's internal reduction (only that the
    products are accumulated into the fp32 C/D), so no order is "the" hardware's; an exact sum rounded once is
    the most accurate instruction-level model and does not depend on an order this module would have to invent.
    The fp32 rounding of D between MFMAs, which is architecturally visible, is exact here. The float64 sum is
    itself exact unless the terms' magnitudes spread over more than 2^(53 - p) (p: significant bits of a product,
    8 for fp8, 22 for f16 / bf16, 48 for f32); where it is not, it differs from the exact sum by a float64
    rounding, far below the final fp32 one. Hardware may differ from this model in the last fp32 ulp; tests
    therefore use integer-valued inputs, for which every order gives the same exact result, so a layout error is
    an exact mismatch, never hidden by a tolerance.
  * Denormals: inputs and outputs are kept (the matrix cores do not flush on CDNA3/CDNA4; the MODE register's
    denormal controls are VALU-only).
  * Integer form: int8 x int8 products summed with C in int64 and wrapped to int32 (two's complement), exactly.
  * Scaled gfx950 forms (v_mfma_scale_*): each lane's E8M0 scale byte (scale_sel selects the byte of the lane's
    scale dword) multiplies the 32 values that lane holds (one scale per 32 K values of a row / column, as the
    OCP MX block size): 2^(e - 127), 0xFF -> NaN. The unscaled f8f6f4 form multiplies by 1.
    OPEN QUESTION: LLVM rewrites the scale intrinsic with constant-zero scale operands into the unscaled
    instruction (our gfx950 fp8 atom relies on that: it passes scale 0 and tests/test_build.py finds the unscaled
    mnemonic), which is only value-preserving if the hardware reads scale byte 0 as 2^0; AMD sources disagree
    (MLIR / rocMLIR / Triton treat 0 as "no scaling", CK-tile's tests use 127 as 2^0, as OCP E8M0 defines). This
    module follows OCP E8M0 for the scaled mnemonic; the kernels never execute it.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from . import numerics

__all__ = ["execute", "operand_dwords", "supported", "info", "MfmaInfo", "a_slot", "b_slot", "d_slot", "ARCHES"]

ARCHES = ("gfx942", "gfx950")
_BITS = {"f32": 32, "xf32": 32, "f16": 16, "bf16": 16, "i8": 8, "fp8": 8, "bf8": 8, "fp6": 6, "bf6": 6, "fp4": 4}
F8F6F4_FORMATS = {0: "fp8", 1: "bf8", 2: "fp6", 3: "bf6", 4: "fp4"}


@dataclasses.dataclass(frozen=True)
class MfmaInfo:
    name: str
    arches: frozenset
    m: int
    n: int
    k: int
    blocks: int
    a_type: str            # element format of A ("f8f6f4": chosen by cbsz)
    b_type: str            # element format of B ("f8f6f4": chosen by blgp)
    acc: str               # "f32" | "i32"
    cbsz_abid: bool = False  # broadcast modifiers supported
    blgp: bool = False       # B lane-group pattern supported
    scaled: bool = False     # v_mfma_scale_*: per-lane E8M0 scales

    def values_per_lane(self) -> int:
        return self.m * self.k * self.blocks // 64

    def c_dwords(self) -> int:
        return self.m * self.n * self.blocks // 64


def _build_table() -> tuple[dict[str, MfmaInfo], dict[str, str]]:
    both = frozenset(ARCHES)
    g942 = frozenset({"gfx942"})
    g950 = frozenset({"gfx950"})
    table: dict[str, MfmaInfo] = {}
    alias: dict[str, str] = {}

    def add(name, arches, m, n, k, blocks, at, bt, acc, *, cbsz=False, blgp=False, scaled=False, aliases=()):
        table[name] = MfmaInfo(name, arches, m, n, k, blocks, at, bt, acc, cbsz, blgp, scaled)
        for a in aliases:
            alias[a] = name

    # CDNA3 (gfx940 mnemonics, as the LLVM disassembler prints them for gfx942 / gfx950; the legacy gfx908 /
    # gfx90a spellings the assembler accepts are aliases). Shapes, register counts, modifier support: AMD matrix
    # instruction calculator, CDNA3 tables.
    add("v_mfma_f32_32x32x1_2b_f32", both, 32, 32, 1, 2, "f32", "f32", "f32", cbsz=True, blgp=True,
        aliases=("v_mfma_f32_32x32x1f32",))
    add("v_mfma_f32_16x16x1_4b_f32", both, 16, 16, 1, 4, "f32", "f32", "f32", cbsz=True, blgp=True,
        aliases=("v_mfma_f32_16x16x1f32",))
    add("v_mfma_f32_4x4x1_16b_f32", both, 4, 4, 1, 16, "f32", "f32", "f32", cbsz=True, blgp=True,
        aliases=("v_mfma_f32_4x4x1f32",))
    add("v_mfma_f32_32x32x2_f32", both, 32, 32, 2, 1, "f32", "f32", "f32", blgp=True,
        aliases=("v_mfma_f32_32x32x2f32",))
    add("v_mfma_f32_16x16x4_f32", both, 16, 16, 4, 1, "f32", "f32", "f32", blgp=True,
        aliases=("v_mfma_f32_16x16x4f32",))
    add("v_mfma_f32_16x16x8_xf32", g942, 16, 16, 8, 1, "xf32", "xf32", "f32")
    add("v_mfma_f32_32x32x4_xf32", g942, 32, 32, 4, 1, "xf32", "xf32", "f32")
    for t, legacy in (("f16", "f16"), ("bf16", "bf16_1k")):
        add(f"v_mfma_f32_32x32x4_2b_{t}", both, 32, 32, 4, 2, t, t, "f32", cbsz=True, blgp=True,
            aliases=(f"v_mfma_f32_32x32x4{legacy}",))
        add(f"v_mfma_f32_16x16x4_4b_{t}", both, 16, 16, 4, 4, t, t, "f32", cbsz=True, blgp=True,
            aliases=(f"v_mfma_f32_16x16x4{legacy}",))
        add(f"v_mfma_f32_4x4x4_16b_{t}", both, 4, 4, 4, 16, t, t, "f32", cbsz=True, blgp=True,
            aliases=(f"v_mfma_f32_4x4x4{legacy}",))
        add(f"v_mfma_f32_32x32x8_{t}", both, 32, 32, 8, 1, t, t, "f32", aliases=(f"v_mfma_f32_32x32x8{legacy}",))
        add(f"v_mfma_f32_16x16x16_{t}", both, 16, 16, 16, 1, t, t, "f32",
            aliases=(f"v_mfma_f32_16x16x16{legacy}",))
    add("v_mfma_i32_32x32x4_2b_i8", both, 32, 32, 4, 2, "i8", "i8", "i32", cbsz=True, blgp=True,
        aliases=("v_mfma_i32_32x32x4i8",))
    add("v_mfma_i32_16x16x4_4b_i8", both, 16, 16, 4, 4, "i8", "i8", "i32", cbsz=True, blgp=True,
        aliases=("v_mfma_i32_16x16x4i8",))
    add("v_mfma_i32_4x4x4_16b_i8", both, 4, 4, 4, 16, "i8", "i8", "i32", cbsz=True, blgp=True,
        aliases=("v_mfma_i32_4x4x4i8",))
    add("v_mfma_i32_32x32x16_i8", both, 32, 32, 16, 1, "i8", "i8", "i32")
    add("v_mfma_i32_16x16x32_i8", both, 16, 16, 32, 1, "i8", "i8", "i32")
    for at in ("fp8", "bf8"):
        for bt in ("fp8", "bf8"):
            add(f"v_mfma_f32_16x16x32_{at}_{bt}", both, 16, 16, 32, 1, at, bt, "f32")
            add(f"v_mfma_f32_32x32x16_{at}_{bt}", both, 32, 32, 16, 1, at, bt, "f32")
    # CDNA4 additions (gfx950; CDNA4 ISA and LLVM's gfx950 MC tests, llvm/test/MC/AMDGPU/mai-gfx950.s, for the
    # mnemonics; gfx950 has no xf32 MFMA). The double-K forms keep the single-block rule: twice the values per
    # lane in the same lane order (k = kpl * (lane // M) + slot), as AMD's CDNA4 matrix-core guide and
    # composable_kernel's gfx950 "k-reduction" MFMA descriptions (k_per_blk contiguous K per lane group) state.
    for t in ("f16", "bf16"):
        add(f"v_mfma_f32_16x16x32_{t}", g950, 16, 16, 32, 1, t, t, "f32")
        add(f"v_mfma_f32_32x32x16_{t}", g950, 32, 32, 16, 1, t, t, "f32")
    add("v_mfma_i32_16x16x64_i8", g950, 16, 16, 64, 1, "i8", "i8", "i32")
    add("v_mfma_i32_32x32x32_i8", g950, 32, 32, 32, 1, "i8", "i8", "i32")
    add("v_mfma_f32_16x16x128_f8f6f4", g950, 16, 16, 128, 1, "f8f6f4", "f8f6f4", "f32")
    add("v_mfma_f32_32x32x64_f8f6f4", g950, 32, 32, 64, 1, "f8f6f4", "f8f6f4", "f32")
    add("v_mfma_scale_f32_16x16x128_f8f6f4", g950, 16, 16, 128, 1, "f8f6f4", "f8f6f4", "f32", scaled=True)
    add("v_mfma_scale_f32_32x32x64_f8f6f4", g950, 32, 32, 64, 1, "f8f6f4", "f8f6f4", "f32", scaled=True)
    return table, alias


_TABLE, _ALIAS = _build_table()


def _check_arch(arch: str) -> None:
    if arch not in ARCHES:
        raise ValueError(f"unknown arch {arch!r}: the MFMA model knows {', '.join(ARCHES)}")


def supported(arch: str) -> list[str]:
    """Every mnemonic (LLVM disassembler spelling) this module executes on `arch`, sorted."""
    _check_arch(arch)
    return sorted(n for n, i in _TABLE.items() if arch in i.arches)


def info(name: str, arch: str) -> MfmaInfo:
    """The instruction's shape and formats; ValueError naming it and the arch if unknown or not on that arch."""
    _check_arch(arch)
    canon = _ALIAS.get(name, name)
    inf = _TABLE.get(canon)
    if inf is None:
        raise ValueError(f"unknown MFMA {name!r} on {arch} (the emulator's MFMA model has no such instruction)")
    if arch not in inf.arches:
        raise ValueError(f"{name!r} does not exist on {arch} (it is a {'/'.join(sorted(inf.arches))} instruction)")
    return inf


def _operand_types(inf: MfmaInfo, arch: str, cbsz: int, blgp: int) -> tuple[str, str]:
    if inf.a_type != "f8f6f4":
        return inf.a_type, inf.b_type
    if cbsz not in F8F6F4_FORMATS or blgp not in F8F6F4_FORMATS:
        raise ValueError(f"{inf.name} on {arch}: cbsz={cbsz} / blgp={blgp} are not f8f6f4 format codes (0..4)")
    return F8F6F4_FORMATS[cbsz], F8F6F4_FORMATS[blgp]


def operand_dwords(name: str, arch: str, cbsz: int = 0, blgp: int = 0) -> tuple[int, int, int]:
    """(n_a, n_b, n_c): dwords per lane of A, B and C/D."""
    inf = info(name, arch)
    at, bt = _operand_types(inf, arch, cbsz, blgp)
    v = inf.values_per_lane()
    return v * _BITS[at] // 32, v * _BITS[bt] // 32, inf.c_dwords()


# ---- layout ---------------------------------------------------------------------------------------------------
def a_slot(inf: MfmaInfo, block, i, k):
    """(lane, value slot) of A[block][i][k] (numpy-broadcastable ints). Slot v of a lane is bits
    [bits*v, bits*(v+1)) of its dwords; dword = bits*v // 32."""
    kpl = inf.values_per_lane()
    return i + inf.m * block + inf.m * inf.blocks * (k // kpl), k % kpl


def b_slot(inf: MfmaInfo, block, k, j):
    """(lane, value slot) of B[block][k][j]."""
    kpl = inf.values_per_lane()
    return j + inf.n * block + inf.n * inf.blocks * (k // kpl), k % kpl


def d_slot(inf: MfmaInfo, block, i, j):
    """(lane, register) of C/D[block][i][j]."""
    if inf.m == 4:
        return j + 4 * block, i
    groups = 64 // inf.n
    g = i // 4
    return j + inf.n * (g % groups), 4 * (g // groups) + i % 4 + (inf.m * inf.n // 64) * block


@functools.lru_cache(maxsize=None)
def _index_maps(name: str) -> tuple[np.ndarray, ...]:
    inf = _TABLE[name]
    b, i, k = np.meshgrid(np.arange(inf.blocks), np.arange(inf.m), np.arange(inf.k), indexing="ij")
    a_lane, a_v = a_slot(inf, b, i, k)                          # [blocks, M, K]
    b2, k2, j2 = np.meshgrid(np.arange(inf.blocks), np.arange(inf.k), np.arange(inf.n), indexing="ij")
    b_lane, b_v = b_slot(inf, b2, k2, j2)                       # [blocks, K, N]
    b3, i3, j3 = np.meshgrid(np.arange(inf.blocks), np.arange(inf.m), np.arange(inf.n), indexing="ij")
    d_lane, d_reg = d_slot(inf, b3, i3, j3)                     # [blocks, M, N]
    out = (a_lane, a_v, b_lane, b_v, d_lane, d_reg)
    for x in out:
        x.setflags(write=False)
    return out


def _unpack(dwords: np.ndarray, bits: int, count: int) -> np.ndarray:
    """[64, n] uint32 -> [64, count] codes of `bits` bits (little-endian bit stream per lane)."""
    d = dwords.astype(np.uint64)
    if bits == 32:
        return d[:, :count].astype(np.uint32)
    if 32 % bits == 0:
        per = 32 // bits
        shifts = (np.arange(per, dtype=np.uint64) * bits)
        vals = (d[:, :, None] >> shifts[None, None, :]) & ((1 << bits) - 1)
        return vals.reshape(d.shape[0], -1)[:, :count].astype(np.uint32)
    # 6-bit values straddle dwords: view the lane's dwords as one little-endian bit stream
    v = np.arange(count)
    lo_bit = v * bits
    w, s = lo_bit // 32, (lo_bit % 32).astype(np.uint64)
    lo = d[:, w] >> s
    hi_idx = np.minimum(w + 1, d.shape[1] - 1)
    hi = np.where((s + bits > 32)[None, :], d[:, hi_idx] << (np.uint64(32) - s), 0)
    return ((lo | hi) & ((1 << bits) - 1)).astype(np.uint32)


def _decode(codes: np.ndarray, fmt: str, arch: str) -> np.ndarray:
    """codes [64, V] -> float64 values (exact) or int64 for i8."""
    if fmt == "f32":
        return numerics.f32_bits_to_f32(codes).astype(np.float64)
    if fmt == "xf32":
        return numerics.f32_to_xf32_truncate(codes).astype(np.float64)
    if fmt == "f16":
        return numerics.f16_bits_to_f32(codes).astype(np.float64)
    if fmt == "bf16":
        return numerics.bf16_bits_to_f32(codes).astype(np.float64)
    if fmt == "i8":
        return codes.astype(np.uint8).view(np.int8).astype(np.int64)
    if fmt in ("fp8", "bf8"):
        return numerics.decode_table(numerics.fp8_format_for(fmt, arch))[codes]
    return numerics.decode_table({"fp6": "e2m3", "bf6": "e3m2", "fp4": "e2m1"}[fmt])[codes]


def _lane_values(x: np.ndarray, fmt: str, count: int, need: int, what: str, name: str, arch: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] != 64 or x.shape[1] < need:
        raise ValueError(f"{name} on {arch}: operand {what} must be uint32 [64, {need}], got {x.shape}")
    if x.dtype != np.uint32:
        if not np.issubdtype(x.dtype, np.integer):
            raise ValueError(f"{name} on {arch}: operand {what} must hold uint32 dword bit patterns, got {x.dtype}")
        x = x.astype(np.uint32)
    return _decode(_unpack(x[:, :need], _BITS[fmt], count), fmt, arch)


def execute(name: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, *, arch: str, cbsz: int = 0, abid: int = 0,
            blgp: int = 0, op_sel: int = 0, neg: int = 0, scale_a: np.ndarray | None = None,
            scale_b: np.ndarray | None = None, scale_sel_a: int = 0, scale_sel_b: int = 0) -> np.ndarray:
    """D = A*B + C of one v_mfma_* on one wave64 (see the module docstring for layout and numerics).
    a / b may carry trailing dwords beyond operand_dwords() (e.g. the 8 registers an f8f6f4 fp4 operand range
    names in LLVM's <8 x i32> form): they are ignored. Non-integer dtypes are refused; other integer dtypes are
    taken modulo 2^32. Raises ValueError for an unknown mnemonic, one not on `arch`, or a modifier the instruction
    does not have.
    scale_a / scale_b (uint32 [64], the scale VGPR of each lane) and scale_sel_a / _b (its byte, 0..3: op_sel[0] |
    op_sel_hi[0] << 1 and op_sel[1] | op_sel_hi[1] << 1 of the encoding) are for v_mfma_scale_* only."""
    inf = info(name, arch)
    at, bt = _operand_types(inf, arch, cbsz, blgp)
    f8f6f4 = inf.a_type == "f8f6f4"
    if not f8f6f4:
        if (cbsz or abid) and not inf.cbsz_abid:
            raise ValueError(f"{name} on {arch} has no CBSZ/ABID broadcast (cbsz={cbsz}, abid={abid})")
        if blgp and not inf.blgp:
            raise ValueError(f"{name} on {arch} has no BLGP lane pattern (blgp={blgp})")
        if not 0 <= blgp <= 7:
            raise ValueError(f"{name} on {arch}: blgp={blgp} is not 0..7")
        if inf.cbsz_abid and (not 0 <= cbsz or (1 << cbsz) > inf.blocks or not 0 <= abid < (1 << cbsz)):
            raise ValueError(f"{name} on {arch}: cbsz={cbsz}, abid={abid} out of range for {inf.blocks} blocks")
    elif abid:
        raise ValueError(f"{name} on {arch}: abid={abid} is not defined for the f8f6f4 forms")
    if op_sel or neg:
        raise ValueError(f"{name} on {arch}: op_sel={op_sel} / neg={neg} are not modelled for this instruction")
    if inf.scaled:
        if scale_a is None or scale_b is None:
            raise ValueError(f"{name} on {arch}: needs scale_a and scale_b (the per-lane scale dwords)")
        if not (0 <= scale_sel_a <= 3 and 0 <= scale_sel_b <= 3):
            raise ValueError(f"{name} on {arch}: scale byte selects must be 0..3")
    elif scale_a is not None or scale_b is not None:
        raise ValueError(f"{name} on {arch} takes no scales (only v_mfma_scale_* do)")

    n_a, n_b, n_c = operand_dwords(name, arch, cbsz if f8f6f4 else 0, blgp if f8f6f4 else 0)
    v = inf.values_per_lane()
    av = _lane_values(a, at, v, n_a, "A", name, arch)            # [64, V]
    bv = _lane_values(b, bt, v, n_b, "B", name, arch)
    c = np.asarray(c)
    if c.shape != (64, n_c):
        raise ValueError(f"{name} on {arch}: C must be uint32 [64, {n_c}], got {c.shape}")
    c = c.astype(np.uint32)

    if inf.scaled:
        sa = numerics.e8m0_to_f32(_scale_byte(scale_a, scale_sel_a, name, arch))
        sb = numerics.e8m0_to_f32(_scale_byte(scale_b, scale_sel_b, name, arch))
        av = av * sa[:, None]
        bv = bv * sb[:, None]

    if not f8f6f4 and inf.blgp and blgp:
        lanes = np.arange(64)
        src = {1: lanes % 32, 2: 32 + lanes % 32, 3: (lanes + 16) % 64}.get(blgp, 16 * (blgp - 4) + lanes % 16)
        bv = bv[src]

    a_lane, a_v, b_lane, b_v, d_lane, d_reg = _index_maps(inf.name)
    if inf.cbsz_abid and cbsz:
        blk = np.arange(inf.blocks)
        src_blk = (blk // (1 << cbsz)) * (1 << cbsz) + abid
        a_lane, a_v = a_lane[src_blk], a_v[src_blk]
    A = av[a_lane, a_v]                                              # [blocks, M, K]
    B = bv[b_lane, b_v]                                              # [blocks, K, N]

    out = np.empty((64, n_c), dtype=np.uint32)
    if inf.acc == "i32":
        C = c.view(np.int32).astype(np.int64)[d_lane, d_reg]
        D = np.einsum("bik,bkj->bij", A, B) + C                      # int64: |sum| < 2^31 * 2 + 64 * 2^14
        out[d_lane, d_reg] = (D & 0xFFFFFFFF).astype(np.uint32)
        return out
    C = numerics.f32_bits_to_f32(c).astype(np.float64)[d_lane, d_reg]
    with np.errstate(invalid="ignore", over="ignore"):
        D = _exact_dot(A, B) + C
    out[d_lane, d_reg] = numerics.round_f64_to_f32_bits(D)
    return out


def _exact_dot(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Sum over k of A[b,i,k]*B[b,k,j] in float64 with IEEE special-value semantics (Inf*0 = NaN, Inf-Inf = NaN).
    Every product is exact in float64 (at most 24 x 24 = 48 significant bits, the f32 case; denormal f32 inputs
    give products >= 2^-298, inside float64's range); np.matmul's float64 reduction then adds them."""
    return np.matmul(A, B)


def _scale_byte(s, sel: int, name: str, arch: str) -> np.ndarray:
    s = np.asarray(s)
    if s.shape != (64,):
        raise ValueError(f"{name} on {arch}: a scale operand is one dword per lane, uint32 [64], got {s.shape}")
    return (s.astype(np.uint32) >> np.uint32(8 * sel)) & 0xFF
