"""The float64 oracle for every test: the semantics of DESIGN.md, computed on the CPU and rounded once."""
from __future__ import annotations

import math

import torch

from .epilogues import parse_epilogue


def activation_f64(y: torch.Tensor, act: str) -> torch.Tensor:
    if act == "none":
        return y
    if act == "relu":
        return torch.where(y < 0, torch.zeros_like(y), y)  # NaN propagates, like torch.relu
    if act == "silu":
        return y * torch.sigmoid(y)
    if act == "gelu":  # tanh approximation
        return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))
    if act == "gelu_erf":
        return 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0)))
    raise ValueError(f"unknown activation {act!r}")


def _scale_f64(scale, length: int) -> torch.Tensor:
    if scale is None:
        return torch.ones(length, dtype=torch.float64)
    if isinstance(scale, (int, float)):
        return torch.full((length,), float(scale), dtype=torch.float64)
    s = scale.detach().cpu().to(torch.float64).reshape(-1)
    return s.expand(length) if s.numel() == 1 else s


def gemm_a8_reference(a: torch.Tensor, b: torch.Tensor, bias=None, *, scale_a=None, scale_b=None,
                      epilogue: str = "none", out_dtype=torch.bfloat16, unrounded: bool = False) -> torch.Tensor:
    """a [M, K] 8-bit, b [N, K] 8-bit in nn.Linear layout (NOT preshuffled). Returns [M, N] out_dtype on the
    CPU (float64 if unrounded)."""
    _uses_bias, act = parse_epilogue(epilogue)
    a64 = a.detach().cpu().to(torch.float32).to(torch.float64)
    b64 = b.detach().cpu().to(torch.float32).to(torch.float64)
    m, n = a64.shape[0], b64.shape[0]
    y = a64 @ b64.T
    y = y * _scale_f64(scale_a, m)[:, None] * _scale_f64(scale_b, n)[None, :]
    if bias is not None:
        y = y + bias.detach().cpu().to(torch.float64)[None, :]
    y = activation_f64(y, act)
    return y if unrounded else y.to(out_dtype)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN if out has NaN where ref has none)."""
    o = out.detach().cpu().to(torch.float64)
    r = ref.detach().cpu().to(torch.float64)
    return (torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r).clamp_min(1e-300)).item()
