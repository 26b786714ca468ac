"""GatedMLP: a gate/up/down MLP (Llama, Qwen2, Mistral, Phi-3) whose gate and up projections run as ONE swiglu
GEMM with the act(g) * u epilogue fused.

    mlp = fg.nn.GatedMLP.from_module(model.layers[0].mlp)   # LlamaMLP / Qwen2MLP / MistralMLP / Phi3MLP / alike
    y = mlp(x)                                               # down(act(x @ Wg.T + bg) * (x @ Wu.T + bu))
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..epilogue.presets import did_you_mean
from ..swiglu import _TORCH_ACT, ACTIVATIONS, swiglu
from .linear import FusedLinear

_KERNEL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

# Activation modules -> fg.swiglu's names (there "gelu" is the tanh approximation, "gelu_erf" the exact one).
# torch classes by exact type (a subclass may have its own forward); transformers' by class name, so that
# transformers is never imported here.
_TORCH_MODULES = {torch.nn.SiLU: "silu", torch.nn.ReLU: "relu"}
_TORCH_FUNCTIONS = {F.silu: "silu", F.relu: "relu", torch.relu: "relu", F.gelu: "gelu_erf"}
_TRANSFORMERS_CLASSES = {
    "SiLUActivation": "silu",              # ACT2FN["silu"]
    "GELUActivation": "gelu_erf",          # ACT2FN["gelu"], ["gelu_python"]: erf
    "NewGELUActivation": "gelu",           # ACT2FN["gelu_new"]: tanh formula
    "GELUTanh": "gelu",                    # ACT2FN["gelu_pytorch_tanh"], ["gelu_python_tanh"]
    "PytorchGELUTanh": "gelu",             # the older name of GELUTanh
    "FastGELUActivation": "gelu",          # tanh formula, sqrt(2/pi) rounded to 10 digits
    "AccurateGELUActivation": "gelu",      # tanh formula
}


def activation_name(act) -> str:
    """The fg.swiglu activation name computing what the module / function `act` computes; ValueError if none."""
    if type(act) in _TORCH_MODULES:
        return _TORCH_MODULES[type(act)]
    if type(act) is torch.nn.GELU:
        return {"none": "gelu_erf", "tanh": "gelu"}[act.approximate]
    if not isinstance(act, torch.nn.Module) and act in _TORCH_FUNCTIONS:
        return _TORCH_FUNCTIONS[act]
    cls = type(act)
    if cls.__module__.startswith("transformers.") and cls.__name__ in _TRANSFORMERS_CLASSES:
        return _TRANSFORMERS_CLASSES[cls.__name__]
    raise ValueError(f"GatedMLP.from_module: activation {act!r} ({cls.__module__}.{cls.__qualname__}) has no "
                     f"swiglu equivalent; known: nn.SiLU, nn.ReLU, nn.GELU(approximate='none'|'tanh'), F.silu / "
                     f"F.relu / F.gelu and transformers' {', '.join(_TRANSFORMERS_CLASSES)}")


def _plain_linear(m, what: str) -> torch.nn.Linear:
    """m if it computes x @ W.T + b and nothing else (nn.Linear, or a FusedLinear with no activation)."""
    if type(m) is torch.nn.Linear or (isinstance(m, FusedLinear) and m.activation == "none" and m.alpha == 1.0):
        return m
    found = "nothing" if m is None else type(m).__name__
    if isinstance(m, FusedLinear):
        found += f" (activation={m.activation!r}, alpha={m.alpha})"
    raise ValueError(f"GatedMLP.from_module: {what} must be an nn.Linear (x @ W.T + b, no subclass with its own "
                     f"forward), got {found}")


class GatedMLP(torch.nn.Module):
    """y = down(act(x @ Wg.T + bg) * (x @ Wu.T + bu)), the gate and up projections as one fg.swiglu GEMM.

    State (state_dict keys):
      gate_up_weight  [2I, K] MERGED order: rows 0..I-1 the gate projection, rows I..2I-1 the up projection
                      (Phi-3's gate_up_proj.weight; Llama's torch.cat((gate_proj.weight, up_proj.weight)))
      gate_up_bias    [2I] in the same order, or None
      down.weight     [K, I], down.bias [K] or None: `down` is a FusedLinear (nn.Linear's parameters and keys)
    with K = hidden, I = intermediate. activation (fg.swiglu's names: silu, gelu = tanh approximation, gelu_erf,
    relu) and exact are configuration, not state.

    Forward paths:
      * fg.swiglu (no autograd): bf16 / fp16 x, and float32 x with exact=False, when no gradient is needed.
        On a GPU that is the fused kernel (float32: TF32, as FusedLinear and matmul_fused) reading an
        interleaved copy of gate_up_weight that fg.swiglu caches on the parameter, keyed by its address, shape,
        dtype, device and _version: load_state_dict (copy_ in place), any in-place update, .to() and
        replacing the parameter all make the next call re-interleave (the one change the key cannot see:
        `.data` assigned twice between two calls, with no in-place write, the second storage reusing the
        first's freed address). The copy costs as much memory as gate_up_weight. On the CPU fg.swiglu runs its torch reference (fp32, one rounding).
      * torch ops (F.linear on the merged weight, chunk, act, *, then down), which autograd differentiates:
        whenever grad mode is on and x, gate_up_weight or gate_up_bias requires grad (fg.swiglu is not
        differentiable), under torch.autocast, for float64 and other dtypes the kernels do not take, and for
        float32 x with exact=True (eager's float32 arithmetic is what exact asks for).
    exact=True (16-bit x): the kernel rounds where eager torch does (see fg.swiglu)."""

    def __init__(self, hidden: int, intermediate: int, bias: bool = False, activation: str = "silu", device=None,
                 dtype=None, exact: bool = False, *, down_bias: bool | None = None):
        super().__init__()
        if hidden <= 0 or intermediate <= 0:
            raise ValueError(f"GatedMLP: hidden and intermediate must be positive, got hidden={hidden}, "
                             f"intermediate={intermediate}")
        activation = activation.lower() if isinstance(activation, str) else activation  # "SiLU" is silu
        if activation not in ACTIVATIONS:
            raise ValueError(f"GatedMLP: activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}"
                             f"{did_you_mean(activation, ACTIVATIONS)}")
        self.hidden, self.intermediate = hidden, intermediate
        self.activation, self.exact = activation, bool(exact)
        kw = {"device": device, "dtype": dtype}
        self.gate_up_weight = torch.nn.Parameter(torch.empty(2 * intermediate, hidden, **kw))
        self.gate_up_bias = torch.nn.Parameter(torch.empty(2 * intermediate, **kw)) if bias else None
        self.down = FusedLinear(intermediate, hidden, bias if down_bias is None else down_bias, **kw)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation of the gate and up projections (down is initialised by FusedLinear)."""
        torch.nn.init.kaiming_uniform_(self.gate_up_weight, a=math.sqrt(5))  # fan_in = hidden, as each half's
        if self.gate_up_bias is not None:
            bound = 1 / math.sqrt(self.hidden)
            torch.nn.init.uniform_(self.gate_up_bias, -bound, bound)

    # ---- construction ---------------------------------------------------------------------------------------
    @classmethod
    def from_module(cls, mlp: torch.nn.Module, exact: bool = False) -> "GatedMLP":
        """A GatedMLP computing what `mlp` computes, from either
          (a) gate_proj, up_proj, down_proj (nn.Linear) and act_fn: y = down(act(gate(x)) * up(x))
              (transformers' LlamaMLP, Qwen2MLP, MistralMLP, ...), or
          (b) gate_up_proj [2I, K] (gate rows, then up rows), down_proj and activation_fn (or act_fn):
              gate, up = gate_up_proj(x).chunk(2, -1); y = down(up * act(gate)) (transformers' Phi3MLP).
        Weights and biases are COPIED (the gate and up ones into the merged parameter, down's into a new
        FusedLinear): nothing mutable is shared with `mlp`, and later changes to either do not reach the
        other. A bias of gate_proj but not up_proj (or the reverse) becomes zeros in the other half. Parameters
        keep mlp's dtype, device and requires_grad; the module keeps mlp's training flag. ValueError names what
        was found when an attribute is missing, a projection is not a plain nn.Linear, the activation has no
        swiglu equivalent or the shapes, dtypes or devices disagree."""
        if not isinstance(mlp, torch.nn.Module):
            raise ValueError(f"GatedMLP.from_module: expected an nn.Module, got {type(mlp).__name__}")
        name = type(mlp).__name__
        split = hasattr(mlp, "gate_proj") or hasattr(mlp, "up_proj")
        if split == hasattr(mlp, "gate_up_proj"):
            raise ValueError(f"GatedMLP.from_module: {name} must have either gate_proj + up_proj or gate_up_proj "
                             f"(and down_proj), found " + ("both" if split else "neither"))
        act_attr = next((a for a in ("act_fn", "activation_fn") if hasattr(mlp, a)), None)
        if act_attr is None:
            raise ValueError(f"GatedMLP.from_module: {name} has no act_fn or activation_fn attribute")
        activation = activation_name(getattr(mlp, act_attr))
        down = _plain_linear(getattr(mlp, "down_proj", None), f"{name}.down_proj")
        if split:
            projs = {"gate_proj": _plain_linear(getattr(mlp, "gate_proj", None), f"{name}.gate_proj"),
                     "up_proj": _plain_linear(getattr(mlp, "up_proj", None), f"{name}.up_proj")}
        else:
            projs = {"gate_up_proj": _plain_linear(mlp.gate_up_proj, f"{name}.gate_up_proj")}
        ref = next(iter(projs.values())).weight
        for what, lin in (*projs.items(), ("down_proj", down)):
            if lin.weight.dtype != ref.dtype or lin.weight.device != ref.device:
                raise ValueError(f"GatedMLP.from_module: {name}'s projections must share one dtype and device: "
                                 f"{what}.weight is {lin.weight.dtype} on {lin.weight.device}, "
                                 f"{next(iter(projs))}.weight {ref.dtype} on {ref.device}")
        if split:
            gate, up = projs["gate_proj"], projs["up_proj"]
            if gate.weight.shape != up.weight.shape:
                raise ValueError(f"GatedMLP.from_module: {name}.gate_proj.weight {list(gate.weight.shape)} and "
                                 f"up_proj.weight {list(up.weight.shape)} must have the same shape [I, K]")
            w = torch.cat((gate.weight.detach(), up.weight.detach()))
            b = None
            if gate.bias is not None or up.bias is not None:
                b = torch.cat([torch.zeros(ref.shape[0], dtype=ref.dtype, device=ref.device) if lin.bias is None
                               else lin.bias.detach().to(ref.dtype) for lin in (gate, up)])
        else:
            gate_up = projs["gate_up_proj"]
            if ref.shape[0] % 2:
                raise ValueError(f"GatedMLP.from_module: {name}.gate_up_proj.weight must be [2I, K] (gate rows, "
                                 f"then up rows), got an odd row count: {list(ref.shape)}")
            w = ref.detach().clone()
            b = None if gate_up.bias is None else gate_up.bias.detach().clone()
        i2, k = w.shape
        if tuple(down.weight.shape) != (k, i2 // 2):
            raise ValueError(f"GatedMLP.from_module: {name}.down_proj.weight must be [K={k}, I={i2 // 2}] to "
                             f"match the gate/up projections' [I={i2 // 2}, K={k}], got {list(down.weight.shape)}")
        mod = cls(k, i2 // 2, bias=b is not None, activation=activation, device="meta", dtype=ref.dtype,
                  exact=exact, down_bias=down.bias is not None)
        grad = ref.requires_grad
        mod.gate_up_weight = torch.nn.Parameter(w, requires_grad=grad)
        mod.gate_up_bias = None if b is None else torch.nn.Parameter(b, requires_grad=grad)
        mod.down.weight = torch.nn.Parameter(down.weight.detach().clone(), requires_grad=down.weight.requires_grad)
        mod.down.bias = (None if down.bias is None else
                         torch.nn.Parameter(down.bias.detach().clone(), requires_grad=down.bias.requires_grad))
        mod.train(mlp.training)
        return mod

    # ---- forward --------------------------------------------------------------------------------------------
    def _use_torch_ops(self, x: torch.Tensor) -> bool:
        if x.dtype not in _KERNEL_DTYPES or (self.exact and x.dtype == torch.float32):
            return True
        if torch.is_autocast_enabled(x.device.type):
            return True  # autocast casts F.linear's inputs; fg.swiglu would not
        return torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, self.gate_up_weight, self.gate_up_bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] -> [..., hidden]."""
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] != self.hidden:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"GatedMLP: x must be [..., hidden={self.hidden}], got {got}")
        if self._use_torch_ops(x):
            g, u = F.linear(x, self.gate_up_weight, self.gate_up_bias).chunk(2, dim=-1)
            h = _TORCH_ACT[self.activation](g) * u
        else:
            h = swiglu(x, self.gate_up_weight, self.gate_up_bias, activation=self.activation, exact=self.exact)
        return self.down(h)

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden}, intermediate={self.intermediate}, bias={self.gate_up_bias is not None}, "
                f"activation={self.activation!r}, exact={self.exact}")


__all__ = ["GatedMLP", "activation_name"]
