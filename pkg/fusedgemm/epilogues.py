"""Epilogue names of the 8-bit GEMM: an optional bias followed by one activation."""
from __future__ import annotations

ACTIVATIONS = ("none", "relu", "silu", "gelu", "gelu_erf")
EPILOGUES = ("none", "bias", "bias_relu", "bias_silu", "bias_gelu", "bias_gelu_erf", "relu", "silu", "gelu",
             "gelu_erf")


def parse_epilogue(name: str) -> tuple[bool, str]:
    """'bias_silu' -> (True, 'silu'); 'gelu' -> (False, 'gelu'); 'bias' -> (True, 'none')."""
    if not isinstance(name, str) or name not in EPILOGUES:
        raise ValueError(f"unknown epilogue {name!r}; expected one of {', '.join(EPILOGUES)}")
    if name == "bias":
        return True, "none"
    if name.startswith("bias_"):
        return True, name[len("bias_"):]
    return False, name
