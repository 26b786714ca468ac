"""VALU arithmetic on bit patterns: the float helpers and the op table (name -> source types, dest type, fn).

Float rounding: f32 arithmetic is numpy float32 (IEEE, round to nearest even, denormals kept: the kernels'
float_denorm_mode_32 = 3); fma is exact (float64 product + TwoSum correction of the one rounding);
transcendental approximations (v_exp_f32, v_rcp_f32, v_log_f32, v_rsq_f32, v_sqrt_f32) are computed in float64
and rounded once (hardware is within 1 ulp: documented in docs/emulator.md).
"""
from __future__ import annotations

import numpy as np

U32 = np.uint32
M32 = 0xFFFFFFFF
_F32_SIGN = U32(0x80000000)
_F32_ABS = U32(0x7FFFFFFF)


def _u(x):
    return np.asarray(x, dtype=U32) if not isinstance(x, (np.ndarray, np.generic)) else x


def f32(x):
    return np.asarray(x, dtype=U32).view(np.float32)


def bits32(x):
    return np.asarray(x, dtype=np.float32).view(U32)


# ---- float helpers ----------------------------------------------------------------------------------------------
def fma32(a, b, c):
    """Single-rounding fused multiply-add of float32 arrays."""
    a64, b64, c64 = (np.asarray(x, np.float64) for x in (a, b, c))
    p = a64 * b64  # exact
    with np.errstate(all="ignore"):
        s = p + c64
        # TwoSum: the exact error of s = p + c
        bp = s - p
        err = (p - (s - bp)) + (c64 - bp)
        r = s.astype(np.float32)
        # double rounding: s sits exactly between two float32 values and err says which way the exact sum lies
        back = r.astype(np.float64)
        other = np.where(back > s, np.nextafter(r, np.float32(-np.inf)), np.nextafter(r, np.float32(np.inf)))
        mid = (back + other.astype(np.float64)) * 0.5
        fix = (np.abs(s - back) == np.abs(back - mid)) & (err != 0) & np.isfinite(s)
        if np.any(fix):
            nudged = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s).astype(np.float32)
            r = np.where(fix, nudged, r)
    return np.asarray(r, np.float32)


def round32(x64):
    with np.errstate(all="ignore"):
        return np.asarray(x64, np.float64).astype(np.float32)


