"""gemm_a8's named epilogues as IR expressions.

    <act>(acc * (scalar(alpha) * m_vec(scale_a, 1.0) * n_vec(scale_b, 1.0)) + n_vec(bias, 0.0))

One expression per activation serves the name with and without `bias_`: scales and bias are optional operands
(absent: 1 and 0), so `silu` and `bias_silu` run the same kernel. The scale product is grouped so that
alpha * scale_a is computed once per row and the rest is one multiply and one fused multiply-add per element.
"""
from __future__ import annotations

from . import ir

ACTIVATIONS = ("none", "relu", "silu", "gelu", "gelu_erf")
EPILOGUES = ("none", "bias", "bias_relu", "bias_silu", "bias_gelu", "bias_gelu_erf", "relu", "silu", "gelu",
             "gelu_erf")


def parse_name(name: str) -> tuple[bool, str]:
    """'bias_silu' -> (True, 'silu'); 'gelu' -> (False, 'gelu'); 'bias' -> (True, 'none')."""
    if not isinstance(name, str) or name not in EPILOGUES:
        raise ValueError(f"unknown epilogue {name!r}; expected one of {', '.join(EPILOGUES)} or an epilogue "
                         "expression (fusedgemm.epilogue)")
    if name == "bias":
        return True, "none"
    if name.startswith("bias_"):
        return True, name[len("bias_"):]
    return False, name


def preset_for_activation(act: str) -> ir.Node:
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; expected one of {', '.join(ACTIVATIONS)}")
    scale = ir.scalar("alpha") * ir.m_vec("scale_a", 1.0) * ir.n_vec("scale_b", 1.0)
    y = ir.acc * scale + ir.n_vec("bias", 0.0)
    return y if act == "none" else ir.unary(act, y)


def preset(name: str) -> ir.Node:
    """The expression of a named gemm_a8 epilogue (with or without bias: the same expression)."""
    return preset_for_activation(parse_name(name)[1])
