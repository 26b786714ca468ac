"""Semantics of the CDNA3 / CDNA4 instructions our kernels use, compiled per instruction into a closure.

compile_instruction(ins, ctx) -> fn(wave) -> next instruction index or None (fall through). An instruction, a
form (modifier, operand kind) or an operand type the emulator does not model raises UnknownInstruction when
the kernel is loaded -- before anything executes -- naming it; never a silent guess.

Values: VGPR rows are uint32[64]; 32-bit sources are uint32 arrays or numpy uint32 scalars; floats are views.
Float rounding: f32 arithmetic is numpy float32 (IEEE, round to nearest even, denormals kept: the kernels'
float_denorm_mode_32 = 3); fma is exact (float64 product + TwoSum correction of the one rounding);
transcendental approximations (v_exp_f32, v_rcp_f32, v_log_f32, v_rsq_f32, v_sqrt_f32) are computed in float64
and rounded once (hardware is within 1 ulp: documented in docs/emulator.md).
"""
from __future__ import annotations

import re

import numpy as np

from .errors import UnknownInstruction
from .operands import Reg, const_bits, need, parse_reg, strip_modifiers
from .wave import int_to_mask, mask_to_int

U32 = np.uint32
M32 = 0xFFFFFFFF
_F32_SIGN = U32(0x80000000)
_F32_ABS = U32(0x7FFFFFFF)


class Ctx:
    """What compiling needs besides the instruction: arch, kernel name, the executor's services."""

    def __init__(self, arch: str, kernel: str, machine):
        self.arch, self.kernel, self.m = arch, kernel, machine


def _u(x):
    return np.asarray(x, dtype=U32) if not isinstance(x, (np.ndarray, np.generic)) else x


def f32(x):
    return np.asarray(x, dtype=U32).view(np.float32)


def bits32(x):
    return np.asarray(x, dtype=np.float32).view(U32)


# ---- operand readers --------------------------------------------------------------------------------------------
def scalar_reader(tok: str, ins, width: int = 32):
    """SALU source -> fn(w) -> int (width bits)."""
    if tok == "scc":
        return lambda w: w.scc
    r = parse_reg(tok)
    if r is not None:
        need(r.kind == "s", ins, f"scalar operand {tok}")
        i = r.index
        if width == 64:
            need(r.count == 2, ins, tok)
            return lambda w: w.s[i] | w.s[i + 1] << 32
        need(r.count == 1, ins, tok)
        return lambda w: w.s[i]
    c = const_bits(tok, "b64" if width == 64 else "b32")
    need(c is not None, ins, f"operand {tok}")
    return lambda w: c


