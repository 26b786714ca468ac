"""poisoned_outputs(): while open, torch.empty returns poisoned CPU memory (the ops allocate their outputs with it),
so an output element a kernel never writes stays NaN / an impossible code and fails the check. Shared by the
emulator tests (their outputs live on the CPU)."""
from __future__ import annotations

import contextlib

import torch

# a value no kernel writes: NaN for floats, the fp8 NaN code, -128 for int8 (quantize_rows saturates at +-127)
POISON_BYTE = {torch.float8_e4m3fn: 0x7F, torch.float8_e4m3fnuz: 0x80, torch.int8: 0x80}


@contextlib.contextmanager
def poisoned_outputs():
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        if t.device.type == "cpu" and t.numel():
            if t.dtype.is_floating_point and t.element_size() > 1:
                t.fill_(float("nan"))
            elif t.dtype in POISON_BYTE:
                t.view(torch.uint8).fill_(POISON_BYTE[t.dtype])
            elif t.dtype == torch.int32:
                t.fill_(0x7FBADBAD)
        return t

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = real
