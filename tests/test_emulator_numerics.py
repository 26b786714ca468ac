"""Number formats of the emulated VALU / matrix cores (fusedgemm.testing.emulator.numerics), against values worked
out by hand from the format definitions (CDNA3 / CDNA4 ISA data-format tables, OCP OFP8 and MX v1.0) and against an
independent brute-force round-to-nearest-even over each format's value table."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusedgemm.testing.emulator import numerics as nu

FP8 = ["e4m3fnuz", "e5m2fnuz", "e4m3fn", "e5m2"]
SMALL = ["e2m3", "e3m2", "e2m1"]
SPEC = {  # ebits, mbits, bias, kind
    "e4m3fnuz": (4, 3, 8, "fnuz"), "e5m2fnuz": (5, 2, 16, "fnuz"), "e4m3fn": (4, 3, 7, "fn"),
    "e5m2": (5, 2, 15, "ieee"), "e2m3": (2, 3, 1, "none"), "e3m2": (3, 2, 3, "none"), "e2m1": (2, 1, 1, "none"),
}


def _ref_value(code: int, fmt: str) -> float:
    """Decode one code from the format's definition, by hand."""
    ebits, mbits, bias, kind = SPEC[fmt]
    nbits = 1 + ebits + mbits
    s, e, m = code >> (nbits - 1), (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
    if kind == "fnuz" and code == 1 << (nbits - 1):
        return float("nan")
    if kind == "fn" and e == (1 << ebits) - 1 and m == (1 << mbits) - 1:
        return float("nan")
    if kind == "ieee" and e == (1 << ebits) - 1:
        return float("nan") if m else (-1) ** s * float("inf")
    mag = m * 2.0 ** (1 - bias - mbits) if e == 0 else (1 + m / 2 ** mbits) * 2.0 ** (e - bias)
    return (-1) ** s * mag


@pytest.mark.parametrize("fmt", FP8 + SMALL)
def test_decode_every_code(fmt):
    n = 1 << (1 + SPEC[fmt][0] + SPEC[fmt][1])
    got = nu.decode(np.arange(n), fmt)
    want = np.array([_ref_value(c, fmt) for c in range(n)], np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)                       # NaN == NaN position-wise here
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))


def test_decode_known_values():
    """Landmarks of each format, from the ISA / OCP tables."""
    d = lambda c, f: float(nu.decode(np.array([c]), f)[0])
    assert d(0x7F, "e4m3fnuz") == 240 and d(0x01, "e4m3fnuz") == 2.0 ** -10 and np.isnan(d(0x80, "e4m3fnuz"))
    assert d(0xFF, "e4m3fnuz") == -240 and d(0x08, "e4m3fnuz") == 2.0 ** -7
    assert d(0x7F, "e5m2fnuz") == 57344 and d(0x01, "e5m2fnuz") == 2.0 ** -17 and np.isnan(d(0x80, "e5m2fnuz"))
    assert d(0x7E, "e4m3fn") == 448 and np.isnan(d(0x7F, "e4m3fn")) and d(0x01, "e4m3fn") == 2.0 ** -9
    assert d(0x80, "e4m3fn") == 0 and np.signbit(d(0x80, "e4m3fn"))
    assert d(0x7B, "e5m2") == 57344 and d(0x7C, "e5m2") == np.inf and d(0xFC, "e5m2") == -np.inf
    assert np.isnan(d(0x7D, "e5m2")) and d(0x01, "e5m2") == 2.0 ** -16
    assert [d(c, "e2m1") for c in range(8)] == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert d(0x1F, "e2m3") == 7.5 and d(0x1F, "e3m2") == 28 and d(0x01, "e2m3") == 0.125
    assert nu.e8m0_to_f32(np.array([127, 0, 254]))[0] == 1.0
    assert nu.e8m0_to_f32(np.array([0]))[0] == 2.0 ** -127 and np.isnan(nu.e8m0_to_f32(np.array([255]))[0])


@pytest.mark.parametrize("fmt", FP8 + SMALL)
def test_round_trip_every_code(fmt):
    """decode -> encode gives every non-NaN code back (fnuz: +0 only; OCP keeps -0); NaN codes give a NaN."""
    n = 1 << (1 + SPEC[fmt][0] + SPEC[fmt][1])
    codes = np.arange(n)
    vals = nu.decode(codes, fmt)
    back = nu.encode(vals, fmt).astype(np.int64)
    nan = np.isnan(vals)
    np.testing.assert_array_equal(back[~nan], codes[~nan])
    assert np.isnan(nu.decode(back[nan], fmt)).all()


