"""Grouped GEMMs (mixture-of-experts layers): G groups of rows of x, each times its own expert's weight, one kernel
with the epilogue fused.

    y = fg.grouped_matmul(x, w, offs=offs, bias=b, activation="silu")        # x [M, K], w [G, N, K] bf16 / fp16
    h = fg.grouped_swiglu(x, w_gate_up, offs=offs)                            # w_gate_up [G, 2I, K] -> [M, I]
    y = fg.grouped_gemm_a8(x8, fg.preshuffle(w8), scale_a=sa, scale_b=sb, offs=offs, epilogue="silu")
    y = fg.grouped_matmul(h, w_down, offs=offs, epilogue="acc * m_vec(rw)", operands={"rw": routing_weight})

Layouts: contiguous -- x [M, K] with its rows grouped by expert, offs int32 [G] the groups' cumulative row ends
(offs[-1] = M, torch._grouped_mm's convention); masked (decode under CUDA graphs) -- x [G, Mmax, K], masked_m int32
[G] the rows each group uses (rows past it are neither read into an output nor written); m_indices (DeepGEMM's
contiguous layout) -- x [M, K], m_indices int32 [M] each row's expert or -1, experts' rows starting at multiples of
128 (-1 padding rows are not written).
Group sizes stay on the device: no host sync, graph-capturable, and M is never part of a kernel's compile key. The
checks that need the sizes' values (offs non-decreasing and ending at M, 0 <= masked_m <= Mmax) sync, so they run
on CPU tensors always and on the GPU only with FUSEDGEMM_CHECK_GROUPS=1; the kernels clamp malformed sizes so that
nothing outside the tensors is ever touched.

Epilogue operands of a grouped call: n_vec operands (bias, per-channel scales) are per expert, [G, N] (an [N] one
is shared by every expert and expanded per call); m_vec ones are per row of x ([M]; masked: [G, Mmax]); aux ones
[M, N] ([G, Mmax, N]). API (this file) -> checks (here) -> plan (plan/grouped_call.py) -> the grouped kernels of
the GEMM templates (gemm_groups.hpp; generated units) -> launch. CPU tensors: the same checks, then a float64 torch
reference per group (no kernel runs).
"""
from __future__ import annotations

import dataclasses

import torch

from . import epilogue as _epi
from .checks import arch_of, keyword_form, out_dtype_of, FP8_DTYPE_FOR_ARCH, OUT_DTYPES
from .epilogue.bind import bind as _bind_epilogue
from .epilogue.evaluate import evaluate_outputs, round_to
from .epilogue.presets import activation_name, resolve as resolve_epilogue
from . import grouped_checks as _checks
from . import blockscale as _blockscale
from . import pending as _pending
from . import out_groups as _out_groups
from .grouped_checks import GroupLayout, check_weight, flat_operands, group_layout, group_operands, x_tensor
from .preshuffle import PreshuffledWeight, preshuffle, unshuffle
from .quant import quantize_rows
from .runtime.device import device_guard
from .swiglu import ACTIVATIONS as GLU_ACTIVATIONS, glu_expression
from .plan import forced as _forced_plan
from .plan.call import signature as _sig
from .runtime.device import current_device_index
from .util import PlanCache, cached_on, join_operands, split_operands, warn_once

_EIGHT_BIT = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8)
_WIDE = (torch.bfloat16, torch.float16)
# The eager fast path: a repeat of a checked call signature (every tensor's dtype, shape, strides and device, the
# scalars' values, the options) re-checks addresses and the current device, then launches; a decode-size MoE layer
# is a few microseconds of GPU time per grouped GEMM, so the checks' and the plan's host time would dominate it.
_PLANS = PlanCache(256)


def _meta(v):
    """What a fast-path key records of an argument: a tensor's signature, a weight's stored tensor's, else the
    value with its type (True == 1)."""
    if isinstance(v, torch.Tensor):
        return _sig(v)
    if isinstance(v, PreshuffledWeight):
        return ("preshuffled", _sig(v.data), tuple(v.shape), v.layout)
    if isinstance(v, dict):
        return tuple((name, _meta(t)) for name, t in v.items())
    return (v.__class__, v)


def _fast_key(op: str, *args):
    """The key of a call (None when something in it is unhashable: the checked path says what is wrong)."""
    if _checks.CHECK_GROUPS or _forced_plan() is not None:
        return None
    try:
        key = (op, *(_meta(a) for a in args))
        hash(key)
        return key
    except TypeError:
        return None


