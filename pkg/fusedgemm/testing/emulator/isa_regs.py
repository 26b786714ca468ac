"""What every instruction compiler needs: the compile context, operand readers / destination writers, modifiers.

compile_instruction(ins, ctx) -> fn(wave) -> next instruction index or None (fall through). An instruction, a
form (modifier, operand kind) or an operand type the emulator does not model raises UnknownInstruction when
the kernel is loaded -- before anything executes -- naming it; never a silent guess.

Values: VGPR rows are uint32[64]; 32-bit sources are uint32 arrays or numpy uint32 scalars; floats are views.
"""
from __future__ import annotations

import functools
import re

import numpy as np

from .errors import UnknownInstruction
from .operands import const_bits, need, parse_reg, strip_modifiers
from .wave import int_to_mask, mask_to_int

U32 = np.uint32
M32 = 0xFFFFFFFF


class Ctx:
    """What compiling needs besides the instruction: arch, kernel name, the executor's services."""

    def __init__(self, arch: str, kernel: str, machine):
        self.arch, self.kernel, self.m = arch, kernel, machine


# ---- operand readers --------------------------------------------------------------------------------------------
def _shared_per_operand(make):
    """One closure per (operand, type) for every instruction of every kernel: a reader / writer depends on its
    operand text and type alone (the instruction only names itself in the UnknownInstruction a bad form raises,
    and a raise is never cached). Sharing keeps compiling cheap and the heap small -- every emulated HIP launch
    walks the garbage collector's objects to find the live tensors, so each object a Program holds costs time."""
    cache: dict = {}

    @functools.wraps(make)
    def shared(tok, ins, kind=None):
        key = (tok, kind)
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = make(tok, ins) if kind is None else make(tok, ins, kind)
        return fn
    return shared


@_shared_per_operand
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


@_shared_per_operand
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


@_shared_per_operand
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


@_shared_per_operand
def vdst_writer(tok: str, ins, ty: str = "b32"):
    r = parse_reg(tok)
    need(r is not None and r.kind == "v", ins, f"vector destination {tok}")
    i = r.index
    if _TYPE_BITS[ty] == 64:
        need(r.count == 2, ins, tok)
        return lambda w, x: w.vwrite64(i, x)
    need(r.count == 1, ins, tok)
    return lambda w, x: w.vwrite(i, x)


@_shared_per_operand
def mask_writer(tok: str, ins):
    """A VOPC / carry-out destination: an SGPR pair (or vcc)."""
    wr = scalar_writer(tok, ins, 64)
    return lambda w, m: wr(w, mask_to_int(m & w.exec_mask))


@_shared_per_operand
def mask_reader(tok: str, ins):
    rd = scalar_reader(tok, ins, 64)
    return lambda w: int_to_mask(rd(w))


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