def scalar_writer(tok: str, ins, width: int = 32):
    r = parse_reg(tok)
    need(r is not None and r.kind == "s", ins, f"scalar destination {tok}")
    i = r.index
    need(r.count == width // 32, ins, tok)
    touches_exec = i <= 127 <= i + r.count - 1 or i <= 126 <= i + r.count - 1
    if width == 64:
        if touches_exec:
            return lambda w, x: w.set_exec(x)

        def wr(w, x):
            w.s[i] = x & M32
            w.s[i + 1] = (x >> 32) & M32
        return wr
    if touches_exec:
        def wr_exec(w, x):
            w.s[i] = x & M32
            w.sync_exec()
        return wr_exec

    def wr32(w, x):
        w.s[i] = x & M32
    return wr32


_TYPE_BITS = {"f32": 32, "b32": 32, "i32": 32, "u32": 32, "f16": 16, "b16": 16, "i16": 16, "u16": 16,
              "f64": 64, "b64": 64, "i64": 64, "u64": 64}


def vector_reader(tok: str, ins, ty: str = "b32"):
    """VALU source -> fn(w) -> uint32[64] / uint32 scalar (64-bit types: uint64). Float modifiers applied."""
    tok, neg, ab, sext = strip_modifiers(tok)
    bits = _TYPE_BITS[ty]
    if (neg or ab) and not ty.startswith("f"):
        raise UnknownInstruction(f"unsupported form of {ins.text!r}: float modifier on a {ty} operand")
    need(not sext, ins, "sext() outside SDWA")
    r = parse_reg(tok)
    if r is not None:
        i = r.index
        if r.kind == "v":
            if bits == 64:
                need(r.count == 2, ins, tok)
                base = lambda w: w.v64(i)  # noqa: E731
            else:
                need(r.count == 1, ins, tok)
                base = lambda w: w.v[i]  # noqa: E731
        else:
            if bits == 64:
                need(r.count == 2, ins, tok)
                base = lambda w: np.uint64(w.s[i] | w.s[i + 1] << 32)  # noqa: E731
            else:
                need(r.count == 1, ins, tok)
                base = lambda w: U32(w.s[i])  # noqa: E731
    elif tok == "scc":
        base = lambda w: U32(w.scc)  # noqa: E731
    else:
        c = const_bits(tok, ty)
        need(c is not None, ins, f"operand {tok}")
        cv = np.uint64(c) if bits == 64 else U32(c & M32)
        base = lambda w: cv  # noqa: E731
    if not (neg or ab):
        return base
    sign = {32: U32(0x80000000), 16: U32(0x8000), 64: np.uint64(1 << 63)}[bits]
    if ab and neg:
        return lambda w: (base(w) & ~sign) ^ sign
    if ab:
        return lambda w: base(w) & ~sign
    return lambda w: base(w) ^ sign


def vreg(tok: str, ins, count: int | None = None) -> int:
    r = parse_reg(tok)
    need(r is not None and r.kind == "v", ins, f"vector register {tok}")
    if count is not None:
        need(r.count == count, ins, f"{tok}: expected {count} registers")
    return r.index


def vdst_writer(tok: str, ins, ty: str = "b32"):
    r = parse_reg(tok)
    need(r is not None and r.kind == "v", ins, f"vector destination {tok}")
    i = r.index
    if _TYPE_BITS[ty] == 64:
        need(r.count == 2, ins, tok)
        return lambda w, x: w.vwrite64(i, x)
    need(r.count == 1, ins, tok)
    return lambda w, x: w.vwrite(i, x)


def mask_writer(tok: str, ins):
    """A VOPC / carry-out destination: an SGPR pair (or vcc)."""
    wr = scalar_writer(tok, ins, 64)
    return lambda w, m: wr(w, mask_to_int(m & w.exec_mask))


def mask_reader(tok: str, ins):
    rd = scalar_reader(tok, ins, 64)
    return lambda w: int_to_mask(rd(w))


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


def _base_name(mnem: str) -> tuple[str, str]:
    """v_add_f32_e32 -> (add_f32, e32)."""
    name = mnem[2:]
    for suf in ("_e32", "_e64", "_sdwa", "_dpp"):
        if name.endswith(suf):
            return name[: -len(suf)], suf[1:]
    return name, ""


# ---- modifiers ------------------------------------------------------------------------------------------------
_MOD = re.compile(r"^(?P<k>[a-z_0-9]+)(?::(?P<v>.+))?$")


def parse_mods(ins) -> dict:
    out = {}
    for m in ins.modifiers:
        mm = _MOD.match(m)
        need(mm is not None, ins, f"modifier {m}")
        v = mm.group("v")
        if v is not None and v.startswith("["):
            v = [int(x) for x in v[1:-1].split(",")]
        out[mm.group("k")] = v if v is not None else True
    return out


def _check_mods(ins, mods: dict, allowed: set):
    bad = set(mods) - allowed
    need(not bad, ins, f"modifier(s) {sorted(bad)}")


def _omod_clamp(fn, mods, dst_ty, ins):
    clamp, mul = mods.get("clamp"), mods.get("mul"), 
    div = mods.get("div")
    if not (clamp or mul or div):
        return fn
    need(dst_ty == "f32", ins, "clamp / output modifier on a non-f32 result")
    scale = np.float32(int(mul) if mul else 1) / np.float32(int(div) if div else 1)

    def wrapped(*xs):
        r = f32(fn(*xs))
        with np.errstate(all="ignore"):
            if scale != 1:
                r = r * scale
            if clamp:
                r = np.where(np.isnan(r), np.float32(0), np.clip(r, np.float32(0), np.float32(1)))
        return bits32(r)
    return wrapped


# ---- SDWA -------------------------------------------------------------------------------------------------------
_SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8), "WORD_0": (0, 16),
        "WORD_1": (16, 16), "DWORD": (0, 32)}


def _sdwa_src(reader, sel: str, sext: bool, ty: str):
    off, width = _SEL[sel]
    if width == 32:
        return reader
    mask = U32((1 << width) - 1)
    o = U32(off)

    def rd(w):
        x = (np.asarray(reader(w), U32) >> o) & mask
        if sext:
            sign = U32(1 << (width - 1))
            x = (x ^ sign) - sign
        return x
    # f16 SDWA sources: the selected word is the f16 value
    return rd


