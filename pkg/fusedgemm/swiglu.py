"""SwiGLU / GeGLU as ONE GEMM: act(x @ Wg.T) * (x @ Wu.T) over a gate/up-interleaved weight, whose paired
epilogue (fusedgemm.epilogue: gate, up) turns each adjacent column pair into one output column.

    y = fg.swiglu(x, w_gate_up)                          # w_gate_up [2I, K]: gate rows, then up rows -> y [..., I]
    y = fg.swiglu(x, w_gate_up, b_gate_up, activation="gelu", exact=True)
    wi = fg.interleave_gate_up(w8, preshuffle=True)      # 8-bit: interleave + preshuffle once, at load time
    y = fg.swiglu(x8, wi, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

Weight orders. The MERGED order is how transformers / vLLM store a fused gate_up projection: [2I, K], rows
0..I-1 the gate, rows I..2I-1 the up (torch.chunk(2) splits it). The kernel reads the INTERLEAVED order: row
2j = gate j, row 2j + 1 = up j (granularity 1), so a (gate, up) pair is two adjacent GEMM columns, which every
kernel's store path hands to one epilogue call (docs/design.md, "Paired epilogues"). An interleaved weight is
only ever an `InterleavedGateUp` (a tagged type, like PreshuffledWeight): a bare tensor is always read as merged,
so a merged weight can never be taken for an interleaved one. Bias and scale_b stay in the merged order [2I]
whatever the weight's type: the epilogue reads them per output column j (gate j at j, up j at I + j).

16-bit: a merged weight is interleaved on first use and the copy cached on the weight tensor, keyed by its
(data_ptr, shape, stride, dtype, device, _version): an in-place update (load_state_dict's copy_) bumps _version,
so the next call re-interleaves; results are never stale.
"""
from __future__ import annotations

import torch

from . import epilogue as _epi
from .epilogue.presets import did_you_mean
from .gemm_a8 import gemm_a8
from .matmul import matmul_fused
from .preshuffle import PreshuffledWeight, preshuffle as _preshuffle, unshuffle as _unshuffle
from .runtime.device import emulated_arch
from .util import cached_on

ACTIVATIONS = ("silu", "gelu", "gelu_erf", "relu")  # gelu: tanh approximation; gelu_erf: exact (torch's default)
_CACHE_ATTR = "_fusedgemm_gate_up_interleaved"


class InterleavedGateUp:
    """A gate/up weight in the interleaved order (row 2j = gate j, row 2j + 1 = up j): `weight` is a [2I, K]
    tensor (16-bit) or a PreshuffledWeight of one (8-bit). Made by interleave_gate_up; deinterleave_gate_up
    gives the merged order back."""

    __slots__ = ("weight",)

    def __init__(self, weight):
        if not isinstance(weight, (torch.Tensor, PreshuffledWeight)):
            raise TypeError(f"InterleavedGateUp: expected a tensor or PreshuffledWeight, got {type(weight).__name__}")
        if len(weight.shape) != 2 or weight.shape[0] % 2:
            raise ValueError(f"InterleavedGateUp: expected [2I, K], got shape {tuple(weight.shape)}")
        self.weight = weight

    @property
    def shape(self):
        return self.weight.shape

    def __repr__(self):
        kind = "preshuffled " if isinstance(self.weight, PreshuffledWeight) else ""
        return f"InterleavedGateUp({kind}{self.weight.dtype} [2I={self.weight.shape[0]}, K={self.weight.shape[1]}])"


def interleave_rows(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """[I, K] gate and up rows -> the interleaved [2I, K] (rows g0, u0, g1, u1, ...), a new tensor."""
    return torch.stack((gate, up), dim=1).reshape(2 * gate.shape[0], *gate.shape[1:])


def _interleave(w: torch.Tensor) -> torch.Tensor:
    i = w.shape[0] // 2
    return interleave_rows(w[:i], w[i:])


def _check_merged(w, what: str = "w_gate_up") -> None:
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"swiglu: {what} must be a tensor [2I, K] (gate rows, then up rows), an InterleavedGateUp "
                        f"or (8-bit) fusedgemm.interleave_gate_up(w, preshuffle=True), got {type(w).__name__}")
    if w.dim() != 2 or w.shape[0] % 2 or w.shape[0] == 0:
        raise ValueError(f"swiglu: {what} must be [2I, K] with 2I even and positive, got shape {tuple(w.shape)}")


