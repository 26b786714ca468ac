"""Memory instructions: SMEM (s_load_*, s_buffer_load_*), global_* / buffer_* (vmcnt), ds_* (lgkmcnt), and the
MFMA dispatch.

Hazard model: a load reads memory when it issues, marks its destination registers with poison (EXEC lanes),
and writes its data only when an s_waitcnt retires it (wave.Pending): so a missing or too weak wait reads
poison. Stores and LDS writes take effect at issue and occupy their counter until retired.
"""
from __future__ import annotations

import re
import struct

import numpy as np

from .errors import EmulatorError, MemoryFault, UnknownInstruction
from .isa_regs import parse_mods, scalar_reader, vreg
from .operands import Reg, const_bits, need, parse_reg
from .wave import POISON, SPOISON, Pending

U32 = np.uint32
M32 = 0xFFFFFFFF


# ---- SMEM -------------------------------------------------------------------------------------------------------
_SLOAD = re.compile(r"^s_(buffer_)?load_dword(x(\d+))?$")


def compile_smem(ins, ctx):
    m = _SLOAD.match(ins.mnemonic)
    if not m:
        raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled")
    buffer = bool(m.group(1))
    n = int(m.group(3) or 1)
    mods = parse_mods(ins)
    need(set(mods) <= {"glc", "offset", "nv", "sc0", "sc1", "nt"}, ins, f"modifiers {mods}")
    d, base, off = ins.operands
    dr = parse_reg(d)
    need(dr is not None and dr.kind == "s" and dr.count == n, ins, d)
    br = parse_reg(base)
    need(br is not None and br.kind == "s" and br.count == (4 if buffer else 2), ins, base)
    imm = const_bits(off, "b32")
    roff = None if imm is not None else scalar_reader(off, ins)
    extra = int(mods.get("offset", 0), 0) if isinstance(mods.get("offset"), str) else 0
    di, bi = dr.index, br.index
    what = f"{ctx.kernel}: {ins.text}"
    fmt = f"<{n}I"

    def sload(w):
        o = (imm if roff is None else roff(w)) + extra
        if buffer:
            desc = w.s[bi:bi + 4]
            addr = desc[0] | (desc[1] & 0xFFFF) << 32
            num = desc[2]
            data = bytearray(4 * n)
            for j in range(n):
                if o + 4 * j + 4 <= num:
                    data[4 * j:4 * j + 4] = ctx.m.memory.read_scalar(addr + o + 4 * j, 4, what)
        else:
            addr = (w.s[bi] | w.s[bi + 1] << 32) & ~3
            data = ctx.m.memory.read_scalar(addr + (o & ~3), 4 * n, what)
        vals = struct.unpack(fmt, data)
        for j in range(n):
            w.s[di + j] = SPOISON

        def retire():
            for j in range(n):
                w.s[di + j] = vals[j]
        w.issue("lgkm", Pending("smem", retire, ins.text, srows=range(di, di + n)))
    return sload


# ---- global / buffer ---------------------------------------------------------------------------------------------
_GLOBAL = re.compile(r"^global_(load|store)_(dword(?:x(\d))?|ubyte|sbyte|ushort|sshort|short|byte)(_d16(_hi)?)?$")
_GATOMIC = re.compile(r"^global_atomic_(add_f32|add|pk_add_bf16|pk_add_f16|max|min|umax|umin)(_x2)?$")
_LOAD_KIND = {"ubyte": (1, False), "sbyte": (1, True), "ushort": (2, False), "sshort": (2, True),
              "short": (2, False), "byte": (1, False)}


def _nothing():
    pass


def _lanes_bytes_to_rows(data: np.ndarray, n: int) -> np.ndarray:
    """uint8 [lanes, 4n] -> uint32 [n, lanes]."""
    return np.ascontiguousarray(data).view("<u4").reshape(len(data), n).T


def _lanes_bytes(w, first: int, nregs: int, lanes, nbytes: int, d16=None) -> np.ndarray:
    """What a store takes from registers first.. of each lane: uint8 [lanes, nbytes]; under 4 bytes, the low bytes of
    one register (its high half with d16 "hi")."""
    if nbytes >= 4:
        return np.ascontiguousarray(w.v[first:first + nregs, lanes].T).view(np.uint8).reshape(len(lanes), nbytes)
    v = w.v[first, lanes]
    if d16 == "hi":
        v = v >> U32(16)
    return np.ascontiguousarray(v).view(np.uint8).reshape(len(lanes), 4)[:, :nbytes]


