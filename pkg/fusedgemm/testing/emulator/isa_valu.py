"""VALU instruction semantics (VOP1 / VOP2 / VOP3 / VOPC, SDWA and DPP forms), compiled per instruction into a
closure: the dispatch by mnemonic, the table-driven ops, output modifiers, SDWA, DPP, compares and v_cndmask.
The instructions with their own operand shapes live in isa_valu_special; the op table in isa_valu_ops."""
from __future__ import annotations

import re

import numpy as np

from .errors import UnknownInstruction
from .isa_regs import _check_mods, mask_reader, mask_writer, parse_mods, vdst_writer, vector_reader, vreg
from .isa_valu_ops import VOP, _f16_to_f32, _i32, bits32, f32
from .isa_valu_special import (compile_accvgpr, compile_bitop3, compile_carry, compile_cvt8, compile_div,
                               compile_fma_mix, compile_lane, compile_mad64, compile_pk16, compile_pk_f32)
from .operands import need, strip_modifiers

U32 = np.uint32
M32 = 0xFFFFFFFF


def _base_name(mnem: str) -> tuple[str, str]:
    """v_add_f32_e32 -> (add_f32, e32)."""
    name = mnem[2:]
    for suf in ("_e32", "_e64", "_sdwa", "_dpp"):
        if name.endswith(suf):
            return name[: -len(suf)], suf[1:]
    return name, ""


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
                            "bound_ctrl", "row_bcast15", "row_bcast31", "fi", "row_newbcast"})
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
    elif "row_newbcast" in mods:  # CDNA2+: lane n of each row of 16, to the whole row
        src = row_base + int(mods["row_newbcast"])
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
