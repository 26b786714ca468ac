"""The float64 oracle for every test, and the CPU path of the GEMM ops: the semantics of docs/design.md computed
by torch, rounded once.

    gemm_reference(a2, b_nk, expr, operands)   any epilogue expression over a2 @ b_nk.T (matmul_fused / gemm_a8
                                               on CPU tensors; matmul_fused's unfused exact-fp32 path on a GPU)
    gemm_a8_reference(a, b, bias, ...)         a preset epilogue of gemm_a8, b unshuffled (the tests' oracle)
"""
from __future__ import annotations

import math

import torch

from .epilogue.evaluate import evaluate_outputs, round_to
from .epilogue.ir import is_paired as _is_paired
from .epilogue.presets import parse_name as parse_epilogue


def gemm_reference(a2: torch.Tensor, b_nk: torch.Tensor, expr, operands: dict | None = None, *,
                   compute_dtype: torch.dtype = torch.float64, blocks=None):
    """-> (expr over acc = a2 [M, K] @ b_nk [N, K].T, its save(...) output or None), float64 values on a2's
    device. compute_dtype float64: exact products of 8- and 16-bit inputs (fp8 / int8 upcast), fp32 inputs to
    float64 precision; float32: torch's exact-fp32 matmul ('highest') and the epilogue in fp32.
    blocks: gemm_a8's block scales (blockscale.BlockScales): acc is then the block-scaled sum (block_scaled_acc)."""
    if blocks is not None:
        acc = block_scaled_acc(a2, b_nk, blocks.a, blocks.b, compute_dtype=compute_dtype,
                               pairs=_is_paired(expr))
        return evaluate_outputs(expr, acc, operands, compute_dtype=compute_dtype, device=acc.device)
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        acc = a2.to(torch.float32).to(compute_dtype) @ b_nk.to(torch.float32).to(compute_dtype).T
    finally:
        torch.set_float32_matmul_precision(prev)
    return evaluate_outputs(expr, acc, operands, compute_dtype=compute_dtype, device=acc.device)


def write_outputs(values, n_out: int, out: torch.Tensor, saved: torch.Tensor | None) -> None:
    """gemm_reference's (y, saved) into the output tensors, each rounded once to its dtype (fp8 saturating, as
    the kernels store it)."""
    y, pre = values
    out.view(-1, n_out).copy_(round_to(y, out.dtype))
    if saved is not None:
        saved.view(-1, n_out).copy_(round_to(pre, saved.dtype))


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


# ---- block-scaled FP8 (blockscale.py states the modes) ---------------------------------------------------------
_BLOCK = 128