def _f16_to_f32(b):
    return (np.asarray(b, U32) & U32(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float32)


def _f32_to_f16_bits(x):
    with np.errstate(all="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).view(np.uint16).astype(U32)


# ---- VALU op table ----------------------------------------------------------------------------------------------
# name -> (source types, dest type, fn(*sources) -> result bits). Sources arrive as uint32/uint64 bit patterns.
def _fop(fn):
    """A float32 op on bit patterns."""
    def op(*xs):
        with np.errstate(all="ignore"):
            return bits32(fn(*(f32(x) for x in xs)))
    return op


def _sh(x):
    return np.asarray(x, U32) & U32(31)


def _i32(x):
    return np.asarray(x, U32).view(np.int32)


def _u24(x):
    return np.asarray(x, U32) & U32(0xFFFFFF)


def _i24(x):
    return (_i32(np.asarray(x, U32) << U32(8)) >> 8).astype(np.int64)


def _u64(x):
    return np.asarray(x, np.uint64)


def _sh64(x):
    return np.asarray(x, np.uint64) & np.uint64(63)


def _popcount32(x):
    x = np.asarray(x, np.uint64) & np.uint64(0xFFFFFFFF)
    c = np.zeros(x.shape, np.uint64)
    for i in range(32):
        c += (x >> np.uint64(i)) & np.uint64(1)
    return c


def _mul_hi_u32(a, b):
    return ((np.asarray(a, np.uint64) * np.asarray(b, np.uint64)) >> np.uint64(32)).astype(U32)


def _mul_hi_i32(a, b):
    return ((_i32(a).astype(np.int64) * _i32(b).astype(np.int64)) >> 32).astype(np.int64).astype(U32)


def _bfe_u32(a, b, c):
    off, width = _sh(b), np.asarray(c, U32) & U32(31)
    return np.where(width == 0, U32(0), (np.asarray(a, U32) >> off) & ((U32(1) << width) - U32(1))).astype(U32)


def _bfe_i32(a, b, c):
    off, width = _sh(b), np.asarray(c, U32) & U32(31)
    v = (np.asarray(a, U32) >> off).astype(np.int64) & ((np.int64(1) << width.astype(np.int64)) - 1)
    sign = np.int64(1) << (width.astype(np.int64) - 1).clip(0)
    v = np.where(width == 0, 0, (v ^ sign) - sign)
    return v.astype(np.int64).astype(U32)


def _perm_b32(a, b, sel):
    a, b, sel = (np.broadcast_to(np.asarray(x, U32), (64,)) for x in (a, b, sel))
    bytes_ = np.stack([(b >> U32(8 * i)) & U32(0xFF) for i in range(4)]
                      + [(a >> U32(8 * i)) & U32(0xFF) for i in range(4)])
    out = np.zeros(64, U32)
    for i in range(4):
        s = (sel >> U32(8 * i)) & U32(0xFF)
        idx = np.minimum(s, U32(7)).astype(np.int64)
        val = bytes_[idx, np.arange(64)]
        # 8..11: sign of bytes 1, 3, 5, 7 replicated; 12: 0x00; >= 13: 0xFF
        signs = np.stack([((bytes_[j] >> U32(7)) & U32(1)) * U32(0xFF) for j in (1, 3, 5, 7)])
        sval = signs[np.clip(s.astype(np.int64) - 8, 0, 3), np.arange(64)]
        val = np.where(s < 8, val, np.where(s < 12, sval, np.where(s == 12, U32(0), U32(0xFF))))
        out |= val.astype(U32) << U32(8 * i)
    return out


def _alignbit(a, b, c):
    v = (np.asarray(a, np.uint64) << np.uint64(32)) | np.asarray(b, np.uint64)
    return ((v >> (np.asarray(c, np.uint64) & np.uint64(31))) & np.uint64(M32)).astype(U32)


def _cvt_i32_f32(x):
    with np.errstate(all="ignore"):
        f = f32(x).astype(np.float64)
        f = np.where(np.isnan(f), 0.0, f)
        return np.clip(np.trunc(f), -2**31, 2**31 - 1).astype(np.int64).astype(U32)


def _cvt_u32_f32(x):
    with np.errstate(all="ignore"):
        f = f32(x).astype(np.float64)
        f = np.where(np.isnan(f), 0.0, f)
        return np.clip(np.trunc(f), 0, 2**32 - 1).astype(np.uint64).astype(U32)


def _max_f32(a, b):
    # IEEE maxNum: a NaN operand loses
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.maximum(a, b)))


def _min_f32(a, b):
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.minimum(a, b)))


def _med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _ldexp(a, b):
    with np.errstate(all="ignore"):
        return bits32(round32(np.ldexp(f32(a).astype(np.float64), np.clip(_i32(b), -1000, 1000))))


def _exp2(a):
    with np.errstate(all="ignore"):
        return round32(np.exp2(a.astype(np.float64)))


def _log2(a):
    with np.errstate(all="ignore"):
        return round32(np.log2(a.astype(np.float64)))


def _rcp(a):
    with np.errstate(all="ignore"):
        return round32(1.0 / a.astype(np.float64))


def _rsq(a):
    with np.errstate(all="ignore"):
        return round32(1.0 / np.sqrt(a.astype(np.float64)))


def _sqrt(a):
    with np.errstate(all="ignore"):
        return round32(np.sqrt(a.astype(np.float64)))