class _FastPlan:
    """A checked call's launch: the plan, the output's shape and dtype, and where each per-call address comes from
    (the call's own tensors by name, in the order the plan takes them)."""

    __slots__ = ("plan", "shape", "dtype", "sources", "aligns")

    def __init__(self, plan, shape, dtype, sources, aligns):
        self.plan, self.shape, self.dtype, self.sources, self.aligns = plan, shape, dtype, sources, aligns

    def launch(self, x: torch.Tensor, w_data: torch.Tensor, index: torch.Tensor, named: dict, out):
        """-> out, or None where an address or the device does not suit the plan (the checked path then)."""
        plan = self.plan
        x_ptr, w_ptr = x.data_ptr(), w_data.data_ptr()
        if x_ptr & 15 or w_ptr & 15 or current_device_index() != plan.dev:
            return None
        if out is None:
            out = torch.empty(self.shape, dtype=self.dtype, device=x.device)
        elif out.data_ptr() & 3:
            return None
        ptrs = [named[name].data_ptr() for name in self.sources]
        if any(p % a for p, a in zip(ptrs, self.aligns)):  # (a view at another offset: the checked path says so)
            return None
        plan.run(x_ptr, w_ptr, index.data_ptr(), out.data_ptr(), *ptrs)
        return out


# ---- the shared core -----------------------------------------------------------------------------------------
def _run(op: str, x: torch.Tensor, w_kernel: torch.Tensor, w_ref, n: int, k: int, in_kind: str, expr, operands,
         layout: GroupLayout, out_dtype, out, key=None, blocks=None, group=None):
    """x [m, K] view, w_kernel the stacked weight as the kernel reads it ([G, N, K], preshuffled for 8-bit), w_ref
    a callable g -> expert g's [N, K] weight (the reference's); blocks: (scale_a [m, KB] or None, scale_b
    [G, NB, KB] or None) block scales (8-bit); group: out_group (128) or None. Returns out (or (out, saved); with
    group: (codes, scales))."""
    paired = _epi.is_paired(expr)
    n_out = n // 2 if paired else n
    flat = flat_operands(op, expr, operands, layout, n_out)
    device = x.device
    arch = arch_of(op, device, None)
    binding = _bind_epilogue(expr, flat, layout.m, n_out, device, op=op, n_len=layout.groups * n_out)
    if group is not None:
        return _run_out_group(op, arch, x, w_kernel, w_ref, n, k, in_kind, expr, flat, binding, layout, n_out,
                              out_dtype, out, blocks, group)
    if out is None:
        out = torch.empty((*layout.lead, n_out), dtype=out_dtype, device=device)
    elif tuple(out.shape) != (*layout.lead, n_out) or not out.is_contiguous() or out.device != device:
        raise ValueError(f"{op}: out must be a contiguous {[*layout.lead, n_out]} tensor on {device}, got "
                         f"{list(out.shape)} on {out.device}")
    saved = None if binding.saved_dtype is None else torch.empty_like(out, dtype=binding.saved_dtype)
    x2 = x.reshape(layout.m, k)
    if layout.m and n_out:
        if arch == "cpu":
            _reference_into(x2, w_ref, expr, flat, layout, n_out, out, saved, blocks)
        else:
            plan, x_launched, pointers, aligns = _launch(op, arch, x2, w_kernel, n, k, in_kind, binding, flat, expr,
                                                         layout, n_out, out, saved, blocks)
            if blocks is None:  # (block scales' addresses are in the packed values: no fast path for them yet)
                _remember(key, plan, pointers, aligns, x_launched is x2, flat, operands, tuple(out.shape), out_dtype,
                          saved)
    return out if saved is None else (out, saved)


def _reference_into(x2, w_ref, expr, flat, layout, n_out, out, saved, blocks=None) -> None:
    """Each group: its rows times its weight in float64 (block-scaled: reference.block_scaled_acc), the epilogue on
    them, rounded once into out."""
    from .reference import block_scaled_acc

    o2, s2 = out.view(layout.m, n_out), None if saved is None else saved.view(layout.m, n_out)
    for g, rows in _group_rows(layout, x2.device):
        if blocks is None:
            acc = x2[rows].to(torch.float64) @ w_ref(g).to(torch.float64).T
        else:
            sa, sb = blocks
            acc = block_scaled_acc(x2[rows], w_ref(g), None if sa is None else sa[rows], None if sb is None else sb[g],
                                   pairs=_epi.is_paired(expr))
        y, pre = evaluate_outputs(expr, acc, group_operands(expr, flat, g, rows, n_out))
        o2[rows] = round_to(y, out.dtype).to(out.dtype)
        if s2 is not None:
            s2[rows] = round_to(pre, saved.dtype).to(saved.dtype)


