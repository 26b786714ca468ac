"""The preshuffled weight format shared by every arch's kernel.

The (16,16) layout that aiter's `shuffle_weight`, FlyDSL and hipBLASLt (HIPBLASLT_ORDER_COL16_4R16) read:
with Kp = 16 / element_bytes (16 for the 8-bit weights preshuffle accepts),

    off(n, k) = (n // 16) * (16*K) + (k // Kp) * (16*Kp) + (n % 16) * Kp + (k % Kp)

16-row blocks; inside a block, for each 16-byte chunk of K, 16 rows x 16 bytes stored contiguously. One
lane's 16-byte load is one MMA operand pack (two on CDNA3 and sm_90).

A preshuffled weight is a `PreshuffledWeight`: the shuffled tensor plus its layout tag. Kernels accept
only that, so an unshuffled tensor can never be read as a shuffled one. preshuffle takes only dtypes and
shapes gemm_a8 can read (float8_e4m3fn, float8_e4m3fnuz, int8; N and K positive multiples of 16); which fp8
variant an arch reads is checked at the gemm_a8 call.
"""
from __future__ import annotations

import torch

from .util import PlanCache

LAYOUT_16x16 = "aiter-16x16"
_BLOCK_N = 16
_CHUNK_BYTES = 16
# What gemm_a8 reads (checks._in_kind); anything else is refused here rather than at the first call.
WEIGHT_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8)


def _chunk_elems(dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    if _CHUNK_BYTES % size:
        raise TypeError(f"preshuffle: element size {size} of {dtype} does not divide 16 bytes")
    return _CHUNK_BYTES // size
CALL_PLANS_PER_WEIGHT = 64  # distinct (M, dtypes, ...) signatures gemm_a8 remembers per weight


class PreshuffledWeight:
    """A weight [N, K] stored in a tagged preshuffled layout. `data` has shape [N, K] but its bytes are
    permuted; use `unshuffle` to get the nn.Linear layout back."""

    __slots__ = ("_data", "_layout", "call_plans")

    def __init__(self, data: torch.Tensor, layout: str = LAYOUT_16x16):
        if layout != LAYOUT_16x16:
            raise ValueError(f"unknown preshuffle layout {layout!r}; expected {LAYOUT_16x16!r}")
        self._data = data
        self._layout = layout
        # gemm_a8's checked launch plans for this weight, keyed by the other arguments' metadata (the eager
        # fast path, gemm_a8.py). Lives and dies with the weight; replacing `data` or `layout` clears it.
        self.call_plans = PlanCache(CALL_PLANS_PER_WEIGHT)

    def __reduce__(self):
        # pickle / copy / deepcopy carry the weight and its tag, not the launch plans (device handles)
        return PreshuffledWeight, (self._data, self._layout)

    @property
    def data(self) -> torch.Tensor:
        return self._data

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        self._data = value
        self.call_plans = PlanCache(CALL_PLANS_PER_WEIGHT)

    @property
    def layout(self) -> str:
        return self._layout

    @layout.setter
    def layout(self, value: str) -> None:
        self._layout = value
        self.call_plans = PlanCache(CALL_PLANS_PER_WEIGHT)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    device = property(lambda self: self.data.device)

    def to(self, *args, **kwargs) -> "PreshuffledWeight":
        moved = self.data.to(*args, **kwargs)
        if moved.dtype != self.data.dtype:
            raise TypeError(f"a preshuffled weight keeps its dtype ({self.data.dtype}); converting to {moved.dtype} "
                            "would reinterpret the layout: unshuffle, convert, preshuffle again")
        return PreshuffledWeight(moved.contiguous(), self.layout)

    def cuda(self, device=None) -> "PreshuffledWeight":
        return self.to(torch.device("cuda") if device is None else device)

    def cpu(self) -> "PreshuffledWeight":
        return self.to("cpu")

    def __repr__(self) -> str:
        n, k = self.data.shape
        return f"PreshuffledWeight(N={n}, K={k}, dtype={self.data.dtype}, device={self.data.device}, layout={self.layout!r})"


def preshuffle(w: torch.Tensor) -> PreshuffledWeight:
    """[N, K] weight (nn.Linear layout) -> PreshuffledWeight in the (16,16) layout. Bit-exact, any device.

    w: float8_e4m3fn, float8_e4m3fnuz or int8, N and K positive multiples of 16 (gemm_a8's shape rule)."""
    if isinstance(w, PreshuffledWeight):
        raise TypeError("preshuffle: the weight is already preshuffled")
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"preshuffle: expected a torch.Tensor, got {type(w).__name__}")
    if w.dtype not in WEIGHT_DTYPES:
        raise TypeError(f"preshuffle: the weight must be {', '.join(map(str, WEIGHT_DTYPES[:-1]))} or {WEIGHT_DTYPES[-1]} (what gemm_a8 "
                        f"reads), got {w.dtype}; quantize the weight to one of them first")
    if w.dim() != 2:
        raise ValueError(f"preshuffle: expected a 2-D weight [N, K], got shape {tuple(w.shape)}")
    n, k = w.shape
    if n == 0 or k == 0 or n % _BLOCK_N or k % _CHUNK_BYTES:
        raise ValueError(f"preshuffle: the weight [N, K] needs N and K positive multiples of 16 (N % 16 == 0 and "
                         f"K % 16 == 0, as gemm_a8 reads them), got N={n}, K={k}")
    kp = _CHUNK_BYTES  # 16 one-byte elements per chunk
    raw = w.contiguous().view(torch.uint8)
    shuffled = raw.reshape(n // _BLOCK_N, _BLOCK_N, k // kp, kp).permute(0, 2, 1, 3).contiguous().reshape(n, k)
    return PreshuffledWeight(shuffled.view(w.dtype))


def unshuffle(wq: PreshuffledWeight) -> torch.Tensor:
    """Inverse of preshuffle: back to the [N, K] nn.Linear layout, bit for bit."""
    if not isinstance(wq, PreshuffledWeight):
        raise TypeError(f"unshuffle: expected a PreshuffledWeight, got {type(wq).__name__}")
    d = wq.data
    n, k = d.shape
    kp = _chunk_elems(d.dtype)
    raw = d.view(torch.uint8) if d.element_size() == 1 else d
    out = raw.reshape(n // _BLOCK_N, k // kp, _BLOCK_N, kp).permute(0, 2, 1, 3).contiguous().reshape(n, k)
    return out.view(d.dtype) if d.element_size() == 1 else out