def _retire_rows(w, di, rows, lanes, d16=None, sign=False, nbytes=4):
    def retire():
        for j in range(rows.shape[0]):
            cur = w.v[di + j]
            val = rows[j]
            if d16 == "lo":
                val = (cur[lanes] & U32(0xFFFF0000)) | (val & U32(0xFFFF))
            elif d16 == "hi":
                val = (cur[lanes] & U32(0xFFFF)) | (val << U32(16))
            cur[lanes] = val
    return retire


def _access_size(size: str, dwords: str | None) -> tuple[int, int, bool]:
    """A global / buffer access's size from its mnemonic: (registers, bytes, sign-extended) -- dword[xN]: N registers
    of 4 bytes; a byte or short form: one register (_LOAD_KIND)."""
    if size.startswith("dword"):
        n = int(dwords or 1)
        return n, 4 * n, False
    nbytes, sign = _LOAD_KIND[size]
    return 1, nbytes, sign


def _global_address(ins, vaddr, saddr, offset):
    """-> addr(w, lanes): a global_* instruction's per-lane addresses (64-bit vaddr with saddr `off`, else the SGPR
    pair's base plus the 32-bit vaddr), plus the instruction offset."""
    if saddr == "off":
        ai = vreg(vaddr, ins, 2)

        def addr(w, lanes):
            return (w.v[ai, lanes].astype(np.uint64) | (w.v[ai + 1, lanes].astype(np.uint64) << np.uint64(32))) \
                + np.uint64(offset & 0xFFFFFFFFFFFFFFFF)
        return addr
    ai = vreg(vaddr, ins, 1)
    sr = parse_reg(saddr)
    need(sr is not None and sr.kind == "s" and sr.count == 2, ins, saddr)
    si = sr.index

    def addr(w, lanes):
        base = np.uint64(w.s[si] | w.s[si + 1] << 32)
        return base + w.v[ai, lanes].astype(np.uint64) + np.uint64(offset & 0xFFFFFFFFFFFFFFFF)
    return addr


def compile_global(ins, ctx):
    m = _GLOBAL.match(ins.mnemonic)
    atomic = _GATOMIC.match(ins.mnemonic)
    if not m and not atomic:
        raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled")
    mods = parse_mods(ins)
    need(set(mods) <= {"offset", "sc0", "sc1", "nt", "glc", "slc"}, ins, f"modifiers {sorted(mods)}")
    offset = int(mods["offset"], 0) if "offset" in mods else 0
    what = f"{ctx.kernel}: {ins.text}"
    ops = ins.operands
    if atomic:
        return _compile_global_atomic(ins, ctx, atomic, mods, offset)
    kind, size = m.group(1), m.group(2)
    d16 = ("hi" if m.group(5) else "lo") if m.group(4) else None
    n, nbytes, sign = _access_size(size, m.group(3))
    if kind == "load":
        d, vaddr, saddr = ops
    else:
        vaddr, d, saddr = ops
    addr = _global_address(ins, vaddr, saddr, offset)
    di = vreg(d, ins, n if nbytes >= 4 else 1)
    if kind == "load":
        def gload(w):
            lanes = np.flatnonzero(w.exec_mask)
            a = addr(w, lanes)
            raw = ctx.m.memory.read(a, nbytes, what)
            if nbytes >= 4:
                rows = _lanes_bytes_to_rows(raw, n)
            else:
                v = raw[:, 0].astype(U32) if nbytes == 1 else raw.view("<u2")[:, 0].astype(U32)
                if sign:
                    s = U32(1 << (8 * nbytes - 1))
                    v = (v ^ s) - s
                rows = v[None, :]
            for j in range(rows.shape[0]):
                w.v[di + j, lanes] = POISON
            w.issue("vm", Pending("vm", _retire_rows(w, di, rows, lanes, d16), ins.text,
                                  range(di, di + rows.shape[0]), w.exec_mask.copy()))
        return gload

    def gstore(w):
        lanes = np.flatnonzero(w.exec_mask)
        a = addr(w, lanes)
        ctx.m.memory.write(a, _lanes_bytes(w, di, n, lanes, nbytes, d16), what)
        w.issue("vm", Pending("vm", _nothing, ins.text))
    return gstore