def compile_valu(ins, ctx):
    mnem = ins.mnemonic
    name, enc = _base_name(mnem)
    mods = parse_mods(ins)
    ops = ins.operands
    if name.startswith("cmp_") or name.startswith("cmpx_"):
        return compile_vcmp(ins, name, enc, mods)
    if name == "cndmask_b32" and enc != "sdwa":
        return compile_cndmask(ins, enc, mods)
    if name in ("fmac_f32", "mac_f32"):
        _check_mods(ins, mods, {"clamp", "mul", "div"})
        d, a, b = ops
        ra, rb = vector_reader(a, ins, "f32"), vector_reader(b, ins, "f32")
        rc = vector_reader(d, ins, "f32")
        fn = _omod_clamp(VOP["fma_f32"][2], mods, "f32", ins)
        wd = vdst_writer(d, ins)
        return lambda w: wd(w, fn(ra(w), rb(w), rc(w)))
    if name in ("fmaak_f32", "fmamk_f32", "madak_f32", "madmk_f32"):
        d, a, b, c = ops
        ra, rb, rc = (vector_reader(x, ins, "f32") for x in (a, b, c))
        fn = VOP["fma_f32"][2]
        wd = vdst_writer(d, ins)
        # printed in operation order: fmaak D, S0, S1, K = S0 * S1 + K; fmamk D, S0, K, S1 = S0 * K + S1
        return lambda w: wd(w, fn(ra(w), rb(w), rc(w)))
    if name in ("add_co_u32", "sub_co_u32", "subrev_co_u32", "addc_co_u32", "subb_co_u32", "subbrev_co_u32"):
        return compile_carry(ins, name, mods)
    if name in ("mad_u64_u32", "mad_i64_i32"):
        return compile_mad64(ins, name, mods)
    if name in ("readfirstlane_b32", "readlane_b32", "writelane_b32"):
        return compile_lane(ins, name)
    if name.startswith("pk_") and name.endswith("_f32"):
        return compile_pk_f32(ins, name, mods)
    if name == "pk_mov_b32":
        return compile_pk_f32(ins, name, mods)
    if name.startswith("fma_mix"):
        return compile_fma_mix(ins, name, mods)
    if name.startswith("accvgpr_"):
        return compile_accvgpr(ins, name)
    if name.startswith("cvt_") and ("fp8" in name or "bf8" in name or "bf16" in name):
        return compile_cvt8(ins, name, mods, ctx)
    if name == "nop":
        return lambda w: None
    if name.startswith("div_"):
        return compile_div(ins, name, mods)
    if name.startswith("bitop3_"):
        return compile_bitop3(ins, name, mods)
    if name in ("pk_max_u16", "pk_min_u16", "pk_add_u16", "pk_sub_u16", "pk_max_i16", "pk_min_i16", "pack_b32_f16",
                "pk_lshlrev_b16", "pk_lshrrev_b16", "pk_mul_lo_u16"):
        return compile_pk16(ins, name, mods)
    if name == "cndmask_b32" and enc == "sdwa":
        return compile_cndmask(ins, enc, mods)
    spec = VOP.get(name)
    if spec is None:
        raise UnknownInstruction(f"{ctx.kernel}: instruction {mnem} ({ins.text!r}) is not modelled by the emulator")
    srcs_ty, dst_ty, fn = spec
    need(len(ops) == 1 + len(srcs_ty), ins, "operand count")
    if enc == "sdwa":
        _check_mods(ins, mods, {"dst_sel", "dst_unused", "src0_sel", "src1_sel", "clamp"})
        readers = []
        for i, (tok, ty) in enumerate(zip(ops[1:], srcs_ty)):
            _t, _n, _a, sext = strip_modifiers(tok)
            plain = tok.replace("sext(", "").rstrip(")") if sext else tok
            readers.append(_sdwa_src(vector_reader(plain, ins, ty), mods.get(f"src{i}_sel", "DWORD"), sext, ty))
        dsel, unused = mods.get("dst_sel", "DWORD"), mods.get("dst_unused", "UNUSED_PAD")
        off, width = _SEL[dsel]
        dreg = vreg(ops[0], ins, 1)
        need(unused in ("UNUSED_PAD", "UNUSED_PRESERVE"), ins, unused)
        fmask = U32(((1 << width) - 1) << off) if width < 32 else U32(M32)

        def sdwa(w):
            r = (np.asarray(fn(*(rd(w) for rd in readers)), U32) << U32(off)) & fmask
            if unused == "UNUSED_PRESERVE":
                r = r | (w.v[dreg] & ~fmask)
            w.vwrite(dreg, r)
        return sdwa
    if enc == "dpp":
        return compile_dpp(ins, fn, srcs_ty, dst_ty, mods)
    _check_mods(ins, mods, {"clamp", "mul", "div"})
    fn = _omod_clamp(fn, mods, dst_ty, ins)
    readers = [vector_reader(tok, ins, ty) for tok, ty in zip(ops[1:], srcs_ty)]
    wd = vdst_writer(ops[0], ins, dst_ty)
    if dst_ty in ("f16", "b16", "i16", "u16") and enc != "sdwa":
        fn16 = fn
        fn = lambda *xs: np.asarray(fn16(*xs), U32) & U32(0xFFFF)  # noqa: E731  gfx9: the high half is zeroed
    if len(readers) == 1:
        r0 = readers[0]
        return lambda w: wd(w, fn(r0(w)))
    if len(readers) == 2:
        r0, r1 = readers
        return lambda w: wd(w, fn(r0(w), r1(w)))
    r0, r1, r2 = readers
    return lambda w: wd(w, fn(r0(w), r1(w), r2(w)))