def interleave_gate_up(w_gate_up: torch.Tensor, *, preshuffle: bool = False) -> InterleavedGateUp:
    """Merged [2I, K] (gate rows, then up rows) -> InterleavedGateUp (a copy; row 2j gate j, 2j + 1 up j).
    preshuffle=True (8-bit weights, for gemm_a8's kernels): the interleaved copy, preshuffled."""
    _check_merged(w_gate_up)
    with torch.no_grad():
        wi = _interleave(w_gate_up.detach())
    return InterleavedGateUp(_preshuffle(wi) if preshuffle else wi)


def deinterleave_gate_up(w: InterleavedGateUp) -> torch.Tensor:
    """InterleavedGateUp -> the merged [2I, K] tensor (gate rows, then up rows; unshuffled if preshuffled)."""
    if not isinstance(w, InterleavedGateUp):
        raise TypeError(f"deinterleave_gate_up: expected an InterleavedGateUp, got {type(w).__name__}")
    t = _unshuffle(w.weight) if isinstance(w.weight, PreshuffledWeight) else w.weight
    return torch.cat((t[0::2], t[1::2]))


def _cached_interleaved(w: torch.Tensor) -> torch.Tensor:
    """The interleaved copy of a merged weight, cached on the tensor and keyed by everything an update changes."""
    if w.is_inference():  # no version counter, so an in-place update could not be seen: no cache
        return _interleave(w.detach())
    key = (w.data_ptr(), tuple(w.shape), w.stride(), w.dtype, w.device, w._version)
    return cached_on(w, _CACHE_ATTR, key, lambda: _interleave(w.detach()))


def glu_expression(activation: str = "silu", *, exact_dtype: str | None = None, bias: bool = False,
                   scaled: bool = False) -> _epi.Node:
    """The paired epilogue: act(g) * u with g = gate [* alpha * scale_a[m] * scale_gate[j]] [+ bias_gate[j]]
    (u alike from up). exact_dtype ('bf16' / 'fp16'): eager's rounding points, y = round(round(act(round(g))) *
    round(u)) with the final rounding the output's."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"swiglu: activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}"
                         f"{did_you_mean(activation, ACTIVATIONS)}")

    def pre(leaf, half):
        x = leaf
        if scaled:
            x = x * (_epi.scalar("alpha") * _epi.m_vec("scale_a", 1.0)) * _epi.n_vec(f"scale_{half}", 1.0)
        if bias:
            x = x + _epi.n_vec(f"bias_{half}")
        return x if exact_dtype is None else _epi.cast(x, exact_dtype)

    g = _epi.unary(activation, pre(_epi.gate, "gate"))
    if exact_dtype is not None:
        g = _epi.cast(g, exact_dtype)
    return g * pre(_epi.up, "up")


def _halves(v, n2: int, what: str):
    """A merged-order [2I] vector -> (gate [I], up [I]) views; None stays None."""
    if v is None:
        return None, None
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"swiglu: {what} must be a tensor [2I={n2}] or None, got {type(v).__name__}")
    if tuple(v.shape) not in ((n2,), (1, n2)):
        raise ValueError(f"swiglu: {what} must be [2I={n2}] (gate half, then up half), got {list(v.shape)}")
    v = v.reshape(n2)
    return v[: n2 // 2], v[n2 // 2:]


def swiglu(x: torch.Tensor, w_gate_up, bias: torch.Tensor | None = None, *, activation: str = "silu",
           exact: bool = False, out_dtype: torch.dtype | None = None, scale_a=None, scale_b=None) -> torch.Tensor:
    """y = act(x @ Wg.T + bg) * (x @ Wu.T + bu): one GEMM over the gate/up-interleaved weight. y [..., I].

    x: [..., K]. bf16 / fp16 (matmul_fused's kernels) with w_gate_up a merged [2I, K] tensor of x's dtype
       (interleaved on first use and cached on the weight, see the module docstring) or an InterleavedGateUp;
       fp8 / int8 (gemm_a8's kernels, x 2-D [M, K]) with w_gate_up = interleave_gate_up(w8, preshuffle=True).
    bias: [2I] in the merged order (gate half, then up half), or None. 8-bit: scale_a [M] / one value,
       scale_b [2I] (merged order) / one value, as gemm_a8 takes them.
    activation: silu (SwiGLU), gelu (tanh approximation: GeGLU as most models use it), gelu_erf, relu.
    exact=False: everything in fp32, rounded once to out_dtype. exact=True (16-bit x): eager's rounding points,
       out_dtype(x.dtype(act(x.dtype(g))) * x.dtype(u)) -- what F.linear, chunk, act and * give in x's dtype (the
       GEMM sums still differ from cuBLAS's in order, so a rounding can flip by one ulp where g or u is a tie).
    out_dtype: default x's dtype (16-bit) or bfloat16 (8-bit).
    CPU tensors: the same checks, output dtype and shape, computed by a torch reference (swiglu_reference; no
    kernel runs). Not differentiable: call it under
    torch.no_grad() / inference_mode() (a clear error otherwise). torch.compile traces it as fusedgemm::swiglu.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"swiglu: x must be a tensor, got {type(x).__name__}")
    activation = activation.lower() if isinstance(activation, str) else activation  # "SiLU" is silu
    if x.device.type == "cpu" and emulated_arch() is None:  # (inside fusedgemm.testing.emulate: the kernels)
        merged = deinterleave_gate_up(w_gate_up) if isinstance(w_gate_up, InterleavedGateUp) else w_gate_up
        _check_merged(merged)
        return swiglu_reference(x, merged, bias, activation=activation, exact=exact, out_dtype=out_dtype,
                                scale_a=scale_a, scale_b=scale_b)
    if torch.compiler.is_compiling() and isinstance(w_gate_up, torch.Tensor):
        return torch.ops.fusedgemm.swiglu(x, w_gate_up, bias, activation, exact,
                                          x.dtype if out_dtype is None else out_dtype)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                       for t in (x, bias, w_gate_up)):
        raise NotImplementedError("swiglu is not differentiable yet: call it under torch.no_grad() or "
                                  "torch.inference_mode()")
    eight_bit = x.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8)
    if eight_bit:
        return _swiglu_a8(x, w_gate_up, bias, activation, exact, out_dtype, scale_a, scale_b)
    if scale_a is not None or scale_b is not None:
        raise ValueError("swiglu: scale_a / scale_b are for 8-bit x (fp8 / int8); got them with "
                         f"{x.dtype} x")
    return _swiglu_16(x, w_gate_up, bias, activation, exact, out_dtype)


