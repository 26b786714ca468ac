"""Any N and K for gemm_a8 and matmul_fused: what the kernels cannot read or write in place, and the one place
each op pads it.

What the kernels need (no kernel code changes for unaligned shapes; see docs/usage.md, "Shapes"):
- rows of 16-byte vectors: A [M, K] (and matmul_fused's B [N, K]) rows of K * element size bytes, a multiple of
  16 (the portable template computes the row stride from K; TMA needs 16-byte row strides). gemm_a8: K % 16.
- the preshuffled weight's (16, 16) blocks: N and K multiples of 16 (preshuffle pads the weight once).
- the stores: the epilogue stores runs of columns (2 on sm_90a's mma.sync, 4 in the wgmma kernels, and whole
  16-column blocks of a preshuffled weight in the portable template), masked only at the run's first column,
  and reads the column operands (bias, scale_b, n_vec, aux) of the whole run. So for an N that is not a
  multiple of the run, the output's rows and every [N] / [M, N] operand must extend to the next multiple of 16.

How: outputs of such an N are a view [..., :N] of a [..., ceil16(N)] buffer (row stride ceil16(N), no copy);
[N] operands are copied into a [ceil16(N)] vector per call (N elements, one copy); [M, N] operands whose rows do
not reach ceil16(N) are copied into a padded-stride buffer, and a given `out` of such an N is written through a
padded buffer then copied, each with a one-time warning; A whose K rows are not 16-byte multiples is copied once
per call into a zero-padded [M, Kp] buffer, with a one-time warning.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import epilogue as _epi
from .util import is_fake, warn_once

WIDTH = 16  # output / operand rows extend to a multiple of this many columns


def round_up(x: int, m: int = WIDTH) -> int:
    return -(-x // m) * m


def padded_empty(lead: tuple, n: int, width: int, dtype, device) -> torch.Tensor:
    """A [*lead, n] view of a fresh [*lead, width] buffer (row stride `width`): what a kernel writes in place."""
    if width == n:
        return torch.empty((*lead, n), dtype=dtype, device=device)
    return torch.empty((*lead, width), dtype=dtype, device=device)[..., :n]


def pad_k(op: str, a: torch.Tensor, kp: int) -> torch.Tensor:
    """A [M, K] -> a zero-padded contiguous [M, kp] copy (the kernels read rows of 16-byte vectors)."""
    k = a.shape[1]
    if kp == k and a.is_contiguous():
        return a
    raw = a.view(torch.uint8) if a.element_size() == 1 else a  # 8-bit floats: copy the bits (zero bytes: +0)
    buf = F.pad(raw, (0, kp - k))  # one op: the copy and the zero tail
    return buf.view(a.dtype) if a.element_size() == 1 else buf


def warn_pad_k(op: str, what: str, k: int, kp: int, dtype) -> None:
    warn_once(f"{op}-pad-k", f"{op}: K={k} rows of {dtype} are not a multiple of 16 bytes, which the kernels read "
                             f"as vectors: {what} copied into a zero-padded [.., K={kp}] buffer on every call (one "
                             f"extra pass over {what}). A K that is a multiple of {16 // _size(dtype)} avoids the "
                             "copy (docs/usage.md, Shapes)")


def _size(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def pad_vec(v, n: int, width: int):
    """An [N] operand (any stride) copied into a contiguous [width] vector (one copy kernel); one value and
    non-tensors as they are. The tail is left unwritten: it only feeds the columns >= N, which land in the
    outputs' padding (every output element depends on its own column's operand values alone)."""
    if not isinstance(v, torch.Tensor) or v.numel() == 1 or width == n or is_fake(v):
        return v
    buf = torch.empty(width, dtype=v.dtype, device=v.device)
    buf[:n] = v.reshape(n)
    return buf


def rows_reach(v: torch.Tensor, width: int) -> bool:
    """Whether a kernel may read v [M, N] rows as [M, width] in place: unit column stride, an even row stride
    >= width, two-element aligned, and the last row's `width` values inside v's storage."""
    if is_fake(v):
        return True
    m, n = v.shape
    if m == 0 or n == 0:
        return True
    ld = v.stride(0) if m > 1 else width
    es = v.element_size()
    if (n > 1 and v.stride(1) != 1) or ld < width or ld % 2 or v.data_ptr() % (2 * es):
        return False
    return v.storage_offset() + (m - 1) * ld + width <= v.untyped_storage().nbytes() // es


def fit_rows(op: str, v, n: int, width: int):
    """An [M, N] operand whose rows do not reach `width` columns: copied into a padded-stride buffer (a view
    [M, N] of [M, width]), with a one-time warning. Anything else as it is (the checks judge it)."""
    if not isinstance(v, torch.Tensor) or v.dim() != 2 or v.shape[1] != n or rows_reach(v, width):
        return v
    warn_once(f"{op}-pad-aux", f"{op}: an [M, N={n}] operand (aux / c) is copied into a buffer with rows of "
                               f"{width} columns: for an N that is not a multiple of 16 the kernels read [M, N] "
                               "operands in runs of up to 16 columns. Pass it as a view [:, :N] of an "
                               f"[M, {width}] tensor (as the op's own outputs are) to avoid the copy")
    buf = padded_empty((v.shape[0],), n, width, v.dtype, v.device)
    buf.copy_(v)
    return buf


def fit_aux_operands(op: str, expr, operands, n_out: int, width: int):
    """An expression's aux operands [M, N] fitted to rows of `width` (fit_rows); other operands unchanged."""
    if not isinstance(expr, _epi.Node) or not isinstance(operands, dict) or width == n_out:
        return operands
    kinds = {name: o.kind for name, o in _epi.operands(expr).items()}
    return {name: fit_rows(op, v, n_out, width) if kinds.get(name) == "aux" else v for name, v in operands.items()}


def pad_col_values(expr, operands: dict, values: dict, n_out: int, width: int) -> list:
    """Point the Params values of every [N] operand (n_vec leaves; a preset's bias and scale_b) at a padded
    [width] copy. Returns the copies (keep them alive until the launch is queued)."""
    keep = []
    if width == n_out:
        return keep
    kinds = {name: o.kind for name, o in _epi.operands(expr).items()}
    for name, v in operands.items():
        if kinds.get(name) != "n_vec" or not isinstance(v, torch.Tensor) or v.numel() == 1:
            continue
        padded = pad_vec(v, n_out, width)
        keep.append(padded)
        field = f"op_{name}"
        if field in values:
            values[field] = padded.data_ptr()
            if field + "_stride" in values:
                values[field + "_stride"] = 1
    return keep


def warn_out_copy(op: str, n: int, width: int) -> None:
    warn_once(f"{op}-out-copy", f"{op}: out= of N={n} columns (not a multiple of 16) is written through a buffer "
                                f"with rows of {width} columns, then copied into out (one extra pass over the "
                                "output). Leave out=None to get the result in place: a view [..., :N] of that "
                                "buffer")
