"""Drop-in modules: FusedLinear = nn.Linear + an activation (and an optional scale / residual), one kernel.

    lin = fg.nn.FusedLinear.from_linear(torch_linear, activation="gelu")   # same parameters, same state_dict keys
    y = lin(x)                     # act(x @ W.T + b)
    y = lin(x, residual=r)         # act(x @ W.T + b + r)
"""
from __future__ import annotations

import torch

from ..checks import MATMUL_ACTIVATIONS
from ..epilogue.evaluate import _UNARY
from ..epilogue.presets import activation_name
from ..matmul import matmul_fused
from ..runtime.device import emulated_arch


class FusedLinear(torch.nn.Linear):
    """nn.Linear whose forward is one fused kernel: y = act(alpha * x @ W.T + bias + beta * residual).

    Parameters and state_dict keys are nn.Linear's (weight [out, in], bias [out]); `activation` and `alpha` are
    configuration, not state. CPU tensors, and inputs of a dtype the kernels do not take (float64), run the same
    expression as torch ops (nn.Linear's arithmetic, then the epilogue), so a module moved between devices keeps
    working and matches the nn.Linear it replaced bit for bit on the CPU."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 activation: str | None = None, alpha: float = 1.0):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.activation = activation_name("FusedLinear", activation, MATMUL_ACTIVATIONS)
        self.alpha = float(alpha)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, activation: str | None = None, alpha: float = 1.0) -> "FusedLinear":
        """A FusedLinear sharing `linear`'s parameters (no copy)."""
        w = linear.weight
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, device="meta",
                  activation=activation, alpha=alpha)
        mod.weight = w
        mod.bias = linear.bias
        return mod

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None, beta: float = 1.0) -> torch.Tensor:
        """act(alpha * x @ W.T + bias + beta * residual); residual: [..., out] like the output, or None."""
        if (x.is_cuda or emulated_arch() is not None) and x.dtype in (torch.bfloat16, torch.float16, torch.float32):
            return matmul_fused(x, self.weight, self.bias, alpha=self.alpha, c=residual,
                                beta=beta if residual is not None else 0.0, activation=self.activation)
        return self._forward_torch(x, residual, beta)

    def _forward_torch(self, x, residual, beta):
        y = torch.nn.functional.linear(x, self.weight) * self.alpha
        if self.bias is not None:
            y = y + self.bias
        if residual is not None:
            y = y + beta * residual
        return y if self.activation == "none" else _UNARY[self.activation](y)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation!r}, alpha={self.alpha}"