VOP = {
    # float32
    "add_f32": (("f32", "f32"), "f32", _fop(lambda a, b: a + b)),
    "sub_f32": (("f32", "f32"), "f32", _fop(lambda a, b: a - b)),
    "subrev_f32": (("f32", "f32"), "f32", _fop(lambda a, b: b - a)),
    "mul_f32": (("f32", "f32"), "f32", _fop(lambda a, b: a * b)),
    "max_f32": (("f32", "f32"), "f32", _fop(_max_f32)),
    "min_f32": (("f32", "f32"), "f32", _fop(_min_f32)),
    "max3_f32": (("f32", "f32", "f32"), "f32", _fop(lambda a, b, c: _max_f32(_max_f32(a, b), c))),
    "min3_f32": (("f32", "f32", "f32"), "f32", _fop(lambda a, b, c: _min_f32(_min_f32(a, b), c))),
    "med3_f32": (("f32", "f32", "f32"), "f32", _fop(_med3)),
    "fma_f32": (("f32", "f32", "f32"), "f32", _fop(fma32)),
    "mad_f32": (("f32", "f32", "f32"), "f32", _fop(lambda a, b, c: (a * b) + c)),
    "exp_f32": (("f32",), "f32", _fop(_exp2)),
    "log_f32": (("f32",), "f32", _fop(_log2)),
    "rcp_f32": (("f32",), "f32", _fop(_rcp)),
    "rsq_f32": (("f32",), "f32", _fop(_rsq)),
    "sqrt_f32": (("f32",), "f32", _fop(_sqrt)),
    "trunc_f32": (("f32",), "f32", _fop(np.trunc)),
    "floor_f32": (("f32",), "f32", _fop(np.floor)),
    "ceil_f32": (("f32",), "f32", _fop(np.ceil)),
    "rndne_f32": (("f32",), "f32", _fop(np.rint)),
    "fract_f32": (("f32",), "f32", _fop(lambda a: np.minimum(a - np.floor(a), np.float32(0.99999994)))),
    "ldexp_f32": (("f32", "i32"), "f32", _ldexp),
    "cvt_f32_i32": (("i32",), "f32", lambda a: bits32(_i32(a).astype(np.float32))),
    "cvt_f32_u32": (("u32",), "f32", lambda a: bits32(np.asarray(a, U32).astype(np.float32))),
    "cvt_i32_f32": (("f32",), "i32", _cvt_i32_f32),
    "cvt_u32_f32": (("f32",), "u32", _cvt_u32_f32),
    "cvt_f16_f32": (("f32",), "f16", lambda a: _f32_to_f16_bits(f32(a))),
    "cvt_f32_f16": (("f16",), "f32", lambda a: bits32(_f16_to_f32(a))),
    "cvt_f32_ubyte0": (("u32",), "f32", lambda a: bits32((np.asarray(a, U32) & U32(0xFF)).astype(np.float32))),
    # integer
    "mov_b32": (("b32",), "b32", lambda a: np.asarray(a, U32)),
    "add_u32": (("u32", "u32"), "u32", lambda a, b: np.asarray(a, U32) + np.asarray(b, U32)),
    "sub_u32": (("u32", "u32"), "u32", lambda a, b: np.asarray(a, U32) - np.asarray(b, U32)),
    "subrev_u32": (("u32", "u32"), "u32", lambda a, b: np.asarray(b, U32) - np.asarray(a, U32)),
    "mul_lo_u32": (("u32", "u32"), "u32", lambda a, b: np.asarray(a, U32) * np.asarray(b, U32)),
    "mul_hi_u32": (("u32", "u32"), "u32", _mul_hi_u32),
    "mul_hi_i32": (("i32", "i32"), "i32", _mul_hi_i32),
    "mul_u32_u24": (("u32", "u32"), "u32", lambda a, b: _u24(a) * _u24(b)),
    "mul_i32_i24": (("i32", "i32"), "i32", lambda a, b: ((_i24(a) * _i24(b)) & M32).astype(U32)),
    "and_b32": (("b32", "b32"), "b32", lambda a, b: np.asarray(a, U32) & b),
    "or_b32": (("b32", "b32"), "b32", lambda a, b: np.asarray(a, U32) | b),
    "xor_b32": (("b32", "b32"), "b32", lambda a, b: np.asarray(a, U32) ^ b),
    "not_b32": (("b32",), "b32", lambda a: ~np.asarray(a, U32)),
    "lshlrev_b32": (("u32", "u32"), "u32", lambda a, b: np.asarray(b, U32) << _sh(a)),
    "lshrrev_b32": (("u32", "u32"), "u32", lambda a, b: np.asarray(b, U32) >> _sh(a)),
    "ashrrev_i32": (("u32", "i32"), "i32", lambda a, b: (_i32(b) >> _sh(a).astype(np.int32)).view(U32)),
    "max_i32": (("i32", "i32"), "i32", lambda a, b: np.maximum(_i32(a), _i32(b)).view(U32)),
    "min_i32": (("i32", "i32"), "i32", lambda a, b: np.minimum(_i32(a), _i32(b)).view(U32)),
    "max_u32": (("u32", "u32"), "u32", lambda a, b: np.maximum(np.asarray(a, U32), b)),
    "min_u32": (("u32", "u32"), "u32", lambda a, b: np.minimum(np.asarray(a, U32), b)),
    "bfe_u32": (("u32", "u32", "u32"), "u32", _bfe_u32),
    "bfe_i32": (("i32", "u32", "u32"), "i32", _bfe_i32),
    "bfi_b32": (("b32", "b32", "b32"), "b32", lambda a, b, c: (np.asarray(a, U32) & b) | (~np.asarray(a, U32) & c)),
    "add3_u32": (("u32", "u32", "u32"), "u32", lambda a, b, c: np.asarray(a, U32) + b + c),
    "and_or_b32": (("b32", "b32", "b32"), "b32", lambda a, b, c: (np.asarray(a, U32) & b) | c),
    "or3_b32": (("b32", "b32", "b32"), "b32", lambda a, b, c: np.asarray(a, U32) | b | c),
    "xor3_b32": (("b32", "b32", "b32"), "b32", lambda a, b, c: np.asarray(a, U32) ^ b ^ c),
    "lshl_or_b32": (("u32", "u32", "u32"), "u32", lambda a, b, c: (np.asarray(a, U32) << _sh(b)) | c),
    "lshl_add_u32": (("u32", "u32", "u32"), "u32", lambda a, b, c: (np.asarray(a, U32) << _sh(b)) + c),
    "add_lshl_u32": (("u32", "u32", "u32"), "u32", lambda a, b, c: (np.asarray(a, U32) + b) << _sh(c)),
    "xad_u32": (("u32", "u32", "u32"), "u32", lambda a, b, c: (np.asarray(a, U32) ^ b) + c),
    "mad_u32_u24": (("u32", "u32", "u32"), "u32", lambda a, b, c: _u24(a) * _u24(b) + c),
    "perm_b32": (("b32", "b32", "b32"), "b32", _perm_b32),
    "alignbit_b32": (("b32", "b32", "u32"), "b32", _alignbit),
    "bcnt_u32_b32": (("b32", "u32"), "u32", lambda a, b: _popcount32(a).astype(U32) + b),
    "max3_i32": (("i32", "i32", "i32"), "i32", lambda a, b, c: np.maximum(np.maximum(_i32(a), _i32(b)),
                                                                          _i32(c)).view(U32)),
    "min3_i32": (("i32", "i32", "i32"), "i32", lambda a, b, c: np.minimum(np.minimum(_i32(a), _i32(b)),
                                                                          _i32(c)).view(U32)),
    "med3_i32": (("i32", "i32", "i32"), "i32", lambda a, b, c: _med3(_i32(a), _i32(b), _i32(c)).view(U32)),
    # 64-bit
    "mov_b64": (("b64",), "b64", lambda a: np.asarray(a, np.uint64)),
    "lshlrev_b64": (("u32", "b64"), "b64", lambda a, b: _u64(b) << _sh64(a)),
    "lshrrev_b64": (("u32", "b64"), "b64", lambda a, b: _u64(b) >> _sh64(a)),
    "ashrrev_i64": (("u32", "b64"), "b64", lambda a, b: (_u64(b).view(np.int64) >> _sh64(a).astype(np.int64))
                    .view(np.uint64)),
    "lshl_add_u64": (("b64", "u32", "b64"), "b64", lambda a, b, c: (_u64(a) << _sh64(b)) + _u64(c)),
}
def _u16(x):
    return np.asarray(x, U32) & U32(0xFFFF)


