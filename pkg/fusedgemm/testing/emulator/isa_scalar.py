"""SALU (SOP1 / SOP2 / SOPK / SOPC) and program control (SOPP) semantics."""
from __future__ import annotations

import re

from .errors import UnknownInstruction
from .isa_regs import scalar_reader, scalar_writer
from .operands import need

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1


def _s32(x):
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def _s64(x):
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def _bfe(x, ctl, width_bits, signed):
    off = ctl & (width_bits - 1)
    w = (ctl >> 16) & 0x7F
    if w == 0:
        return 0
    v = (x >> off) & ((1 << w) - 1)
    if signed and v >> (w - 1):
        v -= 1 << w
    return v


# op -> (width, fn(a, b) -> (result, scc or None))  (scc None: unchanged)
def _bits(width):
    return M32 if width == 32 else M64


SOP2 = {}
for _w, _sfx in ((32, "b32"), (64, "b64")):
    _m = _bits(_w)
    SOP2[f"and_{_sfx}"] = (_w, lambda a, b, m=_m: (a & b, None))
    SOP2[f"or_{_sfx}"] = (_w, lambda a, b, m=_m: (a | b, None))
    SOP2[f"xor_{_sfx}"] = (_w, lambda a, b, m=_m: (a ^ b, None))
    SOP2[f"andn2_{_sfx}"] = (_w, lambda a, b, m=_m: (a & ~b & m, None))
    SOP2[f"orn2_{_sfx}"] = (_w, lambda a, b, m=_m: ((a | ~b) & m, None))
    SOP2[f"nand_{_sfx}"] = (_w, lambda a, b, m=_m: (~(a & b) & m, None))
    SOP2[f"nor_{_sfx}"] = (_w, lambda a, b, m=_m: (~(a | b) & m, None))
    SOP2[f"xnor_{_sfx}"] = (_w, lambda a, b, m=_m: (~(a ^ b) & m, None))
LOGIC = set(SOP2)  # these set SCC = result != 0
SOP2.update({
    "lshl_b32": (32, lambda a, b: ((a << (b & 31)) & M32, None)),
    "lshr_b32": (32, lambda a, b: (a >> (b & 31), None)),
    "ashr_i32": (32, lambda a, b: (_s32(a) >> (b & 31) & M32, None)),
    "lshl_b64": (64, lambda a, b: ((a << (b & 63)) & M64, None)),
    "lshr_b64": (64, lambda a, b: (a >> (b & 63), None)),
    "ashr_i64": (64, lambda a, b: (_s64(a) >> (b & 63) & M64, None)),
    "add_u32": (32, lambda a, b: ((a + b) & M32, int(a + b > M32))),
    "sub_u32": (32, lambda a, b: ((a - b) & M32, int(b > a))),
    "add_i32": (32, lambda a, b: ((a + b) & M32, int(not -2**31 <= _s32(a) + _s32(b) < 2**31))),
    "sub_i32": (32, lambda a, b: ((a - b) & M32, int(not -2**31 <= _s32(a) - _s32(b) < 2**31))),
    "mul_i32": (32, lambda a, b: ((a * b) & M32, "keep")),
    "mul_hi_u32": (32, lambda a, b: ((a * b) >> 32, "keep")),
    "mul_hi_i32": (32, lambda a, b: ((_s32(a) * _s32(b)) >> 32 & M32, "keep")),
    "min_i32": (32, lambda a, b: (a if _s32(a) < _s32(b) else b, int(_s32(a) < _s32(b)))),
    "max_i32": (32, lambda a, b: (a if _s32(a) > _s32(b) else b, int(_s32(a) > _s32(b)))),
    "min_u32": (32, lambda a, b: (min(a, b), int(a < b))),
    "max_u32": (32, lambda a, b: (max(a, b), int(a > b))),
    "bfe_u32": (32, lambda a, b: (_bfe(a, b, 32, False) & M32, None)),
    "bfe_i32": (32, lambda a, b: (_bfe(a, b, 32, True) & M32, None)),
    "bfe_u64": (64, lambda a, b: (_bfe(a, b, 64, False) & M64, None)),
    "bfm_b32": (32, lambda a, b: ((((1 << (a & 31)) - 1) << (b & 31)) & M32, "keep")),
    "lshl1_add_u32": (32, lambda a, b: (((a << 1) + b) & M32, int((a << 1) + b > M32))),
    "lshl2_add_u32": (32, lambda a, b: (((a << 2) + b) & M32, int((a << 2) + b > M32))),
    "lshl3_add_u32": (32, lambda a, b: (((a << 3) + b) & M32, int((a << 3) + b > M32))),
    "lshl4_add_u32": (32, lambda a, b: (((a << 4) + b) & M32, int((a << 4) + b > M32))),
    "pack_ll_b32_b16": (32, lambda a, b: ((a & 0xFFFF) | (b & 0xFFFF) << 16, "keep")),
    "pack_lh_b32_b16": (32, lambda a, b: ((a & 0xFFFF) | (b & 0xFFFF0000), "keep")),
    "pack_hh_b32_b16": (32, lambda a, b: ((a >> 16) | (b & 0xFFFF0000), "keep")),
    "absdiff_i32": (32, lambda a, b: (abs(_s32(a) - _s32(b)) & M32, None)),
})
SHIFT_SCC = {"lshl_b32", "lshr_b32", "ashr_i32", "lshl_b64", "lshr_b64", "ashr_i64", "bfe_u32", "bfe_i32", "bfe_u64",
             "absdiff_i32"}

