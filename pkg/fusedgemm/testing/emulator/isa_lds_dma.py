"""Loads from memory straight into LDS (no VGPR): `buffer_load_<size> ... lds` (gfx942: dword and smaller; gfx950
also dwordx3 / dwordx4) and `global_load_lds_<size>` (gfx950's dwordx3 / dwordx4 too).

Semantics (LLVM AMDGPUUsage, "GFX9 LDS DMA"; the compiler's own assumptions): the global address is the ordinary
load's (a buffer's range check included: an out-of-range lane's bytes are zeros); lane l's bytes land in LDS at
M0 + the instruction offset + l * 4 for sizes up to 4 bytes, + l * 16 for 12 and 16 bytes (M0: the wave-uniform
LDS base; the immediate offset applies to both addresses). Lanes outside EXEC write nothing. The operation counts
in vmcnt: its bytes are in LDS only once an s_waitcnt vmcnt retires it.

Hazard model: the memory is read at issue; the LDS bytes are written at retirement. Until then they are pending:
any LDS access to them -- by any wave, the issuing one included -- is a HazardError (the data may not be there).
"""
from __future__ import annotations

import re

import numpy as np

from .errors import UnknownInstruction
from .isa_regs import parse_mods, scalar_reader, vreg
from .operands import need, parse_reg
from .wave import Pending

_M0 = 124  # the SGPR index of M0 (operands.SPECIAL)
_BUFFER_LDS = re.compile(r"^buffer_load_dword(?:x(\d))?$")
_GLOBAL_LDS = re.compile(r"^global_load_lds_dword(?:x(\d))?$")


def is_lds_dma(ins) -> bool:
    """Whether `ins` is a load to LDS: a buffer load with the lds modifier, or global_load_lds_*."""
    mn = ins.mnemonic
    if mn.startswith("global_load_lds_"):
        return True
    return mn.startswith("buffer_load_") and "lds" in parse_mods(ins)


def _lane_stride(nbytes: int) -> int:
    return 4 if nbytes <= 4 else 16


def _issue(ctx, w, lanes, data, inst_off, nbytes, text, what):
    """Read at issue (data: [lanes, nbytes]), mark the LDS bytes pending, write them at retirement."""
    base = int(w.s[_M0]) + inst_off
    addrs = base + lanes.astype(np.int64) * _lane_stride(nbytes)
    retire = ctx.m.lds_dma_pending(w, addrs, nbytes, data, what)
    w.issue("vm", Pending("vm", retire, text))


def compile_lds_dma(ins, ctx):
    mods = parse_mods(ins)
    what = f"{ctx.kernel}: {ins.text}"
    if ins.mnemonic.startswith("global_"):
        m = _GLOBAL_LDS.match(ins.mnemonic)
        if not m:
            raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled")
        need(set(mods) <= {"offset", "sc0", "sc1", "nt"}, ins, f"modifiers {sorted(mods)}")
        nbytes = 4 * int(m.group(1) or 1)
        offset = int(mods["offset"], 0) if "offset" in mods else 0
        vaddr, saddr = ins.operands
        if saddr == "off":
            ai = vreg(vaddr, ins, 2)

            def addr(w, lanes):
                return (w.v[ai, lanes].astype(np.uint64) | (w.v[ai + 1, lanes].astype(np.uint64) << np.uint64(32))) \
                    + np.uint64(offset)
        else:
            ai = vreg(vaddr, ins, 1)
            sr = parse_reg(saddr)
            need(sr is not None and sr.kind == "s" and sr.count == 2, ins, saddr)
            si = sr.index

            def addr(w, lanes):
                return np.uint64(w.s[si] | w.s[si + 1] << 32) + w.v[ai, lanes].astype(np.uint64) + np.uint64(offset)

        def gload_lds(w):
            lanes = np.flatnonzero(w.exec_mask)
            data = ctx.m.memory.read(addr(w, lanes), nbytes, what) if len(lanes) else np.zeros((0, nbytes), np.uint8)
            _issue(ctx, w, lanes, data, offset, nbytes, ins.text, what)
        return gload_lds

    m = _BUFFER_LDS.match(ins.mnemonic)
    if not m:
        raise UnknownInstruction(f"{ctx.kernel}: instruction {ins.mnemonic} ({ins.text!r}) is not modelled")
    need(set(mods) <= {"lds", "offen", "offset", "sc0", "sc1", "nt", "glc", "slc"}, ins, f"modifiers {sorted(mods)}")
    nbytes = 4 * int(m.group(1) or 1)
    inst_off = int(mods["offset"], 0) if "offset" in mods else 0
    vaddr, srsrc, soff = ins.operands
    rr = parse_reg(srsrc)
    need(rr is not None and rr.kind == "s" and rr.count == 4, ins, srsrc)
    ri = rr.index
    offen = "offen" in mods
    vi = vreg(vaddr, ins, 1) if offen else None
    rsoff = scalar_reader(soff, ins)

    def bload_lds(w):
        lanes = np.flatnonzero(w.exec_mask)
        desc = w.s[ri:ri + 4]
        if desc[3] >> 23 & 1:
            raise UnknownInstruction(f"{what}: ADD_TID_ENABLE buffers are not modelled")
        need(((desc[1] >> 16) & 0x3FFF) == 0, ins, "a raw buffer (stride 0)")
        base = desc[0] | (desc[1] & 0xFFFF) << 32
        num = desc[2]
        voff = w.v[vi, lanes].astype(np.int64) if offen else np.zeros(len(lanes), np.int64)
        off = voff + inst_off
        data = np.zeros((len(lanes), nbytes), np.uint8)
        for pc in range(0, nbytes, 4):  # the range check per dword (as compile_buffer's)
            ok = off + pc + 4 <= num
            if ok.any():
                a = (np.int64(base) + np.int64(rsoff(w)) + off[ok] + pc).astype(np.uint64)
                data[ok, pc:pc + 4] = ctx.m.memory.read(a, 4, what)
        _issue(ctx, w, lanes, data, inst_off, nbytes, ins.text, what)
    return bload_lds


__all__ = ["compile_lds_dma", "is_lds_dma"]
