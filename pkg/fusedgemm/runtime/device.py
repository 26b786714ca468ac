"""The current device and stream, cheaply (both are on every op's per-call hot path), and fake-tensor checks.

torch's private bindings where this torch has them (a CPU-only build does not), the public calls otherwise.
"""
from __future__ import annotations

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_get_device = getattr(torch._C, "_cuda_getDevice", None)


def _public_raw_stream(device_index: int) -> int:
    return torch.cuda.current_stream(device_index).cuda_stream


# current_raw_stream(device_index) -> the current stream's handle; current_device_index() -> the current CUDA
# device. They are torch's bindings themselves where it has them, not wrappers: the eager hot paths call both, and a
# Python frame per call is a measurable share of a decode-size call's host time.
current_raw_stream = _raw_stream if _raw_stream is not None else _public_raw_stream
current_device_index = _get_device if _get_device is not None else torch.cuda.current_device


# The AMD arch fusedgemm.testing.emulate(arch) emulates while its context is open, else None. Every place that
# decides "a CPU tensor -> the torch reference, no kernel" asks emulated_arch() first: inside emulate() CPU tensors
# are the emulated device's (they run the real kernels in the emulator); outside it nothing changes.
_EMULATED_ARCH: str | None = None


def emulated_arch() -> str | None:
    """The arch CPU tensors run on inside fusedgemm.testing.emulate(arch) (gfx942 / gfx950); None outside it (CPU
    tensors take the torch reference)."""
    return _EMULATED_ARCH


def device_guard(device: torch.device):
    """Make `device` current for a launch (kernels load per device); free when it already is."""
    return contextlib.nullcontext() if device.index == current_device_index() else torch.cuda.device(device)


def is_fake(t: torch.Tensor) -> bool:
    """A tensor without memory (torch.compile's fake tensors, meta): checks skip its addresses."""
    return isinstance(t, _FakeTensor) or t.device.type == "meta"
