"""VALU instructions with their own operand shapes: carry in / out, 64-bit mad, lane reads / writes, accvgpr moves,
packed f32 and 16-bit ops, mixed-precision fma, fp8 / bf8 / bf16 conversions, v_bitop3 and the division sequence."""
from __future__ import annotations

import numpy as np

from .errors import UnknownInstruction
from .isa_regs import (_check_mods, mask_reader, mask_writer, scalar_reader, scalar_writer, vdst_writer,
                       vector_reader, vreg)
from .isa_valu_ops import _F32_SIGN, _bitop3, _f16_to_f32, _i32, bits32, f32, fma32
from .operands import Reg, const_bits, need, parse_reg, strip_modifiers

U32 = np.uint32
M32 = 0xFFFFFFFF


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

    def both(w, i):
        # the low and the high halves as one [128] operand: one elementwise evaluation for both results
        return np.concatenate((np.broadcast_to(get(w, i, 0), (64,)), np.broadcast_to(get(w, i, 1), (64,))))

    def pk(w):
        with np.errstate(all="ignore"):
            r = bits32(np.asarray(f(*(both(w, i) for i in range(nsrc))), np.float32))
        w.vwrite(di, r[:64])
        w.vwrite(di + 1, r[64:])
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