def compile_dpp(ins, fn, srcs_ty, dst_ty, mods):
    _check_mods(ins, mods, {"quad_perm", "row_shl", "row_shr", "row_ror", "row_mirror", "row_half_mirror",
                            "row_bcast", "wave_shl", "wave_shr", "wave_rol", "wave_ror", "row_mask", "bank_mask",
                            "bound_ctrl", "row_bcast15", "row_bcast31", "fi"})
    lanes = np.arange(64)
    row_base, in_row = lanes & ~15, lanes & 15
    if "quad_perm" in mods:
        qp = mods["quad_perm"]
        src = (lanes & ~3) + np.array(qp)[lanes & 3]
    elif "row_shl" in mods:
        n = int(mods["row_shl"])
        src = np.where(in_row + n < 16, lanes + n, -1)
    elif "row_shr" in mods:
        n = int(mods["row_shr"])
        src = np.where(in_row - n >= 0, lanes - n, -1)
    elif "row_ror" in mods:
        n = int(mods["row_ror"])
        src = row_base + (in_row + n) % 16  # rotate right: lane i reads lane (i + n)? see note below
        src = row_base + (in_row - n) % 16
    elif "row_mirror" in mods:
        src = row_base + 15 - in_row
    elif "row_half_mirror" in mods:
        src = (lanes & ~7) + 7 - (lanes & 7)
    elif "row_bcast" in mods and mods["row_bcast"] in ("15", 15):
        src = np.where((lanes >> 4) > 0, ((lanes >> 4) << 4) - 1, -1)
        src = np.where(src >= 0, src, -1)
    elif "row_bcast" in mods and mods["row_bcast"] in ("31", 31):
        src = np.where(lanes >= 32, 31, -1)
    elif "wave_shr" in mods:
        src = lanes - 1
    elif "wave_shl" in mods:
        src = np.where(lanes + 1 < 64, lanes + 1, -1)
    elif "wave_ror" in mods:
        src = (lanes - 1) % 64
    elif "wave_rol" in mods:
        src = (lanes + 1) % 64
    else:
        raise UnknownInstruction(f"unsupported DPP control in {ins.text!r}")
    row_mask = int(mods.get("row_mask", "0xf"), 0) if isinstance(mods.get("row_mask", "0xf"), str) else 0xF
    bank_mask = int(mods.get("bank_mask", "0xf"), 0) if isinstance(mods.get("bank_mask", "0xf"), str) else 0xF
    enabled = ((row_mask >> (lanes >> 4)) & 1).astype(bool) & ((bank_mask >> ((lanes >> 2) & 3)) & 1).astype(bool)
    bound_zero = "bound_ctrl" in mods
    valid = src >= 0
    srcc = np.where(valid, src, 0)
    ops = ins.operands
    readers = [vector_reader(tok, ins, ty) for tok, ty in zip(ops[1:], srcs_ty)]
    dreg = vreg(ops[0], ins, 1)
    r0 = readers[0]
    rest = readers[1:]

    def dpp(w):
        a = np.broadcast_to(np.asarray(r0(w), U32), (64,))
        # a source lane outside the wave or disabled by EXEC reads 0 with bound_ctrl, else the lane is not written
        src_ok = valid & w.exec_mask[srcc]
        moved = np.where(src_ok, a[srcc], U32(0))
        write = enabled & (src_ok | bound_zero)
        r = np.asarray(fn(moved, *(rd(w) for rd in rest)), U32)
        old = w.v[dreg].copy()
        w.vwrite(dreg, np.where(write, r, old))
    return dpp


_CMP_I = {"eq": np.equal, "ne": np.not_equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal,
          "lt": np.less, "le": np.less_equal}


def _cmp_fn(op: str, ty: str, ins):
    if ty in ("f32", "f16", "f64"):
        if op in ("f",):
            return lambda a, b: np.zeros(np.broadcast(a, b).shape, bool)
        if op == "tru":
            return lambda a, b: np.ones(np.broadcast(a, b).shape, bool)
        if op == "o":
            return lambda a, b: ~(np.isnan(a) | np.isnan(b))
        if op == "u":
            return lambda a, b: np.isnan(a) | np.isnan(b)
        neg = op.startswith("n") and op != "ne"
        base = op[1:] if neg else op
        if base == "eq" and neg:  # neq: !(a == b), true for NaN
            return lambda a, b: ~(a == b)
        f = {"eq": np.equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less,
             "le": np.less_equal, "ne": np.not_equal}.get(base)
        need(f is not None, ins, f"compare {op}")
        if neg:
            return lambda a, b: ~f(a, b)
        if base == "lg":
            return lambda a, b: (a != b) & ~(np.isnan(a) | np.isnan(b))
        return f
    f = _CMP_I.get(op)
    need(f is not None, ins, f"compare {op}")
    return f


