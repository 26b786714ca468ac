"""The preshuffled weight format shared by every arch's kernel.

The (16,16) layout that aiter's `shuffle_weight`, FlyDSL and hipBLASLt (HIPBLASLT_ORDER_COL16_4R16) read:
with Kp = 16 / element_bytes (16 for the 8-bit weights preshuffle accepts),

    off(n, k) = (n // 16) * (16*K) + (k // Kp) * (16*Kp) + (n % 16) * Kp + (k % Kp)

16-row blocks; inside a block, for each 16-byte chunk of K, 16 rows x 16 bytes stored contiguously. One
lane's 16-byte load is one MMA operand pack (two on CDNA3 and sm_90).

A preshuffled weight is a `PreshuffledWeight`: the shuffled tensor plus its layout tag. Kernels accept
only that, so an unshuffled tensor can never be read as a shuffled one. preshuffle takes only dtypes gemm_a8
can read (float8_e4m3fn, float8_e4m3fnuz, int8) and any N, K >= 1: a weight whose N or K is not a multiple
of 16 is zero-padded once, here, to Np = ceil16(N) rows and Kp = ceil16(K) columns (zero rows and columns add
nothing to any dot product); `data` is the padded [Np, Kp] tensor the kernels read, `shape` the true [N, K], and
unshuffle returns the original [N, K] bits. Which fp8 variant an arch reads is checked at the gemm_a8 call.
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
    """A weight [N, K] stored in a tagged preshuffled layout. `data` is the stored tensor the kernels read:
    [Np, Kp] = [N, K] rounded up to multiples of 16 (zero padding; the same shape when N and K are multiples
    of 16), its bytes permuted; `shape` is the true [N, K]; use `unshuffle` to get the nn.Linear layout back.
    n, k: the true N and K (default: data's shape, i.e. no padding)."""

    __slots__ = ("_data", "_layout", "_n", "_k", "call_plans")

    def __init__(self, data: torch.Tensor, layout: str = LAYOUT_16x16, n: int | None = None, k: int | None = None):
        if layout != LAYOUT_16x16:
            raise ValueError(f"unknown preshuffle layout {layout!r}; expected {LAYOUT_16x16!r}")
        self._data = data
        self._layout = layout
        self._n, self._k = _true_shape(data, n, k)
        # gemm_a8's checked launch plans for this weight, keyed by the other arguments' metadata (the eager
        # fast path, gemm_a8.py). Lives and dies with the weight; replacing `data` or `layout` clears it.
        self.call_plans = PlanCache(CALL_PLANS_PER_WEIGHT)

    def __reduce__(self):
        # pickle / copy / deepcopy carry the weight, its tag and true shape, not the launch plans (device handles)
        return PreshuffledWeight, (self._data, self._layout, self._n, self._k)

    @property
    def data(self) -> torch.Tensor:
        return self._data

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        # the same stored shape keeps the true [N, K]; another shape is unpadded
        n, k = (self._n, self._k) if tuple(value.shape) == tuple(self._data.shape) else (None, None)
        self._n, self._k = _true_shape(value, n, k)
        self._data = value
        self.call_plans = PlanCache(CALL_PLANS_PER_WEIGHT)

    @property
    def layout(self) -> str:
        return self._layout

    @layout.setter
    def layout(self, value: str) -> None:
        self._layout = value
        self.call_plans = PlanCache(CALL_PLANS_PER_WEIGHT)

    # the true [N, K] ([G, N, K]: a grouped weight, G experts' weights each preshuffled, for grouped_gemm_a8)
    shape = property(lambda self: self.data.shape if self._n is None
                     else torch.Size((*self.data.shape[:-2], self._n, self._k)))
    groups = property(lambda self: self.data.shape[0] if self.data.dim() == 3 else None)
    padded_shape = property(lambda self: self.data.shape)  # the stored [Np, Kp] the kernels read
    dtype = property(lambda self: self.data.dtype)
    device = property(lambda self: self.data.device)

    def to(self, *args, **kwargs) -> "PreshuffledWeight":
        moved = self.data.to(*args, **kwargs)
        if moved.dtype != self.data.dtype:
            raise TypeError(f"a preshuffled weight keeps its dtype ({self.data.dtype}); converting to {moved.dtype} "
                            "would reinterpret the layout: unshuffle, convert, preshuffle again")
        return PreshuffledWeight(moved.contiguous(), self.layout, self._n, self._k)

    def cuda(self, device=None) -> "PreshuffledWeight":
        return self.to(torch.device("cuda") if device is None else device)

    def cpu(self) -> "PreshuffledWeight":
        return self.to("cpu")

    def __repr__(self) -> str:
        n, k = self.shape
        pad = "" if tuple(self.data.shape) == (n, k) else f", stored as {list(self.data.shape)} (zero-padded)"
        return f"PreshuffledWeight(N={n}, K={k}{pad}, dtype={self.data.dtype}, device={self.data.device}, layout={self.layout!r})"


def _true_shape(data, n, k) -> tuple[int, int]:
    """The true [N, K] of a stored [Np, Kp] weight: n, k (given) or data's shape; padding is what preshuffle
    makes: each of N, K at most 15 short of a stored extent that is a multiple of 16."""
    if not isinstance(data, torch.Tensor) or data.dim() not in (2, 3):
        if n is None and k is None:
            return None, None  # not a weight: the checks of the op it is passed to say what is wrong
        shape = tuple(data.shape) if isinstance(data, torch.Tensor) else type(data).__name__
        raise ValueError(f"PreshuffledWeight: data must be a 2-D tensor [N, K] (or [G, N, K]), got {shape}")
    np_, kp = data.shape[-2:]
    n = np_ if n is None else int(n)
    k = kp if k is None else int(k)
    for true, stored, what in ((n, np_, "N"), (k, kp, "K")):
        if (true, stored) != (stored, stored) and not (0 < true <= stored and stored % 16 == 0 and stored - true < 16):
            raise ValueError(f"PreshuffledWeight: true {what}={true} does not fit the stored {what}={stored} (padding "
                             "rounds up to the next multiple of 16)")
    return n, k


def _round16(x: int) -> int:
    return -(-x // 16) * 16


def preshuffle(w: torch.Tensor) -> PreshuffledWeight:
    """[N, K] weight (nn.Linear layout) -> PreshuffledWeight in the (16,16) layout. Bit-exact, any device.
    [G, N, K] (G experts' weights, for grouped_gemm_a8): each expert's [N, K] preshuffled, stored [G, Np, Kp].

    w: float8_e4m3fn, float8_e4m3fnuz or int8, any N, K >= 1. N and K not multiples of 16 are zero-padded
    here, once, to the next multiples of 16 (`data` is [Np, Kp]; `shape` stays [N, K]; unshuffle undoes it)."""
    if isinstance(w, PreshuffledWeight):
        raise TypeError("preshuffle: the weight is already preshuffled")
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"preshuffle: expected a torch.Tensor, got {type(w).__name__}")
    if w.dtype not in WEIGHT_DTYPES:
        raise TypeError(f"preshuffle: the weight must be {', '.join(map(str, WEIGHT_DTYPES[:-1]))} or {WEIGHT_DTYPES[-1]} (what gemm_a8 "
                        f"reads), got {w.dtype}; quantize the weight to one of them first")
    if w.dim() not in (2, 3):
        raise ValueError(f"preshuffle: expected a 2-D weight [N, K] (or [G, N, K] experts), got shape "
                         f"{tuple(w.shape)}")
    lead, (n, k) = tuple(w.shape[:-2]), w.shape[-2:]
    if 0 in lead:
        raise ValueError(f"preshuffle: experts' weights [G, N, K] need G >= 1, got shape {tuple(w.shape)}")
    if n == 0 or k == 0:
        raise ValueError(f"preshuffle: the weight [N, K] must have N >= 1 and K >= 1, got N={n}, K={k}")
    np_, kpad = _round16(n), _round16(k)
    kp = _CHUNK_BYTES  # 16 one-byte elements per chunk
    raw = w.contiguous().view(torch.uint8)
    if (np_, kpad) != (n, k):  # zero rows / columns: the bytes 0 are +0 in every 8-bit format read here
        padded = torch.zeros((*lead, np_, kpad), dtype=torch.uint8, device=w.device)
        padded[..., :n, :k] = raw
        raw = padded
    shuffled = raw.reshape(*lead, np_ // _BLOCK_N, _BLOCK_N, kpad // kp, kp).transpose(-3, -2).contiguous()
    return PreshuffledWeight(shuffled.reshape(*lead, np_, kpad).view(w.dtype), LAYOUT_16x16, n, k)


def unshuffle(wq: PreshuffledWeight) -> torch.Tensor:
    """Inverse of preshuffle: back to the true [N, K] nn.Linear layout (padding dropped), bit for bit."""
    if not isinstance(wq, PreshuffledWeight):
        raise TypeError(f"unshuffle: expected a PreshuffledWeight, got {type(wq).__name__}")
    d = wq.data
    lead, (n, k) = tuple(d.shape[:-2]), d.shape[-2:]
    kp = _chunk_elems(d.dtype)
    raw = d.view(torch.uint8) if d.element_size() == 1 else d
    out = raw.reshape(*lead, n // _BLOCK_N, k // kp, _BLOCK_N, kp).transpose(-3, -2).contiguous().reshape(*lead, n, k)
    tn, tk = wq.shape[-2:]
    if (tn, tk) != (n, k):
        out = out[..., :tn, :tk].contiguous()
    return out.view(d.dtype) if d.element_size() == 1 else out