SOP1 = {
    "mov_b32": (32, lambda a: (a, "keep")),
    "mov_b64": (64, lambda a: (a, "keep")),
    "not_b32": (32, lambda a: (~a & M32, None)),
    "not_b64": (64, lambda a: (~a & M64, None)),
    "brev_b32": (32, lambda a: (int(f"{a:032b}"[::-1], 2), "keep")),
    "bcnt1_i32_b32": (32, lambda a: (bin(a).count("1"), None)),
    "bcnt1_i32_b64": (64, lambda a: (bin(a).count("1"), None)),
    "ff1_i32_b32": (32, lambda a: ((a & -a).bit_length() - 1 & M32 if a else M32, "keep")),
    "ff1_i32_b64": (64, lambda a: ((a & -a).bit_length() - 1 & M32 if a else M32, "keep")),
    "flbit_i32_b32": (32, lambda a: (32 - a.bit_length() if a else M32, "keep")),
    "flbit_i32_b64": (64, lambda a: (64 - a.bit_length() if a else M32, "keep")),
    "sext_i32_i8": (32, lambda a: ((a & 0xFF) - ((a & 0x80) << 1) & M32, "keep")),
    "sext_i32_i16": (32, lambda a: ((a & 0xFFFF) - ((a & 0x8000) << 1) & M32, "keep")),
    "abs_i32": (32, lambda a: (abs(_s32(a)) & M32, None)),
}
ONE_SCC = {"not_b32", "not_b64", "bcnt1_i32_b32", "bcnt1_i32_b64", "abs_i32"}

SAVEEXEC = {  # s_<op>_saveexec_b64: D = EXEC; EXEC = f(S0, EXEC); SCC = EXEC != 0
    "and_saveexec_b64": lambda s, e: s & e,
    "or_saveexec_b64": lambda s, e: s | e,
    "xor_saveexec_b64": lambda s, e: s ^ e,
    "andn2_saveexec_b64": lambda s, e: s & ~e & M64,
    "orn2_saveexec_b64": lambda s, e: (s | ~e) & M64,
    "nand_saveexec_b64": lambda s, e: ~(s & e) & M64,
    "nor_saveexec_b64": lambda s, e: ~(s | e) & M64,
    "xnor_saveexec_b64": lambda s, e: ~(s ^ e) & M64,
    "andn1_saveexec_b64": lambda s, e: ~s & e & M64,
    "orn1_saveexec_b64": lambda s, e: (~s | e) & M64,
}

_SCMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
         "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def compile_salu(ins, ctx):
    name = ins.mnemonic[2:]
    ops = ins.operands
    if name in SAVEEXEC:
        f = SAVEEXEC[name]
        d, s = ops
        rs = scalar_reader(s, ins, 64)
        wd = scalar_writer(d, ins, 64)

        def saveexec(w):
            old = w.exec_int()
            src = rs(w)
            wd(w, old)
            new = f(src, old)
            w.set_exec(new)
            w.scc = int(new != 0)
        return saveexec
    if name in SOP2:
        width, f = SOP2[name]
        d, a, b = ops
        bw = 32 if name.startswith(("lshl_b64", "lshr_b64", "ashr_i64", "bfe_u64")) else width
        ra, rb = scalar_reader(a, ins, width), scalar_reader(b, ins, bw)
        wd = scalar_writer(d, ins, width)
        logic = name in LOGIC or name in SHIFT_SCC

        def sop2(w):
            r, scc = f(ra(w), rb(w))
            wd(w, r)
            if scc is None:
                w.scc = int(r != 0) if logic else w.scc
            elif scc != "keep":
                w.scc = scc
        return sop2
    if name in ("addc_u32", "subb_u32"):
        d, a, b = ops
        ra, rb = scalar_reader(a, ins), scalar_reader(b, ins)
        wd = scalar_writer(d, ins)
        if name == "addc_u32":
            def addc(w):
                r = ra(w) + rb(w) + w.scc
                wd(w, r & M32)
                w.scc = int(r > M32)
            return addc

        def subb(w):
            r = ra(w) - rb(w) - w.scc
            wd(w, r & M32)
            w.scc = int(r < 0)
        return subb
    if name in SOP1:
        width, f = SOP1[name]
        d, a = ops
        ra = scalar_reader(a, ins, width)
        wd = scalar_writer(d, ins, 32 if name.startswith(("bcnt", "ff1", "flbit")) else width)

        def sop1(w):
            r, scc = f(ra(w))
            wd(w, r)
            if scc is None:
                w.scc = int(r != 0)
        return sop1
    if name in ("cselect_b32", "cselect_b64"):
        width = 32 if name.endswith("32") else 64
        d, a, b = ops
        ra, rb = scalar_reader(a, ins, width), scalar_reader(b, ins, width)
        wd = scalar_writer(d, ins, width)
        return lambda w: wd(w, ra(w) if w.scc else rb(w))
    m = re.match(r"^cmp_(eq|lg|gt|ge|lt|le)_(i32|u32|u64)$", name)
    if m:
        op, ty = m.groups()
        f = _SCMP[op]
        width = 64 if ty == "u64" else 32
        a, b = ops
        ra, rb = scalar_reader(a, ins, width), scalar_reader(b, ins, width)
        if ty == "i32":
            def cmp_i(w):
                w.scc = int(f(_s32(ra(w)), _s32(rb(w))))
            return cmp_i

        def cmp_u(w):
            w.scc = int(f(ra(w), rb(w)))
        return cmp_u
    m = re.match(r"^bitcmp([01])_b(32|64)$", name)
    if m:
        a, b = ops
        want, width = int(m.group(1)), int(m.group(2))
        ra, rb = scalar_reader(a, ins, width), scalar_reader(b, ins)

        def bitcmp(w):
            w.scc = int((ra(w) >> (rb(w) & (width - 1)) & 1) == want)
        return bitcmp
    m = re.match(r"^bitset([01])_b(32|64)$", name)
    if m:  # D.u[S0.u[4:0] (b64: [5:0])] = 0 / 1; the other bits of D kept, SCC unchanged (SOP1 S_BITSET0 / S_BITSET1)
        d, a = ops
        value, width = int(m.group(1)), int(m.group(2))
        ra, rd = scalar_reader(a, ins), scalar_reader(d, ins, width)
        wd = scalar_writer(d, ins, width)

        def bitset(w):
            bit = 1 << (ra(w) & (width - 1))
            old = rd(w)
            wd(w, old | bit if value else old & ~bit & _bits(width))
        return bitset
    # SOPK
    if name in ("movk_i32", "cmovk_i32", "addk_i32", "mulk_i32"):
        d, k = ops
        kv = int(k, 0)
        kv = kv - 0x10000 if kv >= 0x8000 else kv
        wd = scalar_writer(d, ins)
        if name == "movk_i32":
            return lambda w: wd(w, kv & M32)
        if name == "cmovk_i32":
            return lambda w: wd(w, kv & M32) if w.scc else None
        rd = scalar_reader(d, ins)
        if name == "addk_i32":
            def addk(w):
                a = rd(w)
                r = _s32(a) + kv
                wd(w, r & M32)
                w.scc = int(not -2**31 <= r < 2**31)
            return addk
        return lambda w: wd(w, (_s32(rd(w)) * kv) & M32)
    m = re.match(r"^cmpk_(eq|lg|gt|ge|lt|le)_(i32|u32)$", name)
    if m:
        op, ty = m.groups()
        a, k = ops
        kv = int(k, 0)
        if ty == "i32":
            kv = kv - 0x10000 if kv >= 0x8000 else kv
        ra = scalar_reader(a, ins)
        f = _SCMP[op]
        if ty == "i32":
            return lambda w: setattr(w, "scc", int(f(_s32(ra(w)), kv)))
        return lambda w: setattr(w, "scc", int(f(ra(w), kv)))
    raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled by the emulator")