def _compile_global_atomic(ins, ctx, m, mods, offset):
    op = m.group(1)
    need(m.group(2) is None and op in ("add_f32", "add", "max", "min", "umax", "umin", "pk_add_bf16"), ins, op)
    need("sc0" not in mods and "glc" not in mods, ins, "returning atomic")
    vaddr, d, saddr = ins.operands
    what = f"{ctx.kernel}: {ins.text}"
    di = vreg(d, ins, 1)
    if saddr == "off":
        ai = vreg(vaddr, ins, 2)
        def addr(w, lanes):
            lo, hi = w.v[ai, lanes].astype(np.uint64), w.v[ai + 1, lanes].astype(np.uint64)
            return (lo | (hi << np.uint64(32))) + np.uint64(offset)
    else:
        ai = vreg(vaddr, ins, 1)
        si = parse_reg(saddr).index
        def addr(w, lanes):
            return np.uint64(w.s[si] | w.s[si + 1] << 32) + w.v[ai, lanes].astype(np.uint64) + np.uint64(offset)

    def atomic(w):
        lanes = np.flatnonzero(w.exec_mask)
        a = addr(w, lanes)
        # lanes in order, one at a time: atomics to one address accumulate
        for lane, ad in zip(lanes, a):
            cur = int(np.frombuffer(ctx.m.memory.read_scalar(int(ad), 4, what), "<u4")[0])
            v = int(w.v[di, lane])
            if op == "add_f32":
                r = int(np.float32(np.array(cur, U32).view(np.float32) + np.array(v, U32).view(np.float32)).view(U32))
            elif op == "add":
                r = (cur + v) & M32
            elif op in ("umax", "umin"):
                r = max(cur, v) if op == "umax" else min(cur, v)
            elif op in ("max", "min"):
                sc, sv = np.int32(np.uint32(cur)), np.int32(np.uint32(v))
                r = int(np.uint32(max(sc, sv) if op == "max" else min(sc, sv)))
            else:
                raise UnknownInstruction(f"{ctx.kernel}: {ins.text}")
            ctx.m.memory.write(np.array([ad], np.uint64), np.frombuffer(np.uint32(r).tobytes(), np.uint8)[None, :],
                               what)
        w.issue("vm", Pending("vm", _nothing, ins.text))
    return atomic


# ---- LDS ----------------------------------------------------------------------------------------------------------
_DS = re.compile(r"^ds_(read|write|read2|write2|read2st64|write2st64)_(b32|b64|b96|b128|u8|i8|u16|i16|b8|b16)"
                 r"(_d16(_hi)?)?$")


class LdsRace(EmulatorError):
    pass