def block_scaled_acc(a2: torch.Tensor, b_nk: torch.Tensor, sa_block, sb_block, *,
                     compute_dtype: torch.dtype = torch.float64, pairs: bool = False) -> torch.Tensor:
    """acc[m, n] = sum_kb sa[m, kb] * sb[n // 128, kb] * sum_{k in block kb} a[m, k] * b[n, k] (K blocks of 128,
    the last one ragged), on a2's device; sa_block [M, KB] / sb_block [NB, KB] float32, or None (1).
    pairs: b is a gate / up interleaved weight (a paired epilogue) and sb_block pair-ordered: column n reads row
    2 (n // 256) + n % 2 (block_scales.hpp scale_b_row)."""
    a = a2.to(torch.float32).to(compute_dtype)
    b = b_nk.to(torch.float32).to(compute_dtype)
    m, k = a.shape
    n = b.shape[0]
    acc = torch.zeros((m, n), dtype=compute_dtype, device=a.device)
    for kb in range(-(-k // _BLOCK)):
        lo, hi = kb * _BLOCK, min(k, (kb + 1) * _BLOCK)
        part = a[:, lo:hi] @ b[:, lo:hi].T
        if sa_block is not None:
            part = part * sa_block[:, kb].to(device=a.device, dtype=compute_dtype)[:, None]
        if sb_block is not None:
            col_scales = sb_block[:, kb].to(device=a.device, dtype=compute_dtype)
            if pairs:
                cols = torch.arange(n, device=a.device)
                sb = col_scales[(cols // (2 * _BLOCK)) * 2 + cols % 2]
            else:
                sb = col_scales.repeat_interleave(_BLOCK)[:n]
            part = part * sb[None, :]
        acc += part
    return acc


def _expand_scale(scale, rows: int, kb: int, block_rows: int, row_block: int) -> torch.Tensor:
    """Any scale argument as a float64 [rows, kb] table: None / a number / one value (constant), a vector [rows]
    ([rows, 1] / [1, rows]; constant along K), or a block table [block_rows, kb] (row r reads block r // row_block)."""
    if scale is None:
        return torch.ones(rows, kb, dtype=torch.float64)
    if isinstance(scale, (int, float)):
        return torch.full((rows, kb), float(scale), dtype=torch.float64)
    s = scale.detach().cpu().to(torch.float64)
    if s.numel() == 1:
        return s.reshape(1, 1).expand(rows, kb)
    if s.dim() == 1 or (s.dim() == 2 and (s.shape[0] == 1 or s.shape[1] == 1) and s.numel() == rows):
        return s.reshape(rows, 1).expand(rows, kb)
    assert tuple(s.shape) == (block_rows, kb), (tuple(s.shape), block_rows, kb)
    return s.repeat_interleave(row_block, dim=0)[:rows]


def gemm_a8_block_reference(a: torch.Tensor, b: torch.Tensor, bias=None, *, scale_a=None, scale_b=None,
                            epilogue: str = "none", out_dtype=torch.bfloat16, unrounded: bool = False):
    """The tests' oracle of block-scaled gemm_a8 (any mix of scale modes), float64, written from the formula
    independently of the CPU path: y = act(sum_kb SA[m, kb] SB[n, kb] (a_kb . b_kb) + bias), SA / SB each scale
    expanded to [M, KB] / [N, KB]. a [M, K], b [N, K] (NOT preshuffled). Returns [M, N] out_dtype on the CPU (float64
    if unrounded)."""
    _uses_bias, act = parse_epilogue(epilogue)
    dev = a.device  # float64 on a's device (a GPU's float64 is fast enough for the large test shapes)
    a64 = a.detach().to(torch.float32).to(torch.float64)
    b64 = b.detach().to(dev).to(torch.float32).to(torch.float64)
    m, k = a64.shape
    n = b64.shape[0]
    kb = -(-k // _BLOCK)
    sa = _expand_scale(scale_a, m, kb, m, 1).to(dev)
    sb = _expand_scale(scale_b, n, kb, -(-n // _BLOCK), _BLOCK).to(dev)
    y = torch.zeros((m, n), dtype=torch.float64, device=dev)
    for j in range(kb):  # block j: K values 128 j .. min(K, 128 (j + 1)) - 1
        cols = slice(j * _BLOCK, min(k, (j + 1) * _BLOCK))
        y += (a64[:, cols] @ b64[:, cols].T) * sa[:, j, None] * sb[None, :, j]
    if bias is not None:
        y = y + bias.detach().to(dev).to(torch.float64)[None, :]
    y = activation_f64(y, act).cpu()
    return y if unrounded else y.to(out_dtype)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN if out has NaN where ref has none)."""
    o = out.detach().cpu().to(torch.float64)
    r = ref.detach().cpu().to(torch.float64)
    return (torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r).clamp_min(1e-300)).item()


# ---- quantize_rows: dynamic per-row 8-bit quantization (pkg/fusedgemm/quant.py states the rule) ---------------
_QMAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0, torch.int8: 127.0}


def _fl32(v: torch.Tensor) -> torch.Tensor:
    """Round float64 values to fp32 (nearest even) and back: an fp32 operation's result, computed in float64.
    Exact for one +, *, / of fp32 operands: the float64 product is exact, and a float64 quotient rounded to
    fp32 equals the correctly rounded fp32 quotient (53 >= 2 * 24 + 2 bits)."""
    return v.to(torch.float32).to(torch.float64)


def fp8_round_reference(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 values -> fp8 codes (uint8) by nearest-value search over the format's finite values, ties to
    the even code, saturating at the largest finite value; NaN -> the NaN code (0x7f e4m3fn, 0x80 e4m3fnuz).
    Negative zero keeps its sign in e4m3fn (code 0x80); e4m3fnuz has none (code 0). Independent of torch's
    own fp8 cast, which the CPU path uses."""
    all_codes = torch.arange(256, dtype=torch.int64)
    values = all_codes.to(torch.uint8).view(dtype).to(torch.float64)
    pos = (all_codes < 0x80) & torch.isfinite(values)  # the non-negative finite codes, ascending in value
    pos_codes, pos_values = all_codes[pos], values[pos]
    mag = t.abs().clamp(max=pos_values[-1].item()).contiguous()
    hi = torch.searchsorted(pos_values, torch.nan_to_num(mag), right=False).clamp(max=len(pos_values) - 1)
    lo = (hi - 1).clamp(min=0)
    d_lo, d_hi = mag - pos_values[lo], pos_values[hi] - mag
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (pos_codes[hi] % 2 == 0))
    code = torch.where(take_hi, pos_codes[hi], pos_codes[lo])
    negative = torch.signbit(t)
    if dtype == torch.float8_e4m3fn:
        code = torch.where(negative, code | 0x80, code)
        nan_code = 0x7F
    else:
        code = torch.where(negative & (code != 0), code | 0x80, code)
        nan_code = 0x80
    code = torch.where(torch.isnan(t), torch.full_like(code, nan_code), code)
    return code.to(torch.uint8)


def quantize_rows_reference(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle of fusedgemm.quantize_rows: x [..., K] -> (codes [M, K] as `dtype`, scale [M] float32), on
    the CPU, each fp32 operation of the rule computed in float64 and rounded to fp32 once (_fl32):

        absmax = max |x| (NaN propagates); scale = fl32(absmax / qmax), 1 if absmax == 0, at least 2^-126
        codes  = round(fl32(x * fl32(1 / scale)))   nearest even, saturating at +-qmax; int8: NaN -> 0"""
    qmax = _QMAX[dtype]
    k = x.shape[-1]
    x64 = x.detach().cpu().to(torch.float64).reshape(-1, k)
    m = x64.shape[0]
    if k == 0:
        return torch.empty((m, 0), dtype=dtype), torch.ones(m, dtype=torch.float32)
    absmax = x64.abs().amax(dim=1)
    scale = _fl32(absmax / qmax)
    scale = torch.where(scale < 2.0 ** -126, torch.full_like(scale, 2.0 ** -126), scale)
    scale = torch.where(absmax == 0, torch.ones_like(scale), scale)
    inv = _fl32(1.0 / scale)
    t = _fl32(x64 * inv[:, None])
    if dtype == torch.int8:
        codes = torch.where(torch.isnan(t), torch.zeros_like(t), t.clamp(-qmax, qmax)).round().to(torch.int8)
    else:
        codes = fp8_round_reference(t, dtype).view(dtype)
    return codes, scale.to(torch.float32)
