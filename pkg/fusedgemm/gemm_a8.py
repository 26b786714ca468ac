"""gemm_a8: 8-bit GEMM on a preshuffled weight with a fused epilogue, one kernel.

    y = act(A @ B.T * scale_a[:, None] * scale_b[None, :] + bias)     a preset name; fp32 inside, rounded once
    y = expr(A @ B.T)                                                 any fusedgemm.epilogue expression

Every argument is checked first (checks.py), with a message saying what was expected and what came; the kernel
never sees an input it cannot handle. Here: the call plan (kernel, grid, packed arguments, tensor maps) and the
eager fast path that reuses it.
"""
from __future__ import annotations

import torch

from . import epilogue as _epi
from .checks import (FP8_DTYPE_FOR_ARCH, OUT_DTYPES, check_gemm_a8_args, check_no_preset_operands,  # noqa: F401
                     preset_values)
from .preshuffle import PreshuffledWeight
from . import plan as _plan
from .plan import choose_config as _choose_config, forced_config, plan_for, plans, sm_count as _sm_count  # noqa: F401
from .call_plan import (expression_pointers, _TMAP_L2_256B, _TMAP_L2_DECODE, CallPlan as _CallPlan, _tensor_map_a,  # noqa: F401
                        _tensor_map_b)
from .runtime.device import current_device_index, device_guard

# Params fields filled per call (addresses); the preset fast path passes them in this order.
PRESET_POINTERS = ("out", "op_bias", "op_scale_a", "op_scale_b")


def launch_gemm_a8(a: torch.Tensor, b_data: torch.Tensor, p: dict, out: torch.Tensor,
                   saved: torch.Tensor | None = None) -> _CallPlan:
    """Launch on the current stream with the pieces check_gemm_a8_args returned. Returns the plan."""
    m, k = a.shape
    pointers = ("out",) if saved is None else ("out", "saved")
    plan = _CallPlan(a.device.index, p["arch"], p["in_kind"], m, b_data.shape[0], k, out.dtype, p["epi"],
                     p["values"], pointers)
    plan.run(a.data_ptr(), b_data.data_ptr(), out.data_ptr(), *(() if saved is None else (saved.data_ptr(),)))
    return plan