def compile_vcmp(ins, name, enc, mods):
    m = re.match(r"^cmpx?_(\w+?)_([fiu]\d+)$", name)
    need(m is not None, ins, name)
    op, ty = m.groups()
    need(not name.startswith("cmpx"), ins, "v_cmpx (writes EXEC)")
    need(op != "class", ins, "v_cmp_class")
    f = _cmp_fn(op, ty, ins)
    conv = {"f32": lambda x: f32(x), "i32": lambda x: _i32(x), "u32": lambda x: np.asarray(x, U32),
            "f16": lambda x: _f16_to_f32(x), "i64": lambda x: np.asarray(x, np.uint64).view(np.int64),
            "u64": lambda x: np.asarray(x, np.uint64), "f64": lambda x: np.asarray(x, np.uint64).view(np.float64)}[ty]
    rty = {"i32": "i32", "u32": "u32", "f32": "f32", "f16": "f16", "i64": "i64", "u64": "u64", "f64": "f64"}[ty]
    _check_mods(ins, mods, {"clamp"} if enc != "sdwa" else {"src0_sel", "src1_sel"})
    d, a, b = ins.operands
    if enc == "sdwa":
        ra = _sdwa_src(vector_reader(strip_modifiers(a)[0], ins, rty), mods.get("src0_sel", "DWORD"),
                       strip_modifiers(a)[3], rty)
        rb = _sdwa_src(vector_reader(strip_modifiers(b)[0], ins, rty), mods.get("src1_sel", "DWORD"),
                       strip_modifiers(b)[3], rty)
    else:
        ra, rb = vector_reader(a, ins, rty), vector_reader(b, ins, rty)
    wm = mask_writer(d, ins)

    def cmp(w):
        with np.errstate(all="ignore"):
            r = f(conv(ra(w)), conv(rb(w)))
        wm(w, np.broadcast_to(r, (64,)))
    return cmp


def compile_cndmask(ins, enc, mods):
    d, a, b, c = ins.operands
    if enc == "sdwa":
        _check_mods(ins, mods, {"dst_sel", "dst_unused", "src0_sel", "src1_sel"})
        rm = mask_reader(c, ins)
        ra = _sdwa_src(vector_reader(a, ins), mods.get("src0_sel", "DWORD"), False, "b32")
        rb = _sdwa_src(vector_reader(b, ins), mods.get("src1_sel", "DWORD"), False, "b32")
        off, width = _SEL[mods.get("dst_sel", "DWORD")]
        unused = mods.get("dst_unused", "UNUSED_PAD")
        need(unused in ("UNUSED_PAD", "UNUSED_PRESERVE"), ins, unused)
        fmask = U32(((1 << width) - 1) << off) if width < 32 else U32(M32)
        dreg = vreg(d, ins, 1)

        def cnd_sdwa(w):
            r = (np.where(rm(w), rb(w), ra(w)).astype(U32) << U32(off)) & fmask
            if unused == "UNUSED_PRESERVE":
                r = r | (w.v[dreg] & ~fmask)
            w.vwrite(dreg, r)
        return cnd_sdwa
    _check_mods(ins, mods, set())
    ra, rb = vector_reader(a, ins, "f32" if strip_modifiers(a)[1] or strip_modifiers(a)[2] else "b32"), \
        vector_reader(b, ins, "f32" if strip_modifiers(b)[1] or strip_modifiers(b)[2] else "b32")
    rm = mask_reader(c, ins)
    wd = vdst_writer(d, ins)
    return lambda w: wd(w, np.where(rm(w), rb(w), ra(w)).astype(U32))


def compile_carry(ins, name, mods):
    _check_mods(ins, mods, {"clamp"} - {"clamp"})
    ops = ins.operands
    if name in ("add_co_u32", "sub_co_u32", "subrev_co_u32"):
        d, cout, a, b = ops
        cin = None
    else:
        d, cout, a, b, cin = ops
    ra, rb = vector_reader(a, ins, "u32"), vector_reader(b, ins, "u32")
    rc = mask_reader(cin, ins) if cin else None
    wd = vdst_writer(d, ins)
    wc = mask_writer(cout, ins)

    def carry(w):
        x, y = np.asarray(ra(w), np.int64), np.asarray(rb(w), np.int64)
        c = rc(w).astype(np.int64) if rc else 0
        if name.startswith("add"):
            r = x + y + c
            co = r > M32
        elif name.startswith("subrev") or name == "subbrev_co_u32":
            r = y - x - c
            co = r < 0
        else:
            r = x - y - c
            co = r < 0
        wd(w, (r & M32).astype(U32))
        wc(w, np.broadcast_to(co, (64,)))
    return carry


def compile_mad64(ins, name, mods):
    _check_mods(ins, mods, set())
    d, cout, a, b, c = ins.operands
    signed = name == "mad_i64_i32"
    ra, rb = vector_reader(a, ins, "i32" if signed else "u32"), vector_reader(b, ins, "i32" if signed else "u32")
    rc = vector_reader(c, ins, "b64")
    wd = vdst_writer(d, ins, "b64")
    wc = mask_writer(cout, ins)

    def mad(w):
        if signed:
            p = _i32(ra(w)).astype(np.int64) * _i32(rb(w)).astype(np.int64)
            r = p.view(np.uint64) + np.asarray(rc(w), np.uint64)
        else:
            p = np.asarray(ra(w), np.uint64) * np.asarray(rb(w), np.uint64)
            r = p + np.asarray(rc(w), np.uint64)
        wd(w, r)
        wc(w, np.zeros(64, bool))  # carry-out of the 64-bit add: not modelled (no kernel reads it)
    return mad


