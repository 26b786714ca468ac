"""Operands as the assembler prints them -> register references and constants."""
from __future__ import annotations

import functools
import re
import struct

import numpy as np

from .errors import UnknownInstruction

# SGPR file indices of the named scalar registers (gfx9 encoding).
SPECIAL = {"vcc": (106, 2), "vcc_lo": (106, 1), "vcc_hi": (107, 1), "exec": (126, 2), "exec_lo": (126, 1),
           "exec_hi": (127, 1), "m0": (124, 1), "flat_scratch": (102, 2), "flat_scratch_lo": (102, 1),
           "flat_scratch_hi": (103, 1), "xnack_mask": (104, 2), "null": (125, 1)}
AGPR_BASE = 256  # AGPR aN lives at VGPR-file row 256 + N

_REG = re.compile(r"^(?P<k>[sva])(?:(?P<one>\d+)|\[(?P<lo>\d+):(?P<hi>\d+)\])$")
_TTMP = re.compile(r"^ttmp(?:(?P<one>\d+)|\[(?P<lo>\d+):(?P<hi>\d+)\])$")

F32_INLINE = {"0.5": 0x3F000000, "-0.5": 0xBF000000, "1.0": 0x3F800000, "-1.0": 0xBF800000, "2.0": 0x40000000,
              "-2.0": 0xC0000000, "4.0": 0x40800000, "-4.0": 0xC0800000, "0.15915494": 0x3E22F983}
F16_INLINE = {"0.5": 0x3800, "-0.5": 0xB800, "1.0": 0x3C00, "-1.0": 0xBC00, "2.0": 0x4000, "-2.0": 0xC000,
              "4.0": 0x4400, "-4.0": 0xC400, "0.15915494": 0x3118}
F64_INLINE = {"0.5": 0x3FE0000000000000, "-0.5": 0xBFE0000000000000, "1.0": 0x3FF0000000000000,
              "-1.0": 0xBFF0000000000000, "2.0": 0x4000000000000000, "-2.0": 0xC000000000000000,
              "4.0": 0x4010000000000000, "-4.0": 0xC010000000000000, "0.15915494": 0x3FC45F306DC9C882}


class Reg:
    """A register range (shared between the instructions that name it: never modified)."""
    __slots__ = ("kind", "index", "count")

    def __init__(self, kind: str, index: int, count: int):
        self.kind, self.index, self.count = kind, index, count

    def __repr__(self):
        return f"{self.kind}{self.index}x{self.count}"


@functools.lru_cache(maxsize=1 << 16)  # pure in the token; every instruction compile asks
def parse_reg(tok: str) -> Reg | None:
    m = _REG.match(tok)
    if m:
        k = m.group("k")
        lo = int(m.group("one") if m.group("one") is not None else m.group("lo"))
        hi = int(m.group("one") if m.group("one") is not None else m.group("hi"))
        if k == "a":
            return Reg("v", AGPR_BASE + lo, hi - lo + 1)
        return Reg(k, lo, hi - lo + 1)
    if tok in SPECIAL:
        i, c = SPECIAL[tok]
        return Reg("s", i, c)
    m = _TTMP.match(tok)
    if m:
        lo = int(m.group("one") if m.group("one") is not None else m.group("lo"))
        hi = int(m.group("one") if m.group("one") is not None else m.group("hi"))
        return Reg("s", 108 + lo, hi - lo + 1)
    return None


def parse_int(tok: str) -> int | None:
    try:
        return int(tok, 0)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1 << 16)
def const_bits(tok: str, ty: str) -> int | None:
    """Bits of a constant operand for an operand of type ty (b32 f32 b16 f16 b64 f64 i64), or None."""
    v = parse_int(tok)
    if v is not None:
        if ty in ("b64", "f64", "i64", "u64"):
            if ty == "f64" and not -16 <= v <= 64:
                return (v & 0xFFFFFFFF) << 32  # a 32-bit literal of a 64-bit float operand: its high half
            return v & 0xFFFFFFFFFFFFFFFF
        if ty in ("b16", "f16"):
            return v & 0xFFFF if -16 <= v <= 64 else v & 0xFFFFFFFF
        return v & 0xFFFFFFFF
    if tok in F32_INLINE:
        return {"f16": F16_INLINE, "b16": F16_INLINE, "f64": F64_INLINE, "b64": F64_INLINE}.get(ty, F32_INLINE)[tok]
    try:
        f = float(tok)
    except ValueError:
        return None
    if ty in ("f64", "b64"):
        return struct.unpack("<Q", struct.pack("<d", f))[0]
    if ty in ("f16", "b16"):
        return int(np.array(f, np.float16).view(np.uint16))
    return struct.unpack("<I", struct.pack("<f", f))[0]


@functools.lru_cache(maxsize=1 << 16)
def strip_modifiers(tok: str) -> tuple[str, bool, bool, bool]:
    """'-|v1|' / 'neg(v1)' / 'abs(v1)' / 'sext(v1)' -> (v1, neg, abs, sext)."""
    neg = ab = sext = False
    while True:
        if tok.startswith("-") and not re.match(r"^-\d", tok) and not re.match(r"^-0x", tok):
            neg, tok = True, tok[1:]
        elif tok.startswith("neg(") and tok.endswith(")"):
            neg, tok = True, tok[4:-1]
        elif tok.startswith("|") and tok.endswith("|"):
            ab, tok = True, tok[1:-1]
        elif tok.startswith("abs(") and tok.endswith(")"):
            ab, tok = True, tok[4:-1]
        elif tok.startswith("sext(") and tok.endswith(")"):
            sext, tok = True, tok[5:-1]
        else:
            return tok, neg, ab, sext


def need(cond: bool, ins, why: str = ""):
    if not cond:
        raise UnknownInstruction(f"unsupported form of {ins.text!r}{': ' + why if why else ''}")