def _swiglu_16(x, w_gate_up, bias, activation, exact, out_dtype):
    """16-bit x: the interleaved weight (given, or the merged one's cached copy) through matmul_fused."""
    if isinstance(w_gate_up, InterleavedGateUp):
        if isinstance(w_gate_up.weight, PreshuffledWeight):
            raise TypeError(f"swiglu: a preshuffled (8-bit) weight needs fp8 / int8 x, got {x.dtype} x")
        wi = w_gate_up.weight
    else:
        _check_merged(w_gate_up)
        wi = _cached_interleaved(w_gate_up)

    n2 = wi.shape[0]
    bg, bu = _halves(bias, n2, "bias")
    ops = {} if bias is None else {"bias_gate": bg, "bias_up": bu}
    expr = glu_expression(activation, exact_dtype=_exact_dtype(exact, x.dtype), bias=bias is not None)
    return matmul_fused(x, wi, epilogue=expr, operands=ops, out_dtype=out_dtype)


def _exact_dtype(exact: bool, dtype: torch.dtype) -> str | None:
    if not exact:
        return None
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"swiglu: exact=True rounds at the input type's points: x must be bfloat16 or float16, "
                         f"got {dtype}")
    return _epi.DTYPE_NAMES[dtype]


def _swiglu_a8(x, w, bias, activation, exact, out_dtype, scale_a, scale_b):
    if exact:
        raise ValueError("swiglu: exact=True is for 16-bit x (eager's bf16 / fp16 rounding points); 8-bit x runs "
                         "in fp32 and rounds once")
    if not (isinstance(w, InterleavedGateUp) and isinstance(w.weight, PreshuffledWeight)):
        raise TypeError("swiglu: 8-bit x needs the weight as fusedgemm.interleave_gate_up(w8, preshuffle=True) "
                        f"(gate/up interleaved, then preshuffled), got {type(w).__name__}"
                        + (" (a PreshuffledWeight does not say whether it was interleaved)"
                           if isinstance(w, PreshuffledWeight) else ""))
    n2 = w.weight.shape[0]
    ops = {}
    alpha = 1.0
    if isinstance(scale_a, (int, float)) and not isinstance(scale_a, bool):
        alpha, scale_a = alpha * float(scale_a), None
    if isinstance(scale_b, (int, float)) and not isinstance(scale_b, bool):
        alpha, scale_b = alpha * float(scale_b), None
    ops["alpha"] = alpha
    if scale_a is not None:
        ops["scale_a"] = scale_a.reshape(-1) if isinstance(scale_a, torch.Tensor) else scale_a
    if isinstance(scale_b, torch.Tensor) and scale_b.numel() == 1:
        ops["scale_gate"] = ops["scale_up"] = scale_b.reshape(1)
    elif scale_b is not None:
        ops["scale_gate"], ops["scale_up"] = _halves(scale_b, n2, "scale_b")
    if bias is not None:
        ops["bias_gate"], ops["bias_up"] = _halves(bias, n2, "bias")
    expr = glu_expression(activation, bias=bias is not None, scaled=True)
    return gemm_a8(x, w.weight, epilogue=expr, operands=ops, out_dtype=out_dtype)