def compile_lane(ins, name):
    ops = ins.operands
    if name == "readfirstlane_b32":
        d, a = ops
        ra = vector_reader(a, ins)
        wr = scalar_writer(d, ins)

        def rfl(w):
            v = np.broadcast_to(np.asarray(ra(w), U32), (64,))
            idx = np.flatnonzero(w.exec_mask)
            wr(w, int(v[idx[0] if len(idx) else 0]))
        return rfl
    if name == "readlane_b32":
        d, a, lane = ops
        ra = vector_reader(a, ins)
        rl = scalar_reader(lane, ins)
        wr = scalar_writer(d, ins)
        return lambda w: wr(w, int(np.broadcast_to(np.asarray(ra(w), U32), (64,))[rl(w) & 63]))
    d, a, lane = ops  # writelane: ignores EXEC
    ra = scalar_reader(a, ins)
    rl = scalar_reader(lane, ins)
    di = vreg(d, ins, 1)

    def wl(w):
        w.v[di, rl(w) & 63] = ra(w) & M32
    return wl


def compile_accvgpr(ins, name):
    d, a = ins.operands
    ra = vector_reader(a, ins)
    wd = vdst_writer(d, ins)
    return lambda w: wd(w, ra(w))


def compile_pk_f32(ins, name, mods):
    """v_pk_{add,mul,fma}_f32 and v_pk_mov_b32: two f32 lanes in a register pair; op_sel picks halves."""
    _check_mods(ins, mods, {"op_sel", "op_sel_hi", "neg_lo", "neg_hi", "clamp"})
    need("clamp" not in mods, ins, "clamp")
    ops = ins.operands
    nsrc = len(ops) - 1
    op_sel = mods.get("op_sel", [0] * nsrc)
    op_sel_hi = mods.get("op_sel_hi", [1] * nsrc)
    neg_lo = mods.get("neg_lo", [0] * nsrc)
    neg_hi = mods.get("neg_hi", [0] * nsrc)
    srcs = []
    for t in ops[1:]:
        r = parse_reg(t)
        if r is not None:
            need(r.count == 2 or r.kind == "s", ins, t)
            srcs.append(r)
        else:
            c = const_bits(t, "f32")
            need(c is not None, ins, t)
            srcs.append(c)
    di = vreg(ops[0], ins, 2)

    def half(w, s, hi):
        if isinstance(s, Reg):
            if s.kind == "v":
                return w.v[s.index + hi]
            return U32(w.s[s.index + hi])
        return U32(s)  # an inline constant feeds both halves

    if name == "pk_mov_b32":
        # v_pk_mov_b32 D, S0, S1 op_sel:[a,b]: D.lo = S0[a], D.hi = S1[b]
        def mov(w):
            lo = np.broadcast_to(half(w, srcs[0], op_sel[0]), (64,)).copy()
            hi = np.broadcast_to(half(w, srcs[1], op_sel[1]), (64,)).copy()
            w.vwrite(di, lo)
            w.vwrite(di + 1, hi)
        return mov
    f = {"pk_add_f32": lambda a, b: a + b, "pk_mul_f32": lambda a, b: a * b, "pk_fma_f32": fma32}.get(name)
    need(f is not None, ins, name)

    def get(w, i, hi):
        x = np.asarray(half(w, srcs[i], (op_sel_hi if hi else op_sel)[i]), U32)
        if (neg_hi if hi else neg_lo)[i]:
            x = x ^ _F32_SIGN
        return f32(x)

    def pk(w):
        with np.errstate(all="ignore"):
            lo = np.asarray(f(*(get(w, i, 0) for i in range(nsrc))), np.float32)
            hi = np.asarray(f(*(get(w, i, 1) for i in range(nsrc))), np.float32)
        w.vwrite(di, np.broadcast_to(bits32(lo), (64,)))
        w.vwrite(di + 1, np.broadcast_to(bits32(hi), (64,)))
    return pk


def compile_fma_mix(ins, name, mods):
    """v_fma_mix{lo,hi}_f16 / v_fma_mix_f32: each source f32, or f16 (low or high half) where op_sel_hi says."""
    _check_mods(ins, mods, {"op_sel", "op_sel_hi", "clamp"})
    need("clamp" not in mods, ins, "clamp")
    d, *srcs = ins.operands
    op_sel = mods.get("op_sel", [0, 0, 0])
    op_sel_hi = mods.get("op_sel_hi", [0, 0, 0])
    readers = [vector_reader(s, ins, "f32") if not op_sel_hi[i] else None for i, s in enumerate(srcs)]
    raw = []
    for i, s in enumerate(srcs):
        t, neg, ab, _ = strip_modifiers(s)
        raw.append((vector_reader(t, ins, "b32"), neg, ab))
    di = vreg(d, ins, 1)

    def val(w, i):
        if not op_sel_hi[i]:
            return f32(readers[i](w)).astype(np.float64)
        rd, neg, ab = raw[i]
        x = np.asarray(rd(w), U32)
        x = (x >> U32(16)) if op_sel[i] else (x & U32(0xFFFF))
        v = _f16_to_f32(x).astype(np.float64)
        if ab:
            v = np.abs(v)
        if neg:
            v = -v
        return v

    def mix(w):
        a, b, c = (val(w, i) for i in range(3))
        with np.errstate(all="ignore"):
            r = a * b + c  # a*b exact in float64 (f32 x f32); one rounding of the sum then the format's
            if name == "fma_mix_f32":
                w.vwrite(di, np.broadcast_to(bits32(r.astype(np.float32)), (64,)))
                return
            h = np.broadcast_to(r.astype(np.float16).view(np.uint16).astype(U32), (64,))
        old = w.v[di]
        if name == "fma_mixlo_f16":
            w.vwrite(di, (old & U32(0xFFFF0000)) | h)
        else:
            w.vwrite(di, (old & U32(0xFFFF)) | (h << U32(16)))
    return mix