def _ref_encode(x: float, fmt: str, saturate: bool) -> float:
    """Brute force: the nearest finite value of the format, ties to the even code (mantissa LSB 0); beyond the max,
    overflow by the rule of the module docstring. Returns the decoded VALUE of the result."""
    ebits, mbits, bias, kind = SPEC[fmt]
    n = 1 << (1 + ebits + mbits)
    table = [(abs(_ref_value(c, fmt)), c) for c in range(n // 2)]
    table = [(v, c) for v, c in table if np.isfinite(v)]
    vmax = max(v for v, _ in table)
    a = abs(x)
    # distance to the next value past the max, had the exponent range continued: the overflow threshold
    top_quantum = 2.0 ** (int(np.floor(np.log2(vmax))) - mbits)
    if a >= vmax + top_quantum / 2 and not (a == vmax + top_quantum / 2 and (vmax / top_quantum) % 2 == 0):
        if saturate or kind == "none":
            return np.copysign(vmax, x)
        return np.copysign(np.inf, x) if kind == "ieee" else float("nan")
    best = min(table, key=lambda vc: (abs(vc[0] - a), vc[1] & 1))
    v = best[0]
    if kind == "fnuz" and v == 0:
        return 0.0
    return np.copysign(v, x)


@pytest.mark.parametrize("fmt", FP8 + SMALL)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_matches_brute_force_rne(fmt, saturate):
    rng = np.random.default_rng(1)
    vmax = float(np.nanmax(np.abs(nu.decode_table(fmt)[np.isfinite(nu.decode_table(fmt))])))
    grid = nu.decode_table(fmt)
    grid = np.unique(np.abs(grid[np.isfinite(grid)]))
    mids = (grid[1:] + grid[:-1]) / 2                              # exact ties
    x = np.concatenate([
        rng.uniform(-1.3 * vmax, 1.3 * vmax, 400), mids, -mids, grid, -grid,
        np.nextafter(mids, 0), np.nextafter(mids, np.inf),
        rng.uniform(-1, 1, 200) * grid[1] * 2,                     # the subnormal range
    ]).astype(np.float32)
    got = nu.decode(nu.encode(x, fmt, saturate=saturate), fmt).astype(np.float64)
    want = np.array([_ref_encode(float(v), fmt, saturate) for v in x])
    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    assert not bad.any(), list(zip(x[bad][:5], got[bad][:5], want[bad][:5]))
    # signs of zeros: fnuz has no -0; OCP keeps the sign
    z = nu.encode(np.array([-0.0, -1e-30], np.float32), fmt)
    assert (z == (0 if SPEC[fmt][3] == "fnuz" else 1 << (SPEC[fmt][0] + SPEC[fmt][1]))).all()


def test_overflow_nan_inf_rules():
    e = lambda x, f, s=False: int(nu.encode(np.array([x], np.float32), f, saturate=s)[0])
    # gfx942 fnuz: overflow / Inf / NaN -> 0x80 (NaN) without CLAMP; CLAMP saturates finite overflow only
    assert e(1e6, "e4m3fnuz") == 0x80 and e(-1e6, "e4m3fnuz") == 0x80
    assert e(1e6, "e4m3fnuz", True) == 0x7F and e(-1e6, "e4m3fnuz", True) == 0xFF
    assert e(np.inf, "e4m3fnuz", True) == 0x80 and e(np.nan, "e5m2fnuz", True) == 0x80
    assert e(247.9, "e4m3fnuz") == 0x7F and e(248, "e4m3fnuz") == 0x80     # 248: tie with 256 (even) -> overflow
    assert e(61439, "e5m2fnuz") == 0x7F and e(61440, "e5m2fnuz") == 0x80
    # gfx950 OCP e4m3fn: NaN is s.1111.111; 464 ties to 448 (even), 465 rounds to 480 -> overflow
    assert e(464, "e4m3fn") == 0x7E and e(465, "e4m3fn") == 0x7F and e(-465, "e4m3fn") == 0xFF
    assert e(465, "e4m3fn", True) == 0x7E and e(np.inf, "e4m3fn", True) == 0x7F
    # OCP e5m2: overflow -> Inf without CLAMP, max with; Inf stays Inf; NaN quiet
    assert e(1e6, "e5m2") == 0x7C and e(-1e6, "e5m2") == 0xFC and e(1e6, "e5m2", True) == 0x7B
    assert e(np.inf, "e5m2", True) == 0x7C and e(np.nan, "e5m2") == 0x7F
    # fp4 / fp6: no specials, saturate
    assert e(100, "e2m1") == 0x7 and e(-100, "e2m1") == 0xF and e(5, "e2m1") == 0x6 and e(2.5, "e2m1") == 0x4


def test_instruction_wrappers():
    pk = nu.v_cvt_pk_fp8_f32(np.float32([1.0, 240.0]), np.float32([-2.0, 1e9]), arch="gfx942")
    assert pk.dtype == np.uint16 and list(pk) == [0x40 | (0xC8 << 8), 0x7F | (0x80 << 8)]
    pk = nu.v_cvt_pk_fp8_f32(np.float32([1e9]), np.float32([1.0]), arch="gfx942", clamp=True)
    assert int(pk[0]) == 0x7F | (0x40 << 8)
    pk = nu.v_cvt_pk_fp8_f32(np.float32([1.0]), np.float32([448.0]), arch="gfx950")
    assert int(pk[0]) == 0x38 | (0x7E << 8)
    pk = nu.v_cvt_pk_bf8_f32(np.float32([1.0]), np.float32([-0.5]), arch="gfx942")
    assert int(pk[0]) == 0x40 | (0xBC << 8)                        # e5m2fnuz: 1.0 = 0.10000.00
    word = np.uint32(0x7F_40_C8_38)
    assert float(nu.v_cvt_f32_fp8(word, 1, arch="gfx942")) == -2.0
    assert float(nu.v_cvt_f32_fp8(word, 0, arch="gfx950")) == 1.0
    lo, hi = nu.v_cvt_pk_f32_fp8(word, 1, arch="gfx942")
    assert float(lo) == 1.0 and float(hi) == 240.0
    lo, hi = nu.v_cvt_pk_f32_bf8(np.uint32(0x7B3C), 0, arch="gfx950")
    assert float(lo) == 1.0 and float(hi) == 57344.0
    # gfx950 scaled conversions: only the scale's exponent counts; down-conversion divides, up multiplies
    s = np.float32(4.0 * 1.75)                                     # exponent 2 -> 2^2
    pk = nu.v_cvt_scalef32_pk_fp8_f32(np.float32([4.0]), np.float32([-8.0]), s)
    assert int(pk[0]) == 0x38 | (0xC0 << 8)                        # 1.0, -2.0 in e4m3fn
    lo, hi = nu.v_cvt_scalef32_pk_f32_fp8(np.uint32(0xC038), s)
    assert float(lo) == 4.0 and float(hi) == -8.0
    pk = nu.v_cvt_scalef32_pk_bf8_f32(np.float32([2.0 ** 20]), np.float32([1.0]), np.float32(2.0 ** 4))
    assert int(pk[0]) == 0x7C | (0x2C << 8)                        # 2^16 > 57344: overflow -> Inf; 2^-4
    lo, hi = nu.v_cvt_scalef32_pk_f32_bf8(np.uint32(0x3C), np.float32(2.0 ** 100))
    assert float(lo) == 2.0 ** 100


def test_bf16_matches_torch_and_quiets_nan():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 39, 5000),
                        [0.0, -0.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 3.4e38, -3.4e38, 1e-40, np.inf, -np.inf]])
    x = x.astype(np.float32)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(nu.f32_to_bf16_rne(x), want)
    assert int(nu.f32_to_bf16_rne(np.float32(1.0 + 2 ** -8))) == 0x3F80       # tie -> even
    assert int(nu.f32_to_bf16_rne(np.float32(1.0 + 3 * 2 ** -8))) == 0x3F82   # tie -> even (up)
    nan = np.array([0x7F800001, 0xFF810000, 0x7FC00000], np.uint32).view(np.float32)
    assert list(nu.f32_to_bf16_rne(nan)) == [0x7FC0, 0xFFC1, 0x7FC0]          # quiet, sign + high payload kept
    pk = nu.v_cvt_pk_bf16_f32(np.float32([1.0]), np.float32([-2.0]))
    assert int(pk[0]) == 0x3F80 | (0xC000 << 16)
    np.testing.assert_array_equal(nu.bf16_bits_to_f32(want), torch.from_numpy(want.view(np.int16)).view(
        torch.bfloat16).float().numpy())


