"""Device workspaces of the launches that need one: stream-K's flags and partial tiles (gemm_a8_sm90_stream_k.hpp).

One zeroed buffer per (device, stream), kept for the process: the kernels leave its flags at 0, so it is zeroed
once, and launches on one stream never overlap, so they can share it. Launches on two streams get two buffers.
While a stream is being captured into a CUDA graph there is no safe buffer to bind (a graph may be replayed on
any stream, beside eager launches that use the same buffer), so the caller runs the launch without stream-K.
"""
from __future__ import annotations

import torch

_BUFFERS: dict[tuple[int, int], torch.Tensor] = {}


def stream_workspace(dev: int, stream: int, nbytes: int) -> int:
    """The address of a zeroed workspace of at least `nbytes` for launches on `stream` of device `dev` (the
    current stream of the current device), or 0 while that stream is capturing a graph and has none."""
    buf = _BUFFERS.get((dev, stream))
    if buf is not None and buf.numel() >= nbytes:
        return buf.data_ptr()
    if torch.cuda.is_current_stream_capturing():
        return 0
    # Allocated on the current stream: the old buffer (if smaller) is freed in that stream's order, after the
    # launches already queued that use it.
    buf = _BUFFERS[(dev, stream)] = torch.zeros(nbytes, dtype=torch.uint8, device=torch.device("cuda", dev))
    return buf.data_ptr()


def clear() -> None:
    """Drop every workspace (tests)."""
    _BUFFERS.clear()