def _group_rows(layout, device):
    """(g, rows of x) of every group that has rows: a slice (contiguous layouts) or an index tensor (m_indices)."""
    for g, span in enumerate(layout.spans()):
        if (span.numel() if isinstance(span, torch.Tensor) else span[1] - span[0]) > 0:
            yield g, (span.to(device) if isinstance(span, torch.Tensor) else slice(*span))


def _run_out_group(op, arch, x, w_kernel, w_ref, n, k, in_kind, expr, flat, binding, layout, n_out, out_dtype, out,
                   blocks, group):
    """out_group=128 (out_groups.py): -> (codes [*lead, N'], scales [*lead, ceil(N' / 128)]); rows no group owns
    (masked rows past masked_m, -1 rows of m_indices) are not written, as for a plain output."""
    code_dtype = _out_groups.check_out_group(group, out_dtype, out, arch, op)
    if binding.saved_dtype is not None:
        raise ValueError(f"{op}: out_group takes an epilogue without save(...), got {expr}")
    n_groups = -(-n_out // group)
    codes = torch.empty((*layout.lead, n_out), dtype=code_dtype, device=x.device)
    scales = torch.empty((*layout.lead, n_groups), dtype=torch.float32, device=x.device)
    x2 = x.reshape(layout.m, k)
    if not (layout.m and n_out):
        return codes, scales
    if arch == "cpu":  # the reference's values rounded to fp32 (what the kernel holds), then each group's rule
        y32 = torch.zeros((layout.m, n_out), dtype=torch.float32)
        _reference_into(x2, w_ref, expr, flat, layout, n_out, y32, None, blocks)
        qc, qs = quantize_rows(y32, code_dtype, group=group)
        c2, s2 = codes.view(layout.m, n_out), scales.view(layout.m, n_groups)
        for _g, rows in _group_rows(layout, x2.device):
            c2[rows], s2[rows] = qc[rows], qs[rows]
        return codes, scales
    if _out_groups.two_kernels(arch, n_out != n):  # the GEMM to fp32, then quantize_rows (out_groups.py says when)
        y32 = torch.empty((layout.m, n_out), dtype=torch.float32, device=x.device)
        _launch(op, arch, x2, w_kernel, n, k, in_kind, binding, flat, expr, layout, n_out, y32, None, blocks)
        qc, qs = quantize_rows(y32, code_dtype, group=group)  # (rows no group owns: codes of unwritten values)
        return qc.view(codes.shape), qs.view(scales.shape)
    _launch(op, arch, x2, w_kernel, n, k, in_kind, binding, flat, expr, layout, n_out, codes, None, blocks,
            (scales, group))
    return codes, scales


def _remember(key, plan, pointers, aligns, x_in_place: bool, flat: dict, operands: dict, shape, dtype,
              saved) -> None:
    """Record the fast path's entry where every tensor the kernel read is the call's own (no copy made)."""
    if key is None or saved is not None or not x_in_place:
        return
    sources = []
    for field in pointers[1:]:  # after out: the tensor operands, in the order of `flat`
        name = next(n for n, v in flat.items() if isinstance(v, torch.Tensor) and field in (f"op_{n}", f"op_{n}_ptr"))
        if not isinstance(operands.get(name), torch.Tensor) or operands[name].data_ptr() != flat[name].data_ptr():
            return  # an expanded or reshaped copy: the fast path would pass the call's own tensor
        sources.append(name)
    _PLANS.remember(key, _FastPlan(plan, shape, dtype, tuple(sources), tuple(aligns)))


def _launch(op, arch, x2, w_kernel, n, k, in_kind, binding, flat, expr, layout, n_out, out, saved, blocks=None,
            scales_group=None):
    """scales_group: (scales, out_group) of a group-quantised output (out holds its codes), or None."""
    from .plan.call import expression_pointers
    from .plan.grouped_call import GroupedCallPlan

    if x2.data_ptr() % 16 or (x2.shape[0] > 1 and x2.stride(0) != k) or x2.stride(-1) != 1:
        warn_once(f"{op}-copy-x", f"{op}: x is copied to a contiguous tensor first (the kernels read dense rows of "
                                  "16-byte vectors)")
        x2 = x2.contiguous()
    pointers, aligns = expression_pointers(expr, flat, saved is not None)
    tensors = [out] if saved is None else [out, saved]
    spec, config, values = binding.spec, None, binding.values
    if scales_group is not None:
        scales, group = scales_group
        config = _out_groups.group_config(n_out != n, arch, block_scaled=blocks is not None)
        spec = dataclasses.replace(spec, out_group=group)
        pointers, tensors = (pointers[0], "out_scale", *pointers[1:]), [out, scales]
        values = dict(values, ld_scale=scales.shape[-1])
    with device_guard(x2.device):
        if blocks is not None:  # (sa [M, KB] or None, sb [G, NB, KB] or None): the kernels' block-scale fields
            values = _blockscale.block_values(values, _blockscale.BlockScales(*blocks, -(-k // _blockscale.BLOCK)))
        plan = GroupedCallPlan(x2.device.index, arch, in_kind, layout, n, k, out.dtype, spec, values,
                               pointers, n_out, op, block_scaled=blocks is not None, config=config)
        plan.run(x2.data_ptr(), w_kernel.data_ptr(), layout.index.data_ptr(), *(t.data_ptr() for t in tensors),
                 *(binding.values[f] for f in pointers[len(tensors):]))
    return plan, x2, pointers, aligns


def _expression(op: str, activation, epilogue, bias, operands):
    """(expr, operands) of the keyword form (act(acc + bias)) or an expression (text or node) with its operands."""
    act, expr = keyword_form(op, activation, epilogue, bias)
    if expr is not None:
        if bias is not None:
            raise ValueError(f"{op}: with an epilogue expression, pass the bias as one of its operands")
        return expr, dict(operands or {})
    if operands:
        raise ValueError(f"{op}: operands are for epilogue expressions")
    y = _epi.acc if bias is None else _epi.acc + _epi.n_vec("bias")
    return (y if act == "none" else _epi.unary(act, y)), ({} if bias is None else {"bias": bias})


# ---- the public ops -------------------------------------------------------------------------------------------
def grouped_matmul(x: torch.Tensor, w: torch.Tensor, *, offs=None, masked_m=None, m_indices=None,
                   expected_m: int | None = None, bias=None, activation=None, epilogue=None,
                   operands: dict | None = None, out_dtype=None, out=None):
    """y[rows of group g] = act(x[rows] @ w[g].T + bias[g]) -- or any epilogue expression -- for every group, one
    kernel. x: [M, K] with offs (int32 [G] cumulative row ends), [G, Mmax, K] with masked_m (int32 [G]), or [M, K]
    with m_indices (int32 [M]: DeepGEMM's layout, each row's expert or -1, experts' rows starting at multiples of
    128, M too; -1 rows are not written); bf16 / fp16. w: [G, N, K] of x's dtype; N % 8 == 0 and K % 8 == 0.
    bias: [G, N] (or [N], every expert's). expected_m: rows per group, a plan hint (default M / G, or Mmax).
    out_dtype: bf16 / fp16 / fp32 / the arch's fp8, default x's dtype. Returns [M, N] (masked: [G, Mmax, N]; rows
    past masked_m[g] are not written)."""
    op = "grouped_matmul"
    if torch.compiler.is_compiling():
        expr, ops = _expression(op, activation, epilogue, bias, operands)
        return _via_op("matmul", x, w, w.shape[-2], w.shape[-1], (offs, masked_m, m_indices), expected_m, expr, ops,
                       out_dtype, out)
    key = _fast_key(op, x, w, offs, masked_m, m_indices, expected_m, bias, activation, epilogue, operands, out_dtype,
                    out)
    hit = _PLANS.get(key) if key is not None else None
    if hit is not None and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)):
        y = hit.launch(x, w, _index(offs, masked_m, m_indices), operands if operands is not None else
                       {"bias": bias}, out)
        if y is not None:
            return y
    x = x_tensor(op, x)
    if x.dtype not in (*_WIDE, torch.float32):
        raise TypeError(f"{op}: x must be bfloat16, float16 or float32 (TF32 products; 8-bit x: grouped_gemm_a8), got "
                        f"{x.dtype}")
    k = x.shape[-1]
    groups, n = check_weight(op, w, x.dtype, k)
    if torch.is_grad_enabled() and w.requires_grad:
        raise NotImplementedError(f"{op} is not differentiable yet: call it under torch.no_grad() / inference_mode()")
    layout = group_layout(op, x, offs, masked_m, expected_m, groups, m_indices)
    if n % 8 or (k * x.element_size()) % 16:
        raise ValueError(f"{op}: the grouped kernels need N % 8 == 0 and rows of K that are 16-byte multiples, got "
                         f"N={n}, K={k} ({x.dtype})")
    expr, ops = _expression(op, activation, epilogue, bias, operands)
    out_dtype = out_dtype_of(op, out, out_dtype, (*OUT_DTYPES,), x.dtype)
    wk = w if w.is_contiguous() else w.contiguous()
    return _run(op, x, wk, lambda g: w[g], n, k, {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(x.dtype, "tf32"),
                expr, ops, layout, out_dtype, out, key=key if wk is w else None)


def grouped_gemm_a8(x: torch.Tensor, w: PreshuffledWeight, *, scale_a=None, scale_b=None, bias=None, offs=None,
                    masked_m=None, m_indices=None, expected_m: int | None = None, epilogue=None,
                    operands: dict | None = None, out_dtype=None, out=None, out_group: int | None = None):
    """8-bit grouped GEMM: y[rows of group g] = act(x[rows] @ w[g].T * scale_a[row] * scale_b[g] + bias[g]).
    x: fp8 (the arch's variant) / int8, [M, K] with offs or [G, Mmax, K] with masked_m. w: fusedgemm.preshuffle of
    the experts' [G, N, K] weights; N % 16 == 0, K % 16 == 0. scale_a: None, a number, or float32 [M] (per row;
    masked: [G, Mmax]); scale_b: None, a number, float32 [G] (per expert) or [G, N] (per channel). epilogue: None,
    a preset name ('silu', 'bias_gelu', ...) or an expression (its operands by name; then no scale / bias args).
    out_dtype: default bfloat16. out_group=128: the output as the next layer's 1x128 block-quantised input, returns
    (codes [M, N] the arch's fp8, scales [M, ceil(N / 128)] fp32) -- gemm_a8's out_group (gfx942 / gfx950, sm_90a,
    CPU)."""
    op = "grouped_gemm_a8"
    if out_group is not None and torch.compiler.is_compiling():
        raise NotImplementedError(f"{op}: out_group is not traced by torch.compile yet; call it outside the compiled "
                                  "region (torch.compiler.disable)")
    if torch.compiler.is_compiling():
        if not isinstance(w, PreshuffledWeight) or w.groups is None:
            raise TypeError(f"{op}: w must be fusedgemm.preshuffle(w8) of the experts' [G, N, K] weights")
        form = resolve_epilogue(op, epilogue)
        if isinstance(form, _epi.Node):
            expr, ops = form, dict(operands or {})
        else:
            expr, ops = _scaled_expression(op, form[1], scale_a, scale_b, bias, w.shape[0], w.shape[1])
        return _via_op("a8", x, w.data, w.shape[1], w.shape[2], (offs, masked_m, m_indices), expected_m, expr, ops,
                       out_dtype or torch.bfloat16, out)
    key = None if out_group is not None else _fast_key(op, x, w, offs, masked_m, m_indices, expected_m, scale_a,
                                                       scale_b, bias, epilogue, operands, out_dtype, out)
    hit = _PLANS.get(key) if key is not None else None
    if hit is not None:
        y = hit.launch(x, w.data, _index(offs, masked_m, m_indices), operands if operands is not None else
                       {"scale_a": scale_a, "scale_b": scale_b, "bias": bias}, out)
        if y is not None:
            return y
    x = x_tensor(op, x)
    if not isinstance(w, PreshuffledWeight) or w.groups is None:
        raise TypeError(f"{op}: w must be fusedgemm.preshuffle(w8) of the experts' [G, N, K] weights, got "
                        f"{type(w).__name__}{'' if not isinstance(w, PreshuffledWeight) else ' of one [N, K] weight'}")
    if x.dtype not in _EIGHT_BIT:
        raise TypeError(f"{op}: x must be fp8 or int8 (16-bit x: grouped_matmul), got {x.dtype}")
    if w.dtype != x.dtype:
        raise TypeError(f"{op}: w was preshuffled as {w.dtype} but x is {x.dtype}; they must match")
    groups, n, kw = w.shape
    k = x.shape[-1]
    if kw != k:
        raise ValueError(f"{op}: x has K={k} but w is [G={groups}, N={n}, K={kw}]; K must agree")
    if n % 16 or k % 16:
        raise ValueError(f"{op}: the grouped 8-bit kernels need N % 16 == 0 and K % 16 == 0, got N={n}, K={k}")
    layout = group_layout(op, x, offs, masked_m, expected_m, groups, m_indices)
    blocks, scale_a, scale_b = _block_scales(op, x, scale_a, scale_b, layout, groups, n, k)
    form = resolve_epilogue(op, epilogue)
    if isinstance(form, _epi.Node):
        if any(v is not None for v in (scale_a, scale_b, bias)):  # (block scales are the main loop's: taken)
            raise ValueError(f"{op}: with an epilogue expression, pass scales (but block scales) and bias as its "
                             "operands (by name)")
        expr, ops = form, dict(operands or {})
        if blocks is not None and blocks[1] is not None and _epi.is_paired(expr) and n % 256:
            raise ValueError(f"{op}: the block scale_b of a gate / up pair is pair-ordered per 128 gate / up rows "
                             f"(block_scales.hpp): N (interleaved) must be a multiple of 256, got N={n}")
    else:
        if operands:
            raise ValueError(f"{op}: operands are for epilogue expressions")
        uses_bias, act = form
        if uses_bias != (bias is not None):
            why = ("adds a bias, but bias is None" if uses_bias
                   else "has no bias, but a bias was given (use bias_<activation>)")
            raise ValueError(f"{op}: epilogue {epilogue!r} {why}")
        expr, ops = _scaled_expression(op, act, scale_a, scale_b, bias, groups, n)
    arch = arch_of(op, x.device, None)
    if arch == "sm_90a" and blocks is not None:
        _pending.refuse(op, "sm90_grouped_block_scales", "a grouped GEMM with block scales")
    if x.dtype != torch.int8 and arch != "cpu" and x.dtype != FP8_DTYPE_FOR_ARCH[arch]:
        raise TypeError(f"{op}: {arch} needs fp8 as {FP8_DTYPE_FOR_ARCH[arch]}, got {x.dtype}")
    if out_group is None:
        out_dtype = out_dtype_of(op, out, out_dtype, OUT_DTYPES, torch.bfloat16)
    return _run(op, x, w.data, lambda g: unshuffle_group(w, g).to(torch.float32), n, k,
                "int8" if x.dtype == torch.int8 else "fp8", expr, ops, layout, out_dtype, out, key=key, blocks=blocks,
                group=out_group)


def _block_scales(op, x, scale_a, scale_b, layout, groups: int, n: int, k: int):
    """-> (blocks or None, scale_a, scale_b): DeepSeek-style block scales apart -- scale_a [M, ceil(K/128)] (1 x 128
    per row; masked: [G, Mmax, ceil(K/128)]), scale_b [G, ceil(N/128), ceil(K/128)] (128 x 128 per expert) -- and the
    scales left for the epilogue (None where a side is blocks). [M, 1] (K <= 128) stays the per-row scale."""
    kb, nb = -(-k // 128), -(-n // 128)
    sa_block = isinstance(scale_a, torch.Tensor) and kb > 1 and tuple(scale_a.shape) in ((layout.m, kb),
                                                                                         (*layout.lead, kb))
    sb_block = isinstance(scale_b, torch.Tensor) and scale_b.dim() == 3 and tuple(scale_b.shape) == (groups, nb, kb)
    if not (sa_block or sb_block):
        return None, scale_a, scale_b
    if x.dtype == torch.int8:
        raise TypeError(f"{op}: block scales are for fp8 inputs; int8 takes per-row / per-expert scales")
    out = []
    for name, t, is_block in (("scale_a", scale_a, sa_block), ("scale_b", scale_b, sb_block)):
        if not is_block:
            out.append(None)
            continue
        if t.dtype != torch.float32 or not t.is_contiguous() or t.device != x.device:
            raise ValueError(f"{op}: {name} (block scales) must be contiguous float32 on x's device, got {t.dtype}, "
                             f"strides {tuple(t.stride())}, {t.device}")
        out.append(t.reshape(layout.m, kb) if name == "scale_a" else t)
    return (out[0], out[1]), (None if sa_block else scale_a), (None if sb_block else scale_b)


def unshuffle_group(w: PreshuffledWeight, g: int) -> torch.Tensor:
    """Expert g's [N, K] weight of a grouped PreshuffledWeight, unshuffled."""
    n, k = w.shape[-2:]
    return unshuffle(PreshuffledWeight(w.data[g], w.layout, n, k))


def _scaled_expression(op, act, scale_a, scale_b, bias, groups, n):
    """act(acc * alpha * scale_a[m] * scale_b[n] + bias[n]) and its operands, per-expert scales as [G, N]."""
    ops, alpha = {}, 1.0
    y = _epi.acc
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s is None:
            continue
        if not isinstance(s, torch.Tensor):
            if isinstance(s, bool) or not isinstance(s, (int, float)):
                raise TypeError(f"{op}: {name} must be a float32 tensor, a number or None, got {type(s).__name__}")
            alpha *= float(s)
            continue
        if s.dtype != torch.float32:
            raise TypeError(f"{op}: {name} must be float32, got {s.dtype}")
        if name == "scale_b" and s.numel() != 1 and tuple(s.shape) in ((groups,), (groups, 1)):
            s = s.reshape(groups, 1).expand(groups, n)  # one scale per expert
        ops[name] = s
        y = y * (_epi.m_vec(name) if name == "scale_a" else _epi.n_vec(name))
    if alpha != 1.0:
        ops["alpha"] = alpha
        y = y * _epi.scalar("alpha")
    if bias is not None:
        ops["bias"] = bias
        y = y + _epi.n_vec("bias")
    return (y if act == "none" else _epi.unary(act, y)), ops


def grouped_swiglu(x: torch.Tensor, w_gate_up, *, offs=None, masked_m=None, m_indices=None,
                   expected_m: int | None = None, activation: str = "silu", bias=None, scale_a=None, scale_b=None,
                   out_dtype=None, out=None, out_group: int | None = None):
    """h[rows of group g] = act(x @ Wg[g].T + bg[g]) * (x @ Wu[g].T + bu[g]): the experts' gate and up projections
    as one grouped GEMM with the product fused. w_gate_up: [G, 2I, K], each expert's gate rows then up rows
    (torch.cat([gate, up]) per expert; interleaved once and cached on the tensor); 8-bit x (fp8 / int8): an 8-bit
    [G, 2I, K] tensor (interleaved and preshuffled once, cached), scale_a [M] / one value, scale_b [G] / [G, 2I]
    (merged order) / one value. bias: [G, 2I] merged order. Returns [M, I] (masked: [G, Mmax, I]). out_group=128
    (8-bit x): the next layer's 1x128 block-quantised input, (codes [M, I] the arch's fp8, scales [M, ceil(I / 128)]
    fp32), as grouped_gemm_a8's."""
    op = "grouped_swiglu"
    x = x_tensor(op, x)
    act = activation_name(op, activation, GLU_ACTIVATIONS)
    if not isinstance(w_gate_up, torch.Tensor) or w_gate_up.dim() != 3 or w_gate_up.shape[1] % 2:
        raise ValueError(f"{op}: w_gate_up must be [G, 2I, K] (each expert's gate rows, then up rows), got "
                         + (f"{list(w_gate_up.shape)}" if isinstance(w_gate_up, torch.Tensor)
                            else type(w_gate_up).__name__))
    groups, n2, _k = w_gate_up.shape
    eight_bit = x.dtype in _EIGHT_BIT
    block_a = block_b = None  # DeepSeek-style block scales: the main loop's (8-bit x)
    if eight_bit:
        block_a, block_b = _checks.swiglu_block_scales(op, x, scale_a, scale_b, groups, n2, _k)
        scale_a = None if block_a is not None else scale_a
        scale_b = None if block_b is not None else scale_b
    ops = {}
    for name, v in (("bias", bias), ("scale", scale_b)):
        if isinstance(v, torch.Tensor) and v.numel() != 1:
            if name == "scale" and tuple(v.shape) in ((groups,), (groups, 1)):
                v = v.reshape(groups, 1).expand(groups, n2)
            if tuple(v.shape) != (groups, n2):
                raise ValueError(f"{op}: {'bias' if name == 'bias' else 'scale_b'} must be [G={groups}, 2I={n2}] "
                                 f"(merged order: gate half, then up half), got {list(v.shape)}")
            ops[f"{name}_gate"], ops[f"{name}_up"] = v[:, :n2 // 2], v[:, n2 // 2:]
    if not eight_bit:
        if scale_a is not None or scale_b is not None:
            raise ValueError(f"{op}: scale_a / scale_b are for 8-bit x, got them with {x.dtype} x")
        if out_group is not None:
            raise ValueError(f"{op}: out_group runs on the 8-bit kernels (fp8 / int8 x), got {x.dtype} x")
        expr = glu_expression(act, bias=bias is not None)
        if torch.compiler.is_compiling():  # the merged weight into the op: interleaved (and cached) inside it
            return _via_op("swiglu", x, w_gate_up, n2, w_gate_up.shape[2], (offs, masked_m, m_indices), expected_m,
                           expr, ops, out_dtype, out)
        return grouped_matmul(x, _cached_interleaved_groups(w_gate_up), offs=offs, masked_m=masked_m,
                              m_indices=m_indices,
                              expected_m=expected_m, epilogue=expr, operands=ops, out_dtype=out_dtype, out=out)
    alpha = 1.0
    for s in (scale_a, scale_b):
        if isinstance(s, (int, float)) and not isinstance(s, bool):
            alpha *= float(s)
        elif isinstance(s, torch.Tensor) and s.numel() == 1 and s is scale_b:
            ops["scale_gate"] = ops["scale_up"] = s.reshape(1)
    ops["alpha"] = alpha
    if isinstance(scale_a, torch.Tensor):
        ops["scale_a"] = scale_a
    expr = glu_expression(act, bias=bias is not None, scaled=True)
    if torch.compiler.is_compiling() and (block_a is not None or block_b is not None):
        raise NotImplementedError(f"{op}: block scales are not traced by torch.compile yet")
    if torch.compiler.is_compiling():
        return _via_op("swiglu_a8", x, w_gate_up, n2, w_gate_up.shape[2], (offs, masked_m, m_indices), expected_m,
                       expr, ops, out_dtype or torch.bfloat16, out)
    return grouped_gemm_a8(x, _cached_interleaved_groups(w_gate_up, shuffle=True), offs=offs, masked_m=masked_m,
                           m_indices=m_indices, expected_m=expected_m, scale_a=block_a, scale_b=block_b, epilogue=expr,
                           operands=ops, out_dtype=out_dtype, out=out, out_group=out_group)


def interleave_groups(w: torch.Tensor) -> torch.Tensor:
    """[G, 2I, K] merged (gate rows, then up rows) -> [G, 2I, K] interleaved (row 2j gate j, 2j + 1 up j)."""
    g, n2, k = w.shape
    return torch.stack((w[:, :n2 // 2], w[:, n2 // 2:]), dim=2).reshape(g, n2, k)


def _cached_interleaved_groups(w: torch.Tensor, shuffle: bool = False):
    make = (lambda: preshuffle(interleave_groups(w.detach()))) if shuffle else (lambda: interleave_groups(w.detach()))
    if w.is_inference():
        return make()
    key = (w.data_ptr(), tuple(w.shape), w.stride(), w.dtype, w.device, w._version, shuffle)
    return cached_on(w, "_fusedgemm_grouped_gate_up", key, make)


# ---- torch.compile: one op for the grouped GEMMs ------------------------------------------------------------------
_LAYOUTS = ("offs", "masked_m", "m_indices")


def _index(offs, masked_m, m_indices):
    """The group-size tensor of whichever layout a call gives."""
    return offs if offs is not None else masked_m if masked_m is not None else m_indices


def _via_op(kind, x, w, n, k, where, expected_m, expr, operands, out_dtype, out):
    """A grouped call as fusedgemm::grouped_gemm (traced by torch.compile; eager inside the op). where: (offs,
    masked_m, m_indices), one of them given."""
    given = [name for name, v in zip(_LAYOUTS, where) if v is not None]
    if len(given) != 1:
        raise ValueError("grouped GEMM: give exactly one of offs, masked_m and m_indices")
    if _epi.saved_node(expr) is not None:
        raise NotImplementedError("grouped GEMM: save() outputs are not traced by torch.compile yet")
    tensors, scalars = split_operands(operands)
    y = torch.ops.fusedgemm.grouped_gemm(
        x, w, _index(*where), given[0], -1 if expected_m is None else expected_m,
        kind, n, k, str(expr), ",".join(tensors), list(tensors.values()), ",".join(scalars), list(scalars.values()),
        out_dtype if out_dtype is not None else (out.dtype if out is not None else x.dtype))
    if out is not None:
        out.copy_(y)
        return out
    return y


@torch.library.custom_op("fusedgemm::grouped_gemm", mutates_args=())
def grouped_gemm_op(x: torch.Tensor, w: torch.Tensor, index: torch.Tensor, layout: str, expected_m: int, kind: str,
                    n: int, k: int, epilogue: str, tensor_names: str, tensors: list[torch.Tensor], scalar_names: str,
                    scalar_values: list[float], out_dtype: torch.dtype) -> torch.Tensor:
    """grouped_matmul (kind 'matmul': w [G, N, K]) or grouped_gemm_a8 (kind 'a8': w the preshuffled data, n, k the
    true N, K) with an epilogue expression's canonical text and its operands; 'swiglu' / 'swiglu_a8': w the merged
    gate/up weight [G, 2I, K], interleaved (and preshuffled) here, eagerly and cached on it, not in the graph."""
    operands = join_operands(tensor_names, tensors, scalar_names, scalar_values)
    where = {layout: index}
    hint = None if expected_m < 0 else expected_m
    if kind == "swiglu":
        w, kind = _cached_interleaved_groups(w), "matmul"
    elif kind == "swiglu_a8":
        wq = _cached_interleaved_groups(w, shuffle=True)
        return grouped_gemm_a8(x, wq, epilogue=_epi.parse(epilogue), operands=operands, out_dtype=out_dtype,
                               expected_m=hint, **where)
    if kind == "a8":
        wq = PreshuffledWeight(w, n=n, k=k)
        return grouped_gemm_a8(x, wq, epilogue=_epi.parse(epilogue), operands=operands, out_dtype=out_dtype,
                               expected_m=hint, **where)
    return grouped_matmul(x, w, epilogue=_epi.parse(epilogue), operands=operands, out_dtype=out_dtype,
                          expected_m=hint, **where)


@grouped_gemm_op.register_fake
def _grouped_gemm_fake(x, w, index, layout, expected_m, kind, n, k, epilogue, tensor_names, tensors, scalar_names,
                       scalar_values, out_dtype):
    n_out = n // 2 if _epi.is_paired(_epi.parse(epilogue)) else n
    return x.new_empty((*x.shape[:-1], n_out), dtype=out_dtype)


__all__ = ["GroupLayout", "grouped_gemm_a8", "grouped_matmul", "grouped_swiglu", "interleave_groups"]