_TORCH_ACT = {
    "silu": torch.nn.functional.silu,
    "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
    "gelu_erf": torch.nn.functional.gelu,
    "relu": torch.relu,
}


def swiglu_reference(x: torch.Tensor, w_gate_up: torch.Tensor, bias: torch.Tensor | None = None, *,
                     activation: str = "silu", exact: bool = False, out_dtype: torch.dtype | None = None,
                     scale_a=None, scale_b=None) -> torch.Tensor:
    """The same computation as torch ops on x's device (any device; the CPU path of swiglu). w_gate_up: the
    MERGED [2I, K] tensor (8-bit too: dequantised by scale_a / scale_b). exact=False: fp32 throughout, one
    rounding; exact=True: eager's, F.linear in x's dtype, then act and * in that dtype."""
    _check_merged(w_gate_up)
    activation = activation.lower() if isinstance(activation, str) else activation
    if activation not in ACTIVATIONS:
        raise ValueError(f"swiglu: activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}"
                         f"{did_you_mean(activation, ACTIVATIONS)}")
    eight_bit = x.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8)
    out_dtype = out_dtype or (torch.bfloat16 if eight_bit else x.dtype)
    act = _TORCH_ACT[activation]
    if exact:
        _exact_dtype(True, x.dtype)  # 16-bit x only
        h = torch.nn.functional.linear(x, w_gate_up, bias)
        g, u = h.chunk(2, dim=-1)
        return (act(g) * u).to(out_dtype)
    h = x.float() @ w_gate_up.float().T
    if scale_a is not None:
        h = h * (scale_a.float().reshape(-1, 1) if isinstance(scale_a, torch.Tensor) and scale_a.numel() > 1
                 else (scale_a.float().reshape(()) if isinstance(scale_a, torch.Tensor) else float(scale_a)))
    if scale_b is not None:
        h = h * (scale_b.float().reshape(-1) if isinstance(scale_b, torch.Tensor) else float(scale_b))
    if bias is not None:
        h = h + bias.float().reshape(-1)
    g, u = h.chunk(2, dim=-1)
    return (act(g) * u).to(out_dtype)


# ---- torch.compile: one op (the real implementation is the eager call above) -----------------------------------
@torch.library.custom_op("fusedgemm::swiglu", mutates_args=())
def swiglu_op(x: torch.Tensor, w_gate_up: torch.Tensor, bias: torch.Tensor | None, activation: str, exact: bool,
              out_dtype: torch.dtype) -> torch.Tensor:
    """swiglu of 16-bit x and a merged weight (the interleaved copy is cached on the weight as in eager)."""
    with torch.no_grad():
        return swiglu(x, w_gate_up, bias, activation=activation, exact=exact, out_dtype=out_dtype)


@swiglu_op.register_fake
def _swiglu_fake(x, w_gate_up, bias, activation, exact, out_dtype):
    _check_merged(w_gate_up)
    if x.shape[-1] != w_gate_up.shape[1]:
        raise ValueError(f"swiglu: x [..., K={x.shape[-1]}] and w_gate_up {list(w_gate_up.shape)} must agree in K")
    return x.new_empty((*x.shape[:-1], w_gate_up.shape[0] // 2), dtype=out_dtype)


__all__ = ["ACTIVATIONS", "InterleavedGateUp", "deinterleave_gate_up", "glu_expression", "interleave_gate_up",
           "swiglu", "swiglu_reference"]