def _bitop3(ttbl: int):
    """v_bitop3: bit i of D = TTBL[{S0[i], S1[i], S2[i]}] (S0 the index's high bit: S0 & S1 = 0xC0)."""
    def op(a, b, c):
        a, b, c = (np.asarray(x, U32) for x in (a, b, c))
        r = np.zeros(np.broadcast(a, b, c).shape, U32)
        for idx in range(8):
            if ttbl >> idx & 1:
                ta = a if idx & 4 else ~a
                tb = b if idx & 2 else ~b
                tc = c if idx & 1 else ~c
                r = r | (ta & tb & tc)
        return r
    return op


VOP.update({
    "max3_u32": (("u32", "u32", "u32"), "u32", lambda a, b, c: np.maximum(np.maximum(np.asarray(a, U32), b), c)),
    "min3_u32": (("u32", "u32", "u32"), "u32", lambda a, b, c: np.minimum(np.minimum(np.asarray(a, U32), b), c)),
    "rcp_iflag_f32": (("f32",), "f32", _fop(_rcp)),
    "lshlrev_b16": (("u16", "u16"), "u16", lambda a, b: (_u16(b) << (np.asarray(a, U32) & U32(15))) & U32(0xFFFF)),
    "lshrrev_b16": (("u16", "u16"), "u16", lambda a, b: _u16(b) >> (np.asarray(a, U32) & U32(15))),
    "max_u16": (("u16", "u16"), "u16", lambda a, b: np.maximum(_u16(a), _u16(b))),
    "min_u16": (("u16", "u16"), "u16", lambda a, b: np.minimum(_u16(a), _u16(b))),
    "add_u16": (("u16", "u16"), "u16", lambda a, b: (_u16(a) + _u16(b)) & U32(0xFFFF)),
    "cvt_pk_f16_f32": (("f32", "f32"), "b32", lambda a, b: _f32_to_f16_bits(f32(a))
                       | (_f32_to_f16_bits(f32(b)) << U32(16))),
    "div_fixup_f32": (("f32", "f32", "f32"), "f32", None),  # see compile_div
    "div_fmas_f32": None,
    "div_scale_f32": None,
})
_LANE = np.arange(64, dtype=np.uint64)
_BELOW_LO = np.where(_LANE < 32, (np.uint64(1) << np.minimum(_LANE, 31)) - np.uint64(1), np.uint64(0xFFFFFFFF))
_BELOW_HI = np.where(_LANE < 32, np.uint64(0), (np.uint64(1) << (_LANE - np.uint64(32)).clip(0, 31)) - np.uint64(1))
_BELOW_HI = np.where(_LANE < 32, _BELOW_HI, np.where(_LANE == 63, np.uint64(0x7FFFFFFF), _BELOW_HI))


# v_mbcnt_lo / hi: the number of set bits of S0 in the lanes below this one (low / high half of the mask) + S1
VOP.update({
    "mbcnt_lo_u32_b32": (("b32", "u32"), "u32", lambda a, b: (_popcount32(np.asarray(a, np.uint64) & _BELOW_LO)
                                                              + np.asarray(b, np.uint64)).astype(U32)),
    "mbcnt_hi_u32_b32": (("b32", "u32"), "u32", lambda a, b: (_popcount32(np.asarray(a, np.uint64) & _BELOW_HI)
                                                              + np.asarray(b, np.uint64)).astype(U32)),
})
VOP["mac_f32"] = VOP["fmac_f32"] = None  # special: dst is also src2