_WAIT = re.compile(r"(vmcnt|lgkmcnt|expcnt)\((\d+)\)")


def compile_sopp(ins, ctx):
    name = ins.mnemonic[2:]
    if name == "endpgm":
        def endpgm(w):
            w.done = True
            return -1
        return endpgm
    if name in ("nop", "setprio", "sleep", "sethalt", "ttracedata", "icache_inv", "code_end", "set_gpr_idx_off",
                "dcache_wb", "dcache_inv", "buffer_wbl2", "buffer_inv"):
        return lambda w: None
    if name == "waitcnt":
        vm, lgkm = 63, 15
        text = " ".join(ins.modifiers + ins.operands)
        if text.strip() in ("0",):
            vm, lgkm = 0, 0
        else:
            for k, v in _WAIT.findall(text):
                if k == "vmcnt":
                    vm = int(v)
                elif k == "lgkmcnt":
                    lgkm = int(v)
            need(bool(_WAIT.findall(text)) or not text.strip(), ins, text)
        return lambda w: w.wait(vm, lgkm)
    if name == "barrier":
        def barrier(w):
            w.at_barrier = True
            return ins.index + 1  # the scheduler sees at_barrier and switches waves
        return barrier
    if name.startswith("branch") or name.startswith("cbranch"):
        t = ins.target_index
        need(t is not None, ins, "branch without a resolved target")
        if name == "branch":
            return lambda w: t
        cond = {
            "cbranch_scc0": lambda w: w.scc == 0,
            "cbranch_scc1": lambda w: w.scc == 1,
            "cbranch_vccz": lambda w: (w.s[106] | w.s[107]) == 0,
            "cbranch_vccnz": lambda w: (w.s[106] | w.s[107]) != 0,
            "cbranch_execz": lambda w: (w.s[126] | w.s[127]) == 0,
            "cbranch_execnz": lambda w: (w.s[126] | w.s[127]) != 0,
        }.get(name)
        need(cond is not None, ins, name)
        return lambda w: t if cond(w) else None
    raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled by the emulator")


def compile_misc_scalar(ins, ctx):
    name = ins.mnemonic[2:]
    if name == "getpc_b64":
        wd = scalar_writer(ins.operands[0], ins, 64)
        pc_next = ins.pc + len(ins.encoding)
        return lambda w: wd(w, ctx.m.code_base + pc_next)
    if name in ("setreg_imm32_b32", "setreg_b32", "getreg_b32", "denorm_mode", "round_mode"):
        raise UnknownInstruction(f"{ctx.kernel}: {ins.mnemonic} (mode registers) is not modelled: {ins.text!r}")
    return None