def gemm_a8(a: torch.Tensor, b: PreshuffledWeight, bias: torch.Tensor | None = None, *, scale_a=None, scale_b=None,
            epilogue="none", out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None,
            operands: dict | None = None):
    """y = epilogue(a @ w.T), one kernel, rounded once. With a preset epilogue name:
    y = act(a @ w.T * scale_a[:, None] * scale_b[None, :] + bias).

    a: [M, K] fp8 (e4m3fn on sm_90/gfx950, e4m3fnuz on gfx942) or int8, contiguous, on the GPU.
    b: fusedgemm.preshuffle(w) for w [N, K] of a's dtype. N % 16 == 0, K % 16 == 0.
    bias: [N] in out_dtype (bf16/fp16) or float32, or None (epilogue names say whether a bias is added).
    scale_a: float32 [M] (per token) or one value (tensor or Python number) or None (1.0).
    scale_b: float32 [N] (per channel) or one value or None.
    epilogue: none | bias | bias_relu | bias_silu | bias_gelu | bias_gelu_erf | relu | silu | gelu | gelu_erf
              (gelu = tanh approximation, gelu_erf = exact); or an expression of fusedgemm.epilogue (e.g.
              fusedgemm.epilogue.parse("silu(acc * n_vec(s)) + aux(residual)")) whose operands are given by
              name in `operands` (bias / scale_a / scale_b must then be None). An expression with save(x, dtype)
              returns (out, saved): saved [M, N] holds x. A paired expression (gate, up; w gate/up-interleaved,
              see fusedgemm.swiglu) writes [M, N / 2], and its operands are sized N / 2.
    out_dtype: bfloat16, float16, float32 or the arch's fp8 (saturating); default: out's dtype, else bfloat16.
    out: optional [M, N] contiguous output to write.
    Runs on torch.cuda.current_stream(); no host synchronisation; CUDA-graph capturable. Epilogue expressions
    and fp32 / fp8 outputs compile their kernel on first use (cached on disk; FUSEDGEMM_JIT_VERBOSE=1 says so).
    """
    if torch.compiler.is_compiling():
        return _gemm_a8_traced(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands)
    # Fast path (host time per call is part of the speed at decode sizes). The first call of a signature --
    # every argument's dtype, shape, strides and device, the preset epilogue, and a Python-float scale's value --
    # is checked in full and leaves a launch plan on the weight; a later call of that signature re-checks only
    # what the signature cannot promise: the addresses' alignment and the current device. Anything else
    # (an int scale, a non-tensor, an expression epilogue, a plan not found) takes the checked path.
    if epilogue.__class__ is _epi.Node:
        return _gemm_a8_expression(a, b, epilogue, operands, out_dtype, out, bias, scale_a, scale_b)
    key = plan = None
    if epilogue.__class__ is str and operands is None:
        try:
            key = (a.dtype, a.shape, a.stride(), a.get_device(), epilogue, out_dtype,
                   None if bias is None else (bias.dtype, bias.shape, bias.stride(), bias.get_device()),
                   scale_a if scale_a is None or scale_a.__class__ is float else
                   (scale_a.dtype, scale_a.shape, scale_a.stride(), scale_a.get_device()),
                   scale_b if scale_b is None or scale_b.__class__ is float else
                   (scale_b.dtype, scale_b.shape, scale_b.stride(), scale_b.get_device()),
                   None if out is None else (out.dtype, out.shape, out.stride(), out.get_device()))
            plan = b.call_plans.get(key)
        except (AttributeError, TypeError):
            key = plan = None
    if plan is not None and _plan.forced() is None:
        call_plan, dtype, out_align, _saved_dtype, _aligns = plan  # a preset saves nothing
        a_ptr, b_ptr = a.data_ptr(), b.data.data_ptr()
        bias_ptr = 0 if bias is None else bias.data_ptr()
        sa_ptr = 0 if scale_a is None or scale_a.__class__ is float else scale_a.data_ptr()
        sb_ptr = 0 if scale_b is None or scale_b.__class__ is float else scale_b.data_ptr()
        out_ptr = 0 if out is None else out.data_ptr()
        if (not (a_ptr & 15 or b_ptr & 15 or bias_ptr % call_plan.bias_align or sa_ptr & 3 or sb_ptr & 3
                 or out_ptr % out_align) and current_device_index() == call_plan.dev):
            if out is None:
                out = torch.empty(call_plan.m, call_plan.n, dtype=dtype, device=a.device)  # int sizes: parsed faster
                out_ptr = out.data_ptr()
            call_plan.run(a_ptr, b_ptr, out_ptr, bias_ptr, sa_ptr, sb_ptr)
            return out
    return _gemm_a8_checked(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands, key)


def _gemm_a8_checked(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands, key):
    """Every check, then the launch; records the plan under `key` for the fast path when given one."""
    p = check_gemm_a8_args(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands=operands)
    out_dtype = p["out_dtype"]
    if out is None:
        out = torch.empty((p["m"], p["n_out"]), dtype=out_dtype, device=a.device)
    saved = None
    if p["saved_dtype"] is not None:
        saved = torch.empty((p["m"], p["n_out"]), dtype=p["saved_dtype"], device=a.device)
    outputs = [out] if saved is None else [out, saved]
    # The Params fields each call fills (the fast paths pass them in this order) and their alignments.
    if isinstance(epilogue, _epi.Node):
        pointers, aligns = expression_pointers(epilogue, operands, saved is not None)
    else:
        pointers, aligns = PRESET_POINTERS, ()
    with device_guard(a.device):
        plan = _CallPlan(a.device.index, p["arch"], p["in_kind"], p["m"], p["n"], p["k"], out_dtype, p["epi"],
                         p["values"], pointers, 1 if bias is None else bias.element_size())
        plan.run(a.data_ptr(), b.data.data_ptr(), *(o.data_ptr() for o in outputs),
                 *(p["values"][f] for f in pointers[len(outputs):]))
    if key is not None:
        _remember(b, key, (plan, out_dtype, 2 * out.element_size(), p["saved_dtype"], aligns))
    return out if saved is None else (out, saved)


def _remember(b: PreshuffledWeight, key, entry) -> None:
    if _plan.forced() is not None:
        return
    cached = b.call_plans
    try:
        if len(cached) >= _CALL_PLANS_PER_WEIGHT:
            del cached[next(iter(cached))]  # the oldest
    except (KeyError, RuntimeError, StopIteration):  # another thread got there first
        pass
    cached[key] = entry


