"""Device memory of an emulated launch: the buffers the call passed, each at a device address.

A buffer is a writable numpy uint8 view (of a torch CPU tensor's storage, or any array). By default each gets a
fake address in its own 4 GiB window, so an access past its end faults instead of landing in a neighbour; a
buffer may also be registered at a given address (the HIP path: the host address the kernel arguments hold).
Every access is checked: outside every buffer is a MemoryFault naming the address (never a segfault).
"""
from __future__ import annotations

import bisect
import ctypes

import numpy as np

from .errors import MemoryFault

FAKE_BASE = 0x1000_0000_0000
WINDOW = 1 << 32


def host_view(ptr: int, nbytes: int) -> np.ndarray:
    """A writable uint8 numpy view of host memory [ptr, ptr + nbytes) (a torch CPU tensor's storage)."""
    if nbytes == 0:
        return np.zeros(0, np.uint8)
    return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=np.uint8)


def as_bytes(x) -> tuple[np.ndarray, int]:
    """(uint8 view of x's storage from its first element, its host address) for a torch tensor or numpy array."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise ValueError(f"the emulator runs on CPU tensors, got one on {x.device}")
        st = x.untyped_storage()
        start = x.data_ptr()
        end = st.data_ptr() + st.nbytes()
        return host_view(start, end - start), start
    a = np.asarray(x)
    if not a.flags.c_contiguous:
        raise ValueError("a numpy buffer must be C-contiguous")
    v = a.reshape(-1).view(np.uint8)
    return v, a.__array_interface__["data"][0]


class Memory:
    def __init__(self):
        self.bases: list[int] = []
        self.ends: list[int] = []
        self.bufs: list[np.ndarray] = []
        self.names: list[str] = []
        self.readonly: list[bool] = []
        self._keep: list = []  # the registered objects, alive as long as their memory is addressable
        self._next = FAKE_BASE

    def register(self, x, name: str = "buffer", base: int | None = None, readonly: bool = False) -> int:
        """Make x (torch CPU tensor, numpy array or uint8 view) addressable; returns its device address."""
        buf, host = as_bytes(x) if not (isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 1) \
            else (x, x.__array_interface__["data"][0])
        if base is None:
            base = self._next
            self._next += WINDOW * (1 + len(buf) // WINDOW)
        elif base == "host":
            base = host
        end = base + len(buf)
        i = bisect.bisect_right(self.bases, base)
        if (i > 0 and self.ends[i - 1] > base) or (i < len(self.bases) and self.bases[i] < end):
            # overlapping registration of the same host memory (two views of one storage): keep the larger
            j = i - 1 if i > 0 and self.ends[i - 1] > base else i
            if self.bases[j] <= base and self.ends[j] >= end:
                return base
            raise ValueError(f"buffer {name} at 0x{base:x}+{len(buf)} overlaps {self.names[j]}")
        self._keep.append(x)
        self.bases.insert(i, base)
        self.ends.insert(i, end)
        self.bufs.insert(i, buf)
        self.names.insert(i, name)
        self.readonly.insert(i, readonly)
        self._arr = None
        return base

    def _arrays(self):
        if getattr(self, "_arr", None) is None:
            self._arr = (np.array(self.bases, dtype=np.uint64), np.array(self.ends, dtype=np.uint64))
        return self._arr

    def describe(self) -> str:
        return ", ".join(f"{n}@0x{b:x}+{e - b}" for n, b, e in zip(self.names, self.bases, self.ends))

    def _locate(self, addrs: np.ndarray, nbytes: int, what: str):
        """Region index per address (all must fit in one region each)."""
        bases, ends = self._arrays()
        idx = np.searchsorted(bases, addrs, side="right").astype(np.int64) - 1
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        ok &= (addrs + np.uint64(nbytes)) <= ends[safe] if len(ends) else np.zeros_like(ok)
        if not ok.all():
            bad = int(addrs[~ok][0])
            raise MemoryFault(f"{what}: address 0x{bad:x} ({nbytes} bytes) is outside every buffer of the launch "
                              f"({self.describe() or 'none registered'})")
        return safe

    def _one_region(self, addrs: np.ndarray, nbytes: int) -> int:
        """The buffer that holds every access [a, a + nbytes) (the usual case: one buffer per instruction), or -1
        (then the general path sorts the addresses out, or raises the fault)."""
        lo, hi = int(addrs.min()), int(addrs.max())
        i = bisect.bisect_right(self.bases, lo) - 1
        return i if i >= 0 and hi + nbytes <= self.ends[i] else -1

    def read(self, addrs: np.ndarray, nbytes: int, what: str) -> np.ndarray:
        """uint8 [len(addrs), nbytes]."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        if len(addrs) and (r := self._one_region(addrs, nbytes)) >= 0:
            off = (addrs - np.uint64(self.bases[r])).astype(np.int64)
            return self.bufs[r][off[:, None] + np.arange(nbytes, dtype=np.int64)]
        out = np.empty((len(addrs), nbytes), np.uint8)
        if len(addrs) == 0:
            return out
        idx = self._locate(addrs, nbytes, what)
        cols = np.arange(nbytes, dtype=np.int64)
        for r in np.unique(idx):
            sel = idx == r
            off = (addrs[sel] - np.uint64(self.bases[r])).astype(np.int64)
            out[sel] = self.bufs[r][off[:, None] + cols]
        return out

    def write(self, addrs: np.ndarray, data: np.ndarray, what: str) -> None:
        addrs = np.asarray(addrs, dtype=np.uint64)
        if len(addrs) == 0:
            return
        nbytes = data.shape[1]
        r = self._one_region(addrs, nbytes)
        if r >= 0 and not self.readonly[r]:
            off = (addrs - np.uint64(self.bases[r])).astype(np.int64)
            self.bufs[r][off[:, None] + np.arange(nbytes, dtype=np.int64)] = data  # a later lane wins, as in hardware
            return
        idx = self._locate(addrs, nbytes, what)
        cols = np.arange(nbytes, dtype=np.int64)
        for r in np.unique(idx):
            if self.readonly[r]:
                raise MemoryFault(f"{what}: write to read-only {self.names[r]} at 0x{int(addrs[idx == r][0]):x}")
            sel = idx == r
            off = (addrs[sel] - np.uint64(self.bases[r])).astype(np.int64)
            self.bufs[r][off[:, None] + cols] = data[sel]  # lanes in order: a later lane wins, as in hardware

    def read_scalar(self, addr: int, nbytes: int, what: str) -> bytes:
        # inside one buffer (the usual case): slice it directly; anything else takes the checked path, which
        # raises the fault with its message
        i = bisect.bisect_right(self.bases, addr) - 1
        if i >= 0 and addr + nbytes <= self.ends[i]:
            off = addr - self.bases[i]
            return self.bufs[i][off:off + nbytes].tobytes()
        return self.read(np.array([addr], np.uint64), nbytes, what)[0].tobytes()