def compile_cvt8(ins, name, mods, ctx):
    from . import numerics

    ops = ins.operands
    arch = ctx.arch
    _check_mods(ins, mods, {"op_sel", "clamp"} if "sdwa" not in ins.mnemonic else {"src0_sel", "dst_sel",
                                                                                     "dst_unused"})
    if name in ("cvt_pk_fp8_f32", "cvt_pk_bf8_f32"):
        d, a, b = ops
        ra, rb = vector_reader(a, ins, "f32"), vector_reader(b, ins, "f32")
        di = vreg(d, ins, 1)
        hi = bool(mods.get("op_sel", [0, 0, 0])[-1]) if isinstance(mods.get("op_sel"), list) else False
        f = getattr(numerics, "v_" + name)
        clamp = bool(mods.get("clamp"))

        def cvt(w):
            r = np.broadcast_to(np.asarray(f(np.broadcast_to(ra(w), (64,)), np.broadcast_to(rb(w), (64,)),
                                             arch=arch, clamp=clamp), U32) & U32(0xFFFF), (64,))
            old = w.v[di]
            w.vwrite(di, (old & U32(0xFFFF0000)) | r if not hi else (old & U32(0xFFFF)) | (r << U32(16)))
        return cvt
    if name in ("cvt_f32_fp8", "cvt_f32_bf8"):
        d, a = ops
        sel = 0
        if "sdwa" in ins.mnemonic:
            sel = {"BYTE_0": 0, "BYTE_1": 1, "BYTE_2": 2, "BYTE_3": 3, "DWORD": 0}[mods.get("src0_sel", "DWORD")]
        ra = vector_reader(a, ins, "b32")
        wd = vdst_writer(d, ins)
        f = getattr(numerics, "v_" + name)
        return lambda w: wd(w, np.asarray(f(np.broadcast_to(ra(w), (64,)), sel, arch=arch), U32))
    if name == "cvt_pk_bf16_f32":
        d, a, b = ops
        ra, rb = vector_reader(a, ins, "f32"), vector_reader(b, ins, "f32")
        wd = vdst_writer(d, ins)
        return lambda w: wd(w, np.asarray(numerics.v_cvt_pk_bf16_f32(np.broadcast_to(ra(w), (64,)),
                                                                     np.broadcast_to(rb(w), (64,))), U32))
    raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled")


def compile_bitop3(ins, name, mods):
    _check_mods(ins, mods, {"bitop3"})
    ttbl = int(mods.get("bitop3", "0"), 0)
    d, a, b, c = ins.operands
    fn = _bitop3(ttbl)
    readers = [vector_reader(x, ins, "b32") for x in (a, b, c)]
    wd = vdst_writer(d, ins)
    if name == "bitop3_b16":
        return lambda w: wd(w, fn(*(rd(w) for rd in readers)) & U32(0xFFFF))
    need(name == "bitop3_b32", ins, name)
    return lambda w: wd(w, fn(*(rd(w) for rd in readers)))


_PK16 = {
    "pk_max_u16": lambda a, b: np.maximum(a, b), "pk_min_u16": lambda a, b: np.minimum(a, b),
    "pk_add_u16": lambda a, b: (a + b) & 0xFFFF, "pk_sub_u16": lambda a, b: (a - b) & 0xFFFF,
    "pk_max_i16": lambda a, b: np.maximum((a ^ 0x8000) - 0x8000, (b ^ 0x8000) - 0x8000) & 0xFFFF,
    "pk_min_i16": lambda a, b: np.minimum((a ^ 0x8000) - 0x8000, (b ^ 0x8000) - 0x8000) & 0xFFFF,
    "pk_lshlrev_b16": lambda a, b: (b << (a & 15)) & 0xFFFF, "pk_lshrrev_b16": lambda a, b: b >> (a & 15),
    "pk_mul_lo_u16": lambda a, b: (a * b) & 0xFFFF,
}


