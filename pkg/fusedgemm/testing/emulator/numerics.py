"""Number formats of the AMD CDNA3 (gfx942) / CDNA4 (gfx950) VALU and matrix cores, vectorised in numpy.

Everything here works on raw bit patterns (uint8 / uint16 / uint32 numpy arrays) and returns bit patterns or
float32 / float64 values; nothing depends on the host's rounding mode (numpy's float16 cast and np.round are
IEEE round-to-nearest-even). The emulator core calls these for the VALU conversions; mfma.py calls the decoders.

Formats (sign.exponent.mantissa, bias; "fnuz" = finite, no negative zero: the one NaN is 0x80):
  fp8 e4m3fnuz  1.4.3 bias 8   max 240     NaN 0x80, no Inf, no -0       gfx942 "fp8" (MFMA and v_cvt_*fp8*)
  bf8 e5m2fnuz  1.5.2 bias 16  max 57344   NaN 0x80, no Inf, no -0       gfx942 "bf8"
  fp8 e4m3fn    1.4.3 bias 7   max 448     NaN s.1111.111, no Inf        gfx950 "fp8" (OCP FP8 E4M3)
  bf8 e5m2      1.5.2 bias 15  max 57344   Inf s.11111.00, NaN s.11111.{01,10,11}   gfx950 "bf8" (OCP E5M2)
  fp6 e2m3      1.2.3 bias 1   max 7.5     no Inf / NaN                  gfx950 f8f6f4 format 2 (OCP MX FP6)
  bf6 e3m2      1.3.2 bias 3   max 28      no Inf / NaN                  gfx950 f8f6f4 format 3
  fp4 e2m1      1.2.1 bias 1   max 6       no Inf / NaN                  gfx950 f8f6f4 format 4 (OCP MX FP4)
  e8m0          8-bit exponent, bias 127, 0xFF = NaN                      MX scale (v_mfma_scale_*, cvt_scalef32)
Sources: the AMD Instinct MI300 "CDNA3" ISA reference guide (its matrix-arithmetic chapter's FP8 / BF8 format
description and the VOP3 entries V_CVT_PK_FP8_F32, V_CVT_PK_BF8_F32, V_CVT_F32_FP8, V_CVT_PK_F32_FP8); the MI355X
"CDNA4" ISA reference guide (the same, plus V_CVT_SCALEF32_* and V_CVT_PK_BF16_F32); the OCP 8-bit Floating Point
Specification (OFP8) and OCP Microscaling (MX) Formats Specification v1.0 for e4m3fn / e5m2 / e2m3 / e3m2 / e2m1 /
e8m0; composable_kernel's float8 format table (FNUZ vs OCP bias / max / NaN / Inf) as a cross-check. Which fp8
flavour each arch uses is also what LLVM's AMDGPU backend / MLIR's amdgpu dialect assume (fnuz on gfx942, OCP on
gfx950) and what hip_src/include/fusedgemm/platform.hpp states.

Conversion rules implemented (f32 -> 8-bit), per instruction:
  * Rounding: round-to-nearest-even on the exact value (the ISA's conversions are RNE; the stochastic
    v_cvt_sr_* forms are not modelled).
  * Overflow (|x| rounds above the format's max finite): with the instruction's VOP3 CLAMP bit set the result
    saturates to +-max finite; without it the result is the format's overflow value: NaN (0x80) for the fnuz
    formats (they have no Inf), NaN (s.1111.111) for e4m3fn, Inf (s.11111.00) for e5m2. HIP's fp8 fast path
    (amd_hip_fp8.h, cast_to_f8_from_f32) clamps with v_med3_f32 *before* v_cvt_pk_fp8_f32 to get saturation,
    which is consistent with the instruction itself not saturating unless CLAMP is set.
  * NaN in -> NaN out (0x80 fnuz; s.1111.111 / s.11111.11 OCP). Inf in -> NaN for fnuz and e4m3fn (no Inf
    encoding), Inf for e5m2; CLAMP does not turn Inf into max (NaN / Inf are "propagated, not clipped", as the HIP
    header's comment puts it).
  * Zero: fnuz has no -0, so -0.0 and negative values rounding to zero give 0x00; OCP keeps the sign (0x80).
  * Denormal inputs / outputs are kept (the fp8 conversions do not flush; f32 denormal inputs are far below every
    8-bit format's smallest subnormal and round to +-0).
  * gfx950's scaled conversions V_CVT_SCALEF32_PK_{FP8,BF8}_F32 divide by 2^(exponent(scale) - 127) before
    converting (only the scale's exponent field is used), the up-conversions V_CVT_SCALEF32_PK_F32_{FP8,BF8}
    multiply by it; usage in AMD's own libraries (scale = e8m0 << 23 as a float, and the software fallback
    `x * 2^(127 - e8m0)`) confirms the direction.
  Items the public documents leave ambiguous and that are therefore choices here, not facts: the non-CLAMP
  overflow result on gfx950 OCP e4m3 (NaN chosen, as OFP8 specifies for non-saturating conversion), Inf with CLAMP
  set (NaN / Inf kept, not clamped), the NaN payload (a quiet NaN with the input's sign), and for the fp6 / fp4
  formats (no NaN / Inf codes) NaN -> +-max.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

__all__ = [
    "Fp8Format", "FORMATS", "decode", "encode", "decode_table",
    "fp8_e4m3fnuz_to_f32", "bf8_e5m2fnuz_to_f32", "fp8_e4m3fn_to_f32", "bf8_e5m2_to_f32",
    "f32_to_fp8_e4m3fnuz", "f32_to_bf8_e5m2fnuz", "f32_to_fp8_e4m3fn", "f32_to_bf8_e5m2",
    "fp6_e2m3_to_f32", "bf6_e3m2_to_f32", "fp4_e2m1_to_f32", "e8m0_to_f32", "fp8_format_for",
    "v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32", "v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8",
    "v_cvt_pk_f32_bf8", "v_cvt_scalef32_pk_fp8_f32", "v_cvt_scalef32_pk_bf8_f32", "v_cvt_scalef32_pk_f32_fp8",
    "v_cvt_scalef32_pk_f32_bf8",
    "f32_bits_to_f32", "f32_to_bits", "bf16_bits_to_f32", "f32_to_bf16_rne", "v_cvt_pk_bf16_f32",
    "f16_bits_to_f32", "f32_to_f16_rne", "f32_to_xf32_truncate", "round_f64_to_f32_bits",
]


# ---- formats -------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Fp8Format:
    """A small float format: `ebits` exponent bits, `mbits` mantissa bits, exponent `bias`.
    fnuz: code 1.000..0 (0x80 for 8 bits) is the only NaN, there is no -0 and no Inf.
    nan_all_ones: the all-ones exponent+mantissa code (s.1111.111) is NaN and every other code is finite (e4m3fn).
    ieee_special: the all-ones exponent is Inf (mantissa 0) / NaN (mantissa != 0), IEEE style (e5m2).
    Neither flag: every code is finite (fp6 / fp4 MX formats)."""
    name: str
    ebits: int
    mbits: int
    bias: int
    fnuz: bool = False
    nan_all_ones: bool = False
    ieee_special: bool = False

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.bits - 1)


FORMATS: dict[str, Fp8Format] = {f.name: f for f in (
    Fp8Format("e4m3fnuz", 4, 3, 8, fnuz=True),
    Fp8Format("e5m2fnuz", 5, 2, 16, fnuz=True),
    Fp8Format("e4m3fn", 4, 3, 7, nan_all_ones=True),
    Fp8Format("e5m2", 5, 2, 15, ieee_special=True),
    Fp8Format("e2m3", 2, 3, 1),
    Fp8Format("e3m2", 3, 2, 3),
    Fp8Format("e2m1", 2, 1, 1),
)}


def _fmt(fmt: str | Fp8Format) -> Fp8Format:
    if isinstance(fmt, Fp8Format):
        return fmt
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown small-float format {fmt!r}; known: {sorted(FORMATS)}") from None


def fp8_format_for(kind: str, arch: str) -> str:
    """The format the hardware means by "fp8" / "bf8" on `arch`: fnuz on gfx942 (CDNA3), OCP on gfx950 (CDNA4)."""
    table = {("fp8", "gfx942"): "e4m3fnuz", ("bf8", "gfx942"): "e5m2fnuz",
             ("fp8", "gfx950"): "e4m3fn", ("bf8", "gfx950"): "e5m2"}
    try:
        return table[(kind, arch)]
    except KeyError:
        raise ValueError(f"no {kind!r} format on arch {arch!r} (gfx942 | gfx950; fp8 | bf8)") from None


@functools.lru_cache(maxsize=None)
def decode_table(fmt: str | Fp8Format) -> np.ndarray:
    """float64 value of every code 0 .. 2^bits - 1 (NaN / +-Inf where the format has them). Exact."""
    f = _fmt(fmt)
    n = 1 << f.bits
    codes = np.arange(n)
    sign = np.where(codes & f.sign_bit, -1.0, 1.0)
    e = (codes >> f.mbits) & ((1 << f.ebits) - 1)
    m = codes & ((1 << f.mbits) - 1)
    mag = np.where(e == 0, m * 2.0 ** (1 - f.bias - f.mbits),
                   (m + (1 << f.mbits)) * 2.0 ** (e.astype(np.int64) - f.bias - f.mbits))
    val = sign * mag
    emax = (1 << f.ebits) - 1
    if f.fnuz:
        val[f.sign_bit] = np.nan
    elif f.nan_all_ones:
        nan = (e == emax) & (m == (1 << f.mbits) - 1)
        val[nan] = np.copysign(np.nan, sign[nan])
    elif f.ieee_special:
        val[(e == emax) & (m == 0)] = sign[(e == emax) & (m == 0)] * np.inf
        nan = (e == emax) & (m != 0)
        val[nan] = np.copysign(np.nan, sign[nan])
    val.setflags(write=False)
    return val


@functools.lru_cache(maxsize=None)
def _max_finite(fmt: Fp8Format) -> float:
    t = decode_table(fmt)
    return float(np.nanmax(t[np.isfinite(t)]))


@functools.lru_cache(maxsize=None)
def _positive_grid(fmt: Fp8Format) -> tuple[np.ndarray, np.ndarray]:
    """Sorted finite non-negative values and their codes (the positive half of the code space)."""
    t = decode_table(fmt)
    codes = np.arange(fmt.sign_bit)
    vals = t[: fmt.sign_bit]
    ok = np.isfinite(vals)
    order = np.argsort(vals[ok], kind="stable")
    return vals[ok][order], codes[ok][order]


def decode(codes: np.ndarray, fmt: str | Fp8Format) -> np.ndarray:
    """Codes (any integer array; only the low `bits` bits are used) -> float32 values. Exact for every format
    here (each value fits float32)."""
    f = _fmt(fmt)
    c = np.asarray(codes).astype(np.int64) & ((1 << f.bits) - 1)
    return decode_table(f)[c].astype(np.float32)


def encode(x: np.ndarray, fmt: str | Fp8Format, *, saturate: bool = False) -> np.ndarray:
    """Values (float32 or float64, taken as exact) -> codes (uint8), round-to-nearest-even.
    saturate=True (the instruction's CLAMP bit): finite overflow gives +-max finite. saturate=False: finite
    overflow gives NaN (fnuz, e4m3fn) or Inf (e5m2); fp6 / fp4 have neither and always saturate (OCP MX).
    NaN -> NaN; Inf -> NaN (fnuz, e4m3fn), Inf (e5m2), +-max (fp6 / fp4). See the module docstring."""
    f = _fmt(fmt)
    a = np.asarray(x, dtype=np.float64)
    neg = np.signbit(a)
    mag = np.abs(a)
    emin = 1 - f.bias
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        _, e2 = np.frexp(np.where(np.isfinite(mag) & (mag > 0), mag, 1.0))
        exp = np.maximum(e2.astype(np.int64) - 1, emin)   # unbiased exponent of the value, >= the subnormal one
        quantum = np.ldexp(1.0, exp - f.mbits)
        rounded = np.round(mag / quantum) * quantum        # exact: power-of-two scaling, np.round is RNE
    maxf = _max_finite(f)
    vals, pcodes = _positive_grid(f)
    overflow = np.isfinite(mag) & (rounded > maxf)
    inrange = np.isfinite(mag) & ~overflow
    idx = np.searchsorted(vals, np.where(inrange, rounded, 0.0))
    idx = np.minimum(idx, len(vals) - 1)
    out = pcodes[idx].astype(np.int64)
    sign_bit = np.where(neg, f.sign_bit, 0)
    out = out | sign_bit
    if f.fnuz:
        nan_code = np.full_like(out, f.sign_bit)
        inf_code = nan_code
        out = np.where(out == f.sign_bit, 0, out)          # no -0: a negative zero result is +0
    elif f.nan_all_ones:
        nan_code = sign_bit | (f.sign_bit - 1)
        inf_code = nan_code
    elif f.ieee_special:
        nan_code = sign_bit | (f.sign_bit - 1)
        inf_code = sign_bit | (((1 << f.ebits) - 1) << f.mbits)
    else:  # fp6 / fp4: no specials; OCP MX conversions saturate
        maxcode = int(pcodes[-1])
        nan_code = sign_bit | maxcode
        inf_code = nan_code
    maxcode = sign_bit | int(pcodes[-1])
    ovf_code = maxcode if (saturate or not (f.fnuz or f.nan_all_ones or f.ieee_special)) else inf_code
    out = np.where(overflow, ovf_code, out)
    out = np.where(np.isinf(mag), inf_code, out)
    out = np.where(np.isnan(a), nan_code, out)
    return out.astype(np.uint8)


# ---- named fp8 / fp6 / fp4 / e8m0 conversions ----------------------------------------------------------------
def fp8_e4m3fnuz_to_f32(codes):
    """gfx942 fp8 (CDNA3 ISA, FP8 data format table) -> float32; 0x80 -> NaN."""
    return decode(codes, "e4m3fnuz")


def bf8_e5m2fnuz_to_f32(codes):
    """gfx942 bf8 -> float32; 0x80 -> NaN."""
    return decode(codes, "e5m2fnuz")


def fp8_e4m3fn_to_f32(codes):
    """gfx950 fp8 (OCP E4M3) -> float32; s.1111.111 -> NaN."""
    return decode(codes, "e4m3fn")


def bf8_e5m2_to_f32(codes):
    """gfx950 bf8 (OCP E5M2) -> float32, with +-Inf and NaN."""
    return decode(codes, "e5m2")


def f32_to_fp8_e4m3fnuz(x, *, saturate=False):
    return encode(x, "e4m3fnuz", saturate=saturate)


def f32_to_bf8_e5m2fnuz(x, *, saturate=False):
    return encode(x, "e5m2fnuz", saturate=saturate)


def f32_to_fp8_e4m3fn(x, *, saturate=False):
    return encode(x, "e4m3fn", saturate=saturate)


def f32_to_bf8_e5m2(x, *, saturate=False):
    return encode(x, "e5m2", saturate=saturate)


def fp6_e2m3_to_f32(codes):
    """OCP MX FP6 E2M3 (gfx950 f8f6f4 format 2) -> float32 (low 6 bits of each code)."""
    return decode(codes, "e2m3")


def bf6_e3m2_to_f32(codes):
    """OCP MX FP6 E3M2 (gfx950 f8f6f4 format 3) -> float32."""
    return decode(codes, "e3m2")


def fp4_e2m1_to_f32(codes):
    """OCP MX FP4 E2M1 (gfx950 f8f6f4 format 4) -> float32 (low 4 bits)."""
    return decode(codes, "e2m1")


def e8m0_to_f32(codes):
    """OCP MX E8M0 scale: 2^(code - 127); 0xFF -> NaN. Returned as float64: 2^-127 is a float32 denormal and
    stays exact in float32 too, but the scaled products are formed in float64."""
    c = np.asarray(codes).astype(np.int64) & 0xFF
    return np.where(c == 0xFF, np.nan, np.ldexp(1.0, c - 127))


def _bytes_of(words: np.ndarray, sel) -> np.ndarray:
    return (np.asarray(words).astype(np.uint32) >> (8 * np.asarray(sel, dtype=np.uint32))) & 0xFF


def _pack2(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (lo.astype(np.uint32) | (hi.astype(np.uint32) << 8)).astype(np.uint16)


def v_cvt_pk_fp8_f32(src0, src1, *, arch: str, clamp: bool = False) -> np.ndarray:
    """V_CVT_PK_FP8_F32 (CDNA3/CDNA4 ISA, VOP3): two float32 -> two fp8 codes packed in 16 bits (src0 in bits
    7:0, src1 in 15:8); the instruction writes them to the low or high word of vdst as op_sel[3] says, keeping
    the other word (the caller merges). RNE; CLAMP saturates; see module docstring for NaN / overflow.
    Format: e4m3fnuz on gfx942, e4m3fn on gfx950."""
    f = fp8_format_for("fp8", arch)
    return _pack2(encode(np.asarray(src0, np.float32), f, saturate=clamp),
                  encode(np.asarray(src1, np.float32), f, saturate=clamp))


def v_cvt_pk_bf8_f32(src0, src1, *, arch: str, clamp: bool = False) -> np.ndarray:
    """V_CVT_PK_BF8_F32: as v_cvt_pk_fp8_f32 with bf8 (e5m2fnuz on gfx942, e5m2 on gfx950)."""
    f = fp8_format_for("bf8", arch)
    return _pack2(encode(np.asarray(src0, np.float32), f, saturate=clamp),
                  encode(np.asarray(src1, np.float32), f, saturate=clamp))


def v_cvt_f32_fp8(src, byte_sel=0, *, arch: str) -> np.ndarray:
    """V_CVT_F32_FP8: byte `byte_sel` (SDWA src0_sel BYTE_n / VOP3 op_sel) of each 32-bit src -> float32, exact."""
    return decode(_bytes_of(src, byte_sel), fp8_format_for("fp8", arch))


def v_cvt_f32_bf8(src, byte_sel=0, *, arch: str) -> np.ndarray:
    """V_CVT_F32_BF8: as v_cvt_f32_fp8 for bf8."""
    return decode(_bytes_of(src, byte_sel), fp8_format_for("bf8", arch))


def v_cvt_pk_f32_fp8(src, word_sel=0, *, arch: str) -> tuple[np.ndarray, np.ndarray]:
    """V_CVT_PK_F32_FP8: the two fp8 codes of 16-bit word `word_sel` of src -> (float32 of the low byte, of the
    high byte), written to vdst[0], vdst[1]."""
    f = fp8_format_for("fp8", arch)
    return decode(_bytes_of(src, 2 * word_sel), f), decode(_bytes_of(src, 2 * word_sel + 1), f)


def v_cvt_pk_f32_bf8(src, word_sel=0, *, arch: str) -> tuple[np.ndarray, np.ndarray]:
    """V_CVT_PK_F32_BF8: as v_cvt_pk_f32_fp8 for bf8."""
    f = fp8_format_for("bf8", arch)
    return decode(_bytes_of(src, 2 * word_sel), f), decode(_bytes_of(src, 2 * word_sel + 1), f)


def _scale_pow2(scale_f32) -> np.ndarray:
    """2^(exponent field of the float32 scale - 127), as the gfx950 scaled conversions use it."""
    bits = f32_to_bits(np.asarray(scale_f32, dtype=np.float32))
    return np.ldexp(1.0, ((bits >> 23) & 0xFF).astype(np.int64) - 127)


def v_cvt_scalef32_pk_fp8_f32(src0, src1, scale, *, clamp: bool = False) -> np.ndarray:
    """gfx950 V_CVT_SCALEF32_PK_FP8_F32 (CDNA4 ISA): (src / 2^(exp(scale)-127)) -> OCP e4m3fn, packed as
    v_cvt_pk_fp8_f32 packs (word select by op_sel[3], caller merges)."""
    s = _scale_pow2(scale)
    return _pack2(encode(np.asarray(src0, np.float32) / s, "e4m3fn", saturate=clamp),
                  encode(np.asarray(src1, np.float32) / s, "e4m3fn", saturate=clamp))


def v_cvt_scalef32_pk_bf8_f32(src0, src1, scale, *, clamp: bool = False) -> np.ndarray:
    """gfx950 V_CVT_SCALEF32_PK_BF8_F32: as v_cvt_scalef32_pk_fp8_f32 with OCP e5m2."""
    s = _scale_pow2(scale)
    return _pack2(encode(np.asarray(src0, np.float32) / s, "e5m2", saturate=clamp),
                  encode(np.asarray(src1, np.float32) / s, "e5m2", saturate=clamp))


def _round_f64_to_f32(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(v, dtype=np.float64).astype(np.float32)


def v_cvt_scalef32_pk_f32_fp8(src, scale, word_sel=0) -> tuple[np.ndarray, np.ndarray]:
    """gfx950 V_CVT_SCALEF32_PK_F32_FP8: two e4m3fn codes of word `word_sel` times 2^(exp(scale)-127) -> float32
    (one rounding of the exact product; overflow -> Inf)."""
    lo, hi = v_cvt_pk_f32_fp8(src, word_sel, arch="gfx950")
    s = _scale_pow2(scale)
    return _round_f64_to_f32(lo * s), _round_f64_to_f32(hi * s)


def v_cvt_scalef32_pk_f32_bf8(src, scale, word_sel=0) -> tuple[np.ndarray, np.ndarray]:
    """gfx950 V_CVT_SCALEF32_PK_F32_BF8: as v_cvt_scalef32_pk_f32_fp8 with e5m2."""
    lo, hi = v_cvt_pk_f32_bf8(src, word_sel, arch="gfx950")
    s = _scale_pow2(scale)
    return _round_f64_to_f32(lo * s), _round_f64_to_f32(hi * s)


# ---- fp32 / bf16 / f16 / xf32 --------------------------------------------------------------------------------
def f32_bits_to_f32(bits) -> np.ndarray:
    return np.asarray(bits).astype(np.uint32).view(np.float32)


def f32_to_bits(x) -> np.ndarray:
    return np.array(x, dtype=np.float32, copy=True).view(np.uint32)


def bf16_bits_to_f32(bits) -> np.ndarray:
    """bf16 (the high half of a float32) -> float32, exact (denormals kept, NaN payload kept)."""
    return ((np.asarray(bits).astype(np.uint32) & 0xFFFF) << 16).view(np.float32)


def f32_to_bf16_rne(x) -> np.ndarray:
    """float32 -> bf16 bits (uint16): round-to-nearest-even on the 16 dropped bits, overflow to +-Inf, NaN ->
    quiet NaN (bit 6 of the bf16 set, sign and high payload kept). This is gfx950's V_CVT_PK_BF16_F32 (CDNA4 ISA,
    VOP3; no denormal flushing under the default MODE) and exactly what hip_src/include/fusedgemm/platform.hpp
    float_to_bf16_bits_rne computes in integer arithmetic on gfx942 (which has no bf16 conversion instruction)."""
    u = f32_to_bits(x).astype(np.uint64)
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    q = (u >> 16) | 0x40
    return np.where(is_nan, q, r).astype(np.uint16)


def v_cvt_pk_bf16_f32(src0, src1) -> np.ndarray:
    """gfx950 V_CVT_PK_BF16_F32: bf16(src0) in bits 15:0, bf16(src1) in 31:16 (RNE, NaN quieted)."""
    return (f32_to_bf16_rne(src0).astype(np.uint32) | (f32_to_bf16_rne(src1).astype(np.uint32) << 16))


def f16_bits_to_f32(bits) -> np.ndarray:
    """IEEE binary16 bits -> float32, exact (denormals kept: the f16 MFMA inputs are not flushed)."""
    return (np.asarray(bits).astype(np.uint16)).view(np.float16).astype(np.float32)


def f32_to_f16_rne(x) -> np.ndarray:
    """float32 -> IEEE binary16 bits, round-to-nearest-even, overflow to Inf (V_CVT_F16_F32 / V_CVT_PK_F16_F32
    under the default round mode, denormals kept)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def f32_to_xf32_truncate(bits) -> np.ndarray:
    """What gfx942's v_mfma_f32_*_xf32 reads of each fp32 operand: sign, 8 exponent bits and the top 10 mantissa
    bits; the 13 low mantissa bits are dropped (round toward zero). CDNA3 ISA section 7.1 defines XF32 as the 19-bit
    1.8.10 format; that the hardware truncates rather than rounds is AMD's own statement in ROCm/rocm-libraries
    PR #9176 ("gfx942's native v_mfma_f32_*_xf32 truncates fp32->tf32 (round-toward-zero) in hardware"), which adds
    a software rounding step before the MFMA for that reason. Returns float32 values. NaN stays NaN: a NaN whose
    payload lives only in the dropped bits is made quiet (not Inf)."""
    u = np.asarray(bits).astype(np.uint32)
    t = u & np.uint32(0xFFFFE000)
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    t = np.where(is_nan, t | np.uint32(0x00400000), t)
    return t.astype(np.uint32).view(np.float32)


def round_f64_to_f32_bits(v) -> np.ndarray:
    """float64 -> float32 bits with one IEEE RNE rounding (overflow to +-Inf, NaN -> the canonical quiet NaN
    0x7FC00000 with the NaN's sign dropped, as the matrix cores return the default NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.asarray(v, dtype=np.float64).astype(np.float32)
    bits = f.view(np.uint32).copy()
    bits[np.isnan(f)] = 0x7FC00000
    return bits