def _gemm_a8_expression(a, b, epilogue, operands, out_dtype, out, bias, scale_a, scale_b):
    """gemm_a8 with an epilogue expression. Fast path as for the presets: the first call of a signature (the
    expression, every tensor's dtype/shape/strides/device, each Python scalar's value) is checked in full and
    leaves a plan on the weight; a repeat call checks addresses and the device, then launches."""
    key = None
    if bias is None and scale_a is None and scale_b is None and (operands is None or operands.__class__ is dict):
        try:
            # isinstance, not the exact class: an nn.Parameter operand is a tensor whose address is passed per call;
            # a number's type too (True == 1, but a bool is refused).
            ops_key = tuple((name, v.dtype, v.shape, v.stride(), v.get_device()) if isinstance(v, torch.Tensor)
                            else (name, v.__class__, v) for name, v in (operands or {}).items())
            key = ("expr", epilogue, a.dtype, a.shape, a.stride(), a.get_device(), out_dtype,
                   None if out is None else (out.dtype, out.shape, out.stride(), out.get_device()), ops_key)
            hit = b.call_plans.get(key)
        except (AttributeError, TypeError):
            key = hit = None
        if hit is not None and _plan.forced() is None:
            call_plan, dtype, out_align, saved_dtype, aligns = hit
            a_ptr, b_ptr = a.data_ptr(), b.data.data_ptr()
            ptrs = [v.data_ptr() for v in operands.values() if isinstance(v, torch.Tensor)] if operands else []
            if (not (a_ptr & 15 or b_ptr & 15 or (out is not None and out.data_ptr() % out_align))
                    and all(p % al == 0 for p, al in zip(ptrs, aligns)) and current_device_index() == call_plan.dev):
                if out is None:
                    out = torch.empty(call_plan.m, call_plan.n_out, dtype=dtype, device=a.device)
                if saved_dtype is None:
                    call_plan.run(a_ptr, b_ptr, out.data_ptr(), *ptrs)
                    return out
                saved = torch.empty(call_plan.m, call_plan.n_out, dtype=saved_dtype, device=a.device)
                call_plan.run(a_ptr, b_ptr, out.data_ptr(), saved.data_ptr(), *ptrs)
                return out, saved
    return _gemm_a8_checked(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands, key)


_CALL_PLANS_PER_WEIGHT = 64  # distinct (M, dtypes, ...) signatures remembered per weight


def _gemm_a8_traced(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands):
    """Under torch.compile: call the registered op (ops.py; its real implementation validates everything at run
    time; its fake implementation checks shapes at trace time). Python-number scales fold into alpha."""

    if out_dtype is None:
        out_dtype = out.dtype if isinstance(out, torch.Tensor) else torch.bfloat16
    if isinstance(epilogue, _epi.Node):  # operands go by name: tensors and Python scalars apart
        check_no_preset_operands(bias, scale_a, scale_b)  # the op takes none: say so here, not never
        ops = dict(operands or {})
        tensors = {k: v for k, v in ops.items() if isinstance(v, torch.Tensor)}
        scalars = {k: float(v) for k, v in ops.items() if not isinstance(v, torch.Tensor)}
        ys = torch.ops.fusedgemm.gemm_a8_expr(a, b.data, str(epilogue), ",".join(tensors), list(tensors.values()),
                                              ",".join(scalars), list(scalars.values()), out_dtype)
        if out is not None:
            out.copy_(ys[0])
            ys = [out, *ys[1:]]
        return ys[0] if len(ys) == 1 else (ys[0], ys[1])
    if not isinstance(b, PreshuffledWeight):
        raise TypeError(f"gemm_a8: B must be a PreshuffledWeight from fusedgemm.preshuffle, got {type(b).__name__}")
    alpha = 1.0
    if isinstance(scale_a, (int, float)) and not isinstance(scale_a, bool):
        alpha, scale_a = alpha * float(scale_a), None
    if isinstance(scale_b, (int, float)) and not isinstance(scale_b, bool):
        alpha, scale_b = alpha * float(scale_b), None
    y = torch.ops.fusedgemm.gemm_a8(a, b.data, bias, scale_a, scale_b, alpha, epilogue, out_dtype)
    if out is not None:
        out.copy_(y)
        return out
    return y
