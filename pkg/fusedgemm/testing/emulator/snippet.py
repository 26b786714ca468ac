"""Execute a few instructions on one wave: the instruction unit tests' harness.

    w = run_snippet(["v_add_f32_e32 v1, v2, v3"], "gfx942", v={2: a, 3: b})
    w.v[1]   # uint32[64]

The text goes through the same assembler as kernels (so it must be a real instruction of the arch) and the
same decoding and semantics; the wave starts with every register poisoned but those given.
"""
from __future__ import annotations

import numpy as np

from .loader import assemble_with_encodings, decode_listing
from .machine import Machine, Program
from .memory import Memory
from .wave import ALL, Wave


class _SnippetKernel:
    def __init__(self, name, arch, instrs):
        self.name, self.arch, self.instructions = name, arch, instrs


def _bits(x) -> np.ndarray:
    """float32 values -> their bits; integers (any sign) -> uint32 modulo 2**32."""
    a = np.asarray(x)
    if a.dtype == np.float32:
        return a.view(np.uint32)
    if a.dtype.kind == "f":
        return a.astype(np.float32).view(np.uint32)
    return (a.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)


def assemble_snippet(lines: list[str], arch: str) -> list:
    text = "snippet:\n" + "".join(f"\t{x}\n" for x in lines) + "\ts_endpgm\n"
    return decode_listing(assemble_with_encodings(text, arch), "snippet")


def run_snippet(lines: list[str], arch: str = "gfx942", *, s: dict | None = None, v: dict | None = None,
                exec_mask: int = ALL, scc: int = 0, memory: Memory | None = None, lds_bytes: int = 0,
                mfma=None) -> Wave:
    instrs = assemble_snippet(lines, arch)
    mach = Machine(memory or Memory(), mfma=mfma)
    prog = Program(_SnippetKernel("snippet", arch, instrs), mach)
    mach.race_check = False
    mach.lds_fence_check = False
    mach.reset_lds(lds_bytes, 0)
    w = Wave(0)
    for i, x in (s or {}).items():
        w.s[i] = int(x) & 0xFFFFFFFF
    for i, x in (v or {}).items():
        w.v[i] = np.broadcast_to(_bits(x), (64,))
    w.set_exec(exec_mask)
    w.scc = scc
    pc = 0
    for _ in range(10000):
        r = prog.fns[pc](w)
        if r is None:
            pc += 1
        elif r < 0:
            break
        else:
            pc = r
    w.wait(0, 0)
    return w