def compile_pk16(ins, name, mods):
    """VOP3P packed 16-bit integer ops and v_pack_b32_f16: op_sel / op_sel_hi pick each source's half."""
    _check_mods(ins, mods, {"op_sel", "op_sel_hi"})
    d, a, b = ins.operands
    if name == "pack_b32_f16":
        op_sel = mods.get("op_sel", [0, 0, 0])
        ra, rb = vector_reader(a, ins, "f16"), vector_reader(b, ins, "f16")
        wd = vdst_writer(d, ins)
        sa, sb = U32(16 * op_sel[0]), U32(16 * op_sel[1])
        return lambda w: wd(w, ((np.asarray(ra(w), U32) >> sa) & U32(0xFFFF))
                            | (((np.asarray(rb(w), U32) >> sb) & U32(0xFFFF)) << U32(16)))
    op_sel = mods.get("op_sel", [0, 0])
    op_sel_hi = mods.get("op_sel_hi", [1, 1])
    for t in (a, b):
        need(parse_reg(t) is not None, ins, f"a constant operand of a packed op ({t})")
    ra, rb = vector_reader(a, ins), vector_reader(b, ins)
    f = _PK16[name]
    wd = vdst_writer(d, ins)

    def half(x, hi):
        return ((np.asarray(x, np.int64) >> (16 * hi)) & 0xFFFF)

    def pk(w):
        x, y = ra(w), rb(w)
        lo = f(half(x, op_sel[0]), half(y, op_sel[1])) & 0xFFFF
        hi = f(half(x, op_sel_hi[0]), half(y, op_sel_hi[1])) & 0xFFFF
        wd(w, (lo | (hi << 16)).astype(U32))
    return pk


def _exp_f32(x):
    return ((np.asarray(x, U32) >> U32(23)) & U32(0xFF)).astype(np.int64)


def compile_div(ins, name, mods):
    """The division sequence: v_div_scale_f32, v_div_fmas_f32, v_div_fixup_f32 (CDNA3 ISA pseudo-code).
    The scaling cases (operands near the float range's ends) raise instead of guessing."""
    _check_mods(ins, mods, set())
    ops = ins.operands
    if name == "div_scale_f32":
        d, vcc, s0, s1, s2 = ops
        r0, r1, r2 = (vector_reader(x, ins, "f32") for x in (s0, s1, s2))
        wd = vdst_writer(d, ins)
        wm = mask_writer(vcc, ins)

        def scale(w):
            x0, x1, x2 = (np.broadcast_to(np.asarray(r(w), U32), (64,)) for r in (r0, r1, r2))
            f1, f2 = f32(x1), f32(x2)
            e1, e2 = _exp_f32(x1), _exp_f32(x2)
            with np.errstate(all="ignore"):
                q = f2.astype(np.float64) / f1.astype(np.float64)
                r1d = 1.0 / f1.astype(np.float64)
            tiny = 2.0 ** -126
            special = (f1 == 0) | (f2 == 0) | (e2 - e1 >= 96) | (e1 == 0) | (np.abs(r1d) < tiny) \
                | ((np.abs(q) < tiny) & (q != 0)) | (e2 <= 23)
            zero = (f1 == 0) | (f2 == 0)  # D = NaN; v_div_fixup_f32 then returns the special quotient
            finite = np.isfinite(f1) & np.isfinite(f2)
            if np.any(special & finite & ~zero & w.exec_mask):
                raise UnknownInstruction(f"{ins.text}: the scaling cases of v_div_scale_f32 (operands near the ends "
                                         "of the float range) are not modelled")
            wd(w, np.where(zero, U32(0x7FC00000), x0))
            wm(w, np.zeros(64, bool))
        return scale
    if name == "div_fmas_f32":
        d, s0, s1, s2 = ops
        r0, r1, r2 = (vector_reader(x, ins, "f32") for x in (s0, s1, s2))
        wd = vdst_writer(d, ins)

        def fmas(w):
            if (w.s[106] | w.s[107] << 32) & w.exec_int():
                raise UnknownInstruction(f"{ins.text}: v_div_fmas_f32 with VCC set (scaled division) is not modelled")
            wd(w, bits32(fma32(f32(r0(w)), f32(r1(w)), f32(r2(w)))))
        return fmas
    need(name == "div_fixup_f32", ins, name)
    d, s0, s1, s2 = ops
    r0, r1, r2 = (vector_reader(x, ins, "f32") for x in (s0, s1, s2))
    wd = vdst_writer(d, ins)

    def fixup(w):
        q, den, num = (np.broadcast_to(f32(r(w)), (64,)) for r in (r0, r1, r2))
        sign = np.signbit(den) ^ np.signbit(num)
        with np.errstate(all="ignore"):
            inf = np.where(sign, np.float32(-np.inf), np.float32(np.inf))
            zero = np.where(sign, np.float32(-0.0), np.float32(0.0))
            mag = np.where(sign, -np.abs(q), np.abs(q))
            r = np.where(np.isnan(den) | np.isnan(num), np.float32(np.nan),
                np.where(((den == 0) & (num == 0)) | (np.isinf(den) & np.isinf(num)), np.float32(np.nan),
                np.where((den == 0) | np.isinf(num), inf,
                np.where(np.isinf(den) | (num == 0), zero, mag))))
        wd(w, bits32(r.astype(np.float32)))
    return fixup