def test_f16_and_xf32():
    x = np.float32([1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 65520.0, 2.0 ** -25, 2.0 ** -24 * 1.5])
    assert list(nu.f32_to_f16_rne(x)) == [0x3C00, 0x3C02, 0x7C00, 0x0000, 0x0002]
    assert list(nu.f16_bits_to_f32(np.array([0x0001, 0x7BFF, 0xFC00]))) == [2.0 ** -24, 65504.0, -np.inf]
    bits = np.float32([1.0 + 2 ** -10 + 2 ** -11, -(1.0 + 2 ** -23)]).view(np.uint32)
    assert list(nu.f32_to_xf32_truncate(bits)) == [1.0 + 2 ** -10, -1.0]
    assert np.isnan(nu.f32_to_xf32_truncate(np.array([0x7F800001], np.uint32))[0])
    assert nu.f32_to_xf32_truncate(np.array([0x7F800000], np.uint32))[0] == np.inf


def test_round_f64_to_f32_bits():
    v = np.array([1.0 + 2 ** -24, 1.0 + 3 * 2 ** -24, 1e39, -1e39, np.nan, 2.0 ** -149 * 0.5, 2.0 ** -149 * 0.75])
    assert list(nu.round_f64_to_f32_bits(v)) == [0x3F800000, 0x3F800002, 0x7F800000, 0xFF800000, 0x7FC00000, 0, 1]


def test_format_for_arch_and_errors():
    assert nu.fp8_format_for("fp8", "gfx942") == "e4m3fnuz" and nu.fp8_format_for("bf8", "gfx950") == "e5m2"
    with pytest.raises(ValueError, match="gfx1100"):
        nu.fp8_format_for("fp8", "gfx1100")
    with pytest.raises(ValueError, match="e9m9"):
        nu.decode(np.array([0]), "e9m9")