def compile_ds(ins, ctx):
    name = ins.mnemonic
    mods = parse_mods(ins)
    need(set(mods) <= {"offset", "offset0", "offset1", "gds"}, ins, f"modifiers {sorted(mods)}")
    need("gds" not in mods, ins, "GDS")
    what = f"{ctx.kernel}: {ins.text}"
    ops = ins.operands
    if name in ("ds_bpermute_b32", "ds_permute_b32"):
        d, a, s = ops
        di, ai, si = vreg(d, ins, 1), vreg(a, ins, 1), vreg(s, ins, 1)
        offset = int(mods.get("offset", "0"), 0)

        def perm(w):
            lanes = np.flatnonzero(w.exec_mask)
            idx = ((w.v[ai].astype(np.int64) + offset) >> 2) & 63
            src = w.v[si]
            if name == "ds_bpermute_b32":
                # lane i reads source lane idx[i] (a lane whose EXEC bit is 0 supplies 0)
                val = np.where(w.exec_mask[idx], src[idx], U32(0))[lanes]
            else:
                out = np.zeros(64, U32)
                for ln in lanes:
                    out[idx[ln]] = src[ln]
                val = out[lanes]
            w.v[di, lanes] = POISON

            def retire():
                w.v[di, lanes] = val
            w.issue("lgkm", Pending("lds", retire, ins.text, (di,), w.exec_mask.copy()))
        return perm
    m = _DS.match(name)
    if not m:
        raise UnknownInstruction(f"{ctx.kernel}: instruction {name} ({ins.text!r}) is not modelled")
    op, ty = m.group(1), m.group(2)
    d16 = ("hi" if m.group(4) else "lo") if m.group(3) else None
    size = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1, "u16": 2, "i16": 2, "b8": 1, "b16": 2}[ty]
    signed = ty in ("i8", "i16")
    two = op.endswith("2") or "2st64" in op
    st = 64 if "st64" in op else 1
    if two:
        offs = [int(mods.get("offset0", "0"), 0) * size * st, int(mods.get("offset1", "0"), 0) * size * st]
    else:
        offs = [int(mods.get("offset", "0"), 0)]
    nregs = max(1, size // 4)
    if op.startswith("read"):
        d, a = ops
        di = vreg(d, ins, nregs * len(offs))
        ai = vreg(a, ins, 1)

        def dsread(w):
            lanes = np.flatnonzero(w.exec_mask)
            base = w.v[ai, lanes].astype(np.int64)
            rows = []
            for o in offs:
                raw = ctx.m.lds_read(w, base + o, size, what)
                if size >= 4:
                    rows.append(_lanes_bytes_to_rows(raw, nregs))
                else:
                    v = raw[:, 0].astype(U32) if size == 1 else np.ascontiguousarray(raw).view("<u2")[:, 0].astype(U32)
                    if signed:
                        s = U32(1 << (8 * size - 1))
                        v = (v ^ s) - s
                    rows.append(v[None, :])
            rows = np.concatenate(rows, axis=0)
            for j in range(rows.shape[0]):
                w.v[di + j, lanes] = POISON
            w.issue("lgkm", Pending("lds", _retire_rows(w, di, rows, lanes, d16), ins.text,
                                    range(di, di + rows.shape[0]), w.exec_mask.copy()))
        return dsread
    if two:
        a, d0, d1 = ops
        srcs = [vreg(d0, ins, nregs), vreg(d1, ins, nregs)]
    else:
        a, d0 = ops
        srcs = [vreg(d0, ins, nregs)]
    ai = vreg(a, ins, 1)

    def dswrite(w):
        lanes = np.flatnonzero(w.exec_mask)
        base = w.v[ai, lanes].astype(np.int64)
        written = []
        for o, si in zip(offs, srcs):
            written.append(ctx.m.lds_write(w, base + o, _lanes_bytes(w, si, nregs, lanes, size, d16), what))
        # until an s_waitcnt lgkmcnt retires it, the write is not complete for the other waves
        w.issue("lgkm", Pending("lds", ctx.m.lds_write_pending(w, written, ins.text), ins.text))
    return dswrite


# ---- MFMA -----------------------------------------------------------------------------------------------------------
def compile_mfma(ins, ctx):
    mods = parse_mods(ins)
    need(set(mods) <= {"cbsz", "abid", "blgp", "neg_lo", "neg_hi", "op_sel", "op_sel_hi"}, ins,
         f"modifiers {sorted(mods)}")
    d, a, b, c = ins.operands[:4]
    need(len(ins.operands) == 4, ins, "scaled MFMA operands")
    rd, ra, rb = parse_reg(d), parse_reg(a), parse_reg(b)
    for r, t in ((rd, d), (ra, a), (rb, b)):
        need(r is not None and r.kind == "v", ins, t)
    rc = parse_reg(c)
    cconst = None
    if rc is None:
        cconst = const_bits(c, "b32")
        need(cconst is not None, ins, c)
    name = ins.mnemonic
    kw = {k: int(mods[k], 0) if isinstance(mods[k], str) else mods[k] for k in ("cbsz", "abid", "blgp") if k in mods}
    arch = ctx.arch
    di, ai, bi = rd.index, ra.index, rb.index
    nd, na, nb = rd.count, ra.count, rb.count
    ci = rc.index if rc is not None else None

    def mfma(w):
        if not w.full:
            raise UnknownInstruction(f"{ctx.kernel}: {ins.text} with a partial EXEC mask is not modelled")
        A = w.v[ai:ai + na].T
        B = w.v[bi:bi + nb].T
        C = w.v[ci:ci + nd].T if ci is not None else np.full((64, nd), cconst, U32)
        D = ctx.m.mfma(name, np.ascontiguousarray(A), np.ascontiguousarray(B), np.ascontiguousarray(C), arch=arch,
                      **kw)
        D = np.asarray(D, U32)
        need(D.shape == (64, nd), ins, f"MFMA result shape {D.shape}, expected (64, {nd})")
        w.v[di:di + nd] = D.T
    return mfma


# ---- MUBUF (buffer_*) with a V# resource descriptor ----------------------------------------------------------
_BUFFER = re.compile(r"^buffer_(load|store)_(dword(?:x(\d))?|ubyte|sbyte|ushort|sshort|short|byte)$")


def _buffer_locator(ins, vaddr, srsrc, soff, mods, nbytes, what, raw_only=False):
    """-> locate(w, lanes) = (addresses, in-range [lanes, pieces], piece offsets) of a buffer access through the V#
    in `srsrc`; raw_only: a V# with a stride is an error."""
    offen, idxen = "offen" in mods, "idxen" in mods
    inst_off = int(mods["offset"], 0) if "offset" in mods else 0
    rr = parse_reg(srsrc)
    need(rr is not None and rr.kind == "s" and rr.count == 4, ins, srsrc)
    ri = rr.index
    if offen or idxen:
        vr = parse_reg(vaddr)
        need(vr is not None and vr.kind == "v" and vr.count == (2 if offen and idxen else 1), ins, vaddr)
        vi = vr.index
    rsoff = scalar_reader(soff, ins)
    step = 4 if nbytes >= 4 else nbytes

    def locate(w, lanes):
        desc = w.s[ri:ri + 4]
        base = desc[0] | (desc[1] & 0xFFFF) << 32
        stride = (desc[1] >> 16) & 0x3FFF
        num = desc[2]
        if desc[3] >> 23 & 1:
            raise UnknownInstruction(f"{what}: ADD_TID_ENABLE buffers are not modelled")
        need(not raw_only or stride == 0, ins, "a raw buffer (stride 0)")
        idx = w.v[vi, lanes].astype(np.int64) if idxen else np.zeros(len(lanes), np.int64)
        voff = (w.v[vi + (1 if idxen else 0), lanes].astype(np.int64) if offen else np.zeros(len(lanes), np.int64))
        off = voff + inst_off
        addr = np.int64(base) + np.int64(rsoff(w)) + off + idx * stride
        pieces = np.arange(0, nbytes, step)
        if idxen:
            ok = np.broadcast_to((idx < num)[:, None], (len(lanes), len(pieces)))
        else:
            ok = (off[:, None] + pieces[None, :] + step) <= num
        return addr.astype(np.uint64), ok, pieces
    return locate


def _buffer_read(ctx, locate, w, lanes, nbytes, what) -> np.ndarray:
    """A buffer load's bytes, uint8 [lanes, nbytes]: out-of-range pieces are zeros."""
    addr, ok, pieces = locate(w, lanes)
    step = 4 if nbytes >= 4 else nbytes
    raw = np.zeros((len(lanes), nbytes), np.uint8)
    for j, pc in enumerate(pieces):
        sel = ok[:, j]
        if sel.any():
            raw[sel, pc:pc + step] = ctx.m.memory.read(addr[sel] + np.uint64(pc), step, what)
    return raw


def compile_buffer(ins, ctx):
    """buffer_load / buffer_store of a raw (stride 0, offen) or structured (idxen) buffer. Range checking
    (CDNA3 ISA, "buffer addressing"): stride 0: a dword whose offset (VGPR offset + instruction offset, not
    soffset) + 4 exceeds num_records is out of range; idxen: an index >= num_records is. Out-of-range loads
    return 0, out-of-range stores are dropped; in-range addresses must lie in a registered buffer."""
    m = _BUFFER.match(ins.mnemonic)
    if not m:
        raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled")
    mods = parse_mods(ins)
    need(set(mods) <= {"offen", "idxen", "offset", "sc0", "sc1", "nt", "glc", "slc"}, ins, f"modifiers {sorted(mods)}")
    kind, size = m.group(1), m.group(2)
    n, nbytes, sign = _access_size(size, m.group(3))
    d, vaddr, srsrc, soff = ins.operands
    di = vreg(d, ins, n if nbytes >= 4 else 1)
    what = f"{ctx.kernel}: {ins.text}"
    locate = _buffer_locator(ins, vaddr, srsrc, soff, mods, nbytes, what)
    step = 4 if nbytes >= 4 else nbytes

    if kind == "load":
        def bload(w):
            lanes = np.flatnonzero(w.exec_mask)
            raw = _buffer_read(ctx, locate, w, lanes, nbytes, what)
            if nbytes >= 4:
                rows = _lanes_bytes_to_rows(raw, n)
            else:
                v = raw[:, 0].astype(U32) if nbytes == 1 else np.ascontiguousarray(raw).view("<u2")[:, 0].astype(U32)
                if sign:
                    sb = U32(1 << (8 * nbytes - 1))
                    v = (v ^ sb) - sb
                rows = v[None, :]
            for j in range(rows.shape[0]):
                w.v[di + j, lanes] = POISON
            w.issue("vm", Pending("vm", _retire_rows(w, di, rows, lanes), ins.text, range(di, di + rows.shape[0]),
                                  w.exec_mask.copy()))
        return bload

    def bstore(w):
        lanes = np.flatnonzero(w.exec_mask)
        addr, ok, pieces = locate(w, lanes)
        data = _lanes_bytes(w, di, n, lanes, nbytes)
        for j, pc in enumerate(pieces):
            sel = ok[:, j]
            if sel.any():
                ctx.m.memory.write(addr[sel] + np.uint64(pc), np.ascontiguousarray(data[sel, pc:pc + step]), what)
        w.issue("vm", Pending("vm", _nothing, ins.text))
    return bstore


# ---- loads straight into LDS ------------------------------------------------------------------------------------
_M0 = 124  # the SGPR index of M0 (operands.SPECIAL)
_BUFFER_LDS = re.compile(r"^buffer_load_dword(?:x(\d))?$")
_GLOBAL_LDS = re.compile(r"^global_load_lds_dword(?:x(\d))?$")


def _is_lds_dma(ins) -> bool:
    """Whether `ins` loads into LDS: a buffer load with the lds modifier, or global_load_lds_*."""
    mn = ins.mnemonic
    return mn.startswith("global_load_lds_") or (mn.startswith("buffer_load_") and "lds" in parse_mods(ins))


def compile_lds_dma(ins, ctx):
    """`buffer_load_dword[x3|x4] ... lds` (gfx942: the dword form; gfx950 also 12 / 16 bytes) and gfx950's
    `global_load_lds_dword[x3|x4]`. Semantics (LLVM AMDGPUUsage, "GFX9 LDS DMA"; the compiler's own assumptions): the
    memory address is the ordinary load's (a buffer's range check included: out-of-range bytes are zeros); lane l's
    bytes land in LDS at M0 + the instruction offset + 4 l for sizes up to 4 bytes, 16 l for 12 and 16 (M0: the
    wave-uniform LDS base; the immediate offset applies to both addresses); lanes outside EXEC write nothing. Counted
    in vmcnt: memory is read at issue, the LDS bytes written at retirement and pending until then (any LDS access to
    them, the issuing wave's included, is a HazardError: Machine.lds_dma_pending)."""
    mods = parse_mods(ins)
    what = f"{ctx.kernel}: {ins.text}"
    is_global = ins.mnemonic.startswith("global_")
    m = (_GLOBAL_LDS if is_global else _BUFFER_LDS).match(ins.mnemonic)
    if not m:
        raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled")
    nbytes = 4 * int(m.group(1) or 1)
    inst_off = int(mods["offset"], 0) if "offset" in mods else 0
    if is_global:
        need(set(mods) <= {"offset", "sc0", "sc1", "nt"}, ins, f"modifiers {sorted(mods)}")
        addr = _global_address(ins, *ins.operands, inst_off)

        def read(w, lanes):
            return ctx.m.memory.read(addr(w, lanes), nbytes, what)
    else:
        need(set(mods) <= {"lds", "offen", "offset", "sc0", "sc1", "nt", "glc", "slc"}, ins,
             f"modifiers {sorted(mods)}")
        locate = _buffer_locator(ins, *ins.operands, mods, nbytes, what, raw_only=True)

        def read(w, lanes):
            return _buffer_read(ctx, locate, w, lanes, nbytes, what)
    lane_stride = 4 if nbytes <= 4 else 16

    def load_lds(w):
        lanes = np.flatnonzero(w.exec_mask)
        addrs = int(w.s[_M0]) + inst_off + lanes.astype(np.int64) * lane_stride
        w.issue("vm", Pending("vm", ctx.m.lds_dma_pending(w, addrs, nbytes, read(w, lanes), what), ins.text))
    return load_lds


def compile_memory_or_mfma(ins, ctx):
    mn = ins.mnemonic
    if _is_lds_dma(ins):
        return compile_lds_dma(ins, ctx)
    if mn.startswith("buffer_") and mn not in ("buffer_wbl2", "buffer_inv"):
        return compile_buffer(ins, ctx)
    if mn.startswith("s_load") or mn.startswith("s_buffer_load"):
        return compile_smem(ins, ctx)
    if mn.startswith("global_"):
        return compile_global(ins, ctx)
    if mn.startswith("ds_"):
        return compile_ds(ins, ctx)
    if mn.startswith("v_mfma") or mn.startswith("v_smfmac"):
        return compile_mfma(ins, ctx)
    return None


__all__ = ["compile_memory_or_mfma", "MemoryFault", "Reg"]
