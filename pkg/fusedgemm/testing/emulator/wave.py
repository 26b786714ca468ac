"""State of one wave64: SGPRs (Python ints, with VCC / EXEC / M0 at their encoding indices), SCC, the VGPR file
(numpy uint32 [512, 64]: v0..v255 then a0..a255), the EXEC mask as booleans, and the outstanding memory
operations per counter (vmcnt, lgkmcnt) whose destination registers are written only when an s_waitcnt
retires them."""
from __future__ import annotations

from collections import deque

import numpy as np

POISON = 0x7FBADBAD  # a signalling-NaN pattern as f32, a huge value as an integer
SPOISON = 0xDEADBEEF
LANES = 64
ALL = (1 << 64) - 1
_BITS = np.uint64(1) << np.arange(64, dtype=np.uint64)


def mask_to_int(m: np.ndarray) -> int:
    return int(np.bitwise_or.reduce(_BITS[m])) if m.any() else 0


def int_to_mask(x: int) -> np.ndarray:
    return (np.uint64(x) & _BITS) != 0


class Pending:
    """An outstanding memory operation: its writes happen at retirement. vrows / lanes / srows: the registers
    (and lanes) it will write, which no instruction may touch before an s_waitcnt retires it."""
    __slots__ = ("kind", "apply", "what", "vrows", "lanes", "srows")

    def __init__(self, kind, apply, what, vrows=(), lanes=None, srows=()):
        self.kind, self.apply, self.what = kind, apply, what
        self.vrows, self.lanes, self.srows = tuple(vrows), lanes, tuple(srows)


class Wave:
    def __init__(self, wid: int, nvgpr_rows: int = 512):
        self.id = wid
        self.s = [SPOISON] * 128
        self.scc = 0
        self.v = np.full((nvgpr_rows, LANES), POISON, dtype=np.uint32)
        self.exec_mask = np.zeros(LANES, bool)
        self.full = False
        self.pc = 0
        self.done = False
        self.at_barrier = False
        self.vmq: deque = deque()
        self.lgkmq: deque = deque()
        self.pend_v: dict = {}  # VGPR row -> Pending that will write it
        self.pend_s: dict = {}  # SGPR index -> Pending
        self.executed = 0
        self.set_exec(0)

    # EXEC
    def set_exec(self, x: int) -> None:
        x &= ALL
        self.s[126], self.s[127] = x & 0xFFFFFFFF, x >> 32
        self.exec_mask = int_to_mask(x)
        self.full = x == ALL

    def exec_int(self) -> int:
        return self.s[126] | self.s[127] << 32

    def sync_exec(self) -> None:
        """After a write of exec_lo / exec_hi alone."""
        self.set_exec(self.s[126] | self.s[127] << 32)

    # VGPR writes under EXEC
    def vwrite(self, row: int, val) -> None:
        if self.full:
            self.v[row] = val
        else:
            np.copyto(self.v[row], val, where=self.exec_mask, casting="unsafe")

    def vwrite64(self, row: int, val) -> None:
        val = np.asarray(val, dtype=np.uint64)
        lo = (val & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        hi = (val >> np.uint64(32)).astype(np.uint32)
        self.vwrite(row, lo)
        self.vwrite(row + 1, hi)

    def v64(self, row: int) -> np.ndarray:
        return self.v[row].astype(np.uint64) | (self.v[row + 1].astype(np.uint64) << np.uint64(32))

    # outstanding memory operations
    def issue(self, queue: str, p: Pending) -> None:
        (self.vmq if queue == "vm" else self.lgkmq).append(p)
        for r in p.vrows:
            self.pend_v[r] = p
        for r in p.srows:
            self.pend_s[r] = p

    def _retire(self, p: Pending) -> None:
        p.apply()
        for r in p.vrows:
            if self.pend_v.get(r) is p:
                del self.pend_v[r]
        for r in p.srows:
            if self.pend_s.get(r) is p:
                del self.pend_s[r]

    def wait(self, vm: int, lgkm: int) -> None:
        q = self.vmq
        while len(q) > vm:
            self._retire(q.popleft())
        q = self.lgkmq
        if len(q) > lgkm:
            # LDS operations return in order; scalar loads in any order: retire LDS first (scalar loads as late
            # as the count allows -- the adversarial order the ISA permits).
            lds = [p for p in q if p.kind == "lds"]
            smem = [p for p in q if p.kind != "lds"]
            order = lds + smem
            n = len(q) - lgkm
            for p in order[:n]:
                self._retire(p)
            self.lgkmq = deque(order[n:])
