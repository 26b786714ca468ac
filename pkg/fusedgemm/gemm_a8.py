"""gemm_a8: 8-bit GEMM on a preshuffled weight with a fused epilogue, one kernel.

    y = act(A @ B.T * scale_a[:, None] * scale_b[None, :] + bias)     a preset name; fp32 inside, rounded once
    y = expr(A @ B.T)                                                 any fusedgemm.epilogue expression

Every argument is checked first (checks.py), with a message saying what was expected and what came; the kernel
never sees an input it cannot handle. Here: the call plan (kernel, grid, packed arguments, tensor maps; plan/call)
and the eager fast path that reuses it; CPU tensors go to the torch reference (reference.gemm_reference) instead;
the torch.library ops torch.compile records (fusedgemm::gemm_a8, fusedgemm::gemm_a8_expr).
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

from . import epilogue as _epi
from .checks import (FP8_DTYPE_FOR_ARCH, OUT_DTYPES, check_gemm_a8_args, check_no_preset_operands,  # noqa: F401
                     preset_values)
from .epilogue.presets import ACTIVATIONS, EPILOGUES, activation_name, preset_name, resolve as _resolve
from .preshuffle import PreshuffledWeight, unshuffle
from . import plan as _plan
from .plan import choose_config as _choose_config, forced_config, plan_for, plans, sm_count as _sm_count  # noqa: F401
from .plan.call import (expression_pointers, _TMAP_L2_256B, _TMAP_L2_DECODE, CallPlan as _CallPlan,  # noqa: F401
                        _tensor_map_a, _tensor_map_b, signature as _sig)
from .reference import gemm_reference, write_outputs
from .runtime.device import current_device_index, device_guard
from .util import join_operands, split_operands

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
            epilogue=None, out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None,
            operands: dict | None = None, activation: str | None = None):
    """y = epilogue(a @ w.T), one kernel, rounded once. With a preset epilogue name:
    y = act(a @ w.T * scale_a[:, None] * scale_b[None, :] + bias).

    a: [M, K] fp8 (e4m3fn on sm_90/gfx950, e4m3fnuz on gfx942) or int8, contiguous, on the GPU.
    b: fusedgemm.preshuffle(w) for w [N, K] of a's dtype. N % 16 == 0, K % 16 == 0.
    bias: [N] in out_dtype (bf16/fp16) or float32, or None (epilogue names say whether a bias is added).
    scale_a: float32 [M] (per token) or one value (tensor or Python number) or None (1.0).
    scale_b: float32 [N] (per channel) or one value or None.
    epilogue: none | bias | bias_relu | bias_silu | bias_gelu | bias_gelu_erf | relu | silu | gelu | gelu_erf
              (gelu = tanh approximation, gelu_erf = exact; case-insensitive); or an expression of
              fusedgemm.epilogue -- a node or its text, parsed for you (e.g. "silu(acc * n_vec(s)) + aux(residual)")
              -- whose operands are given by name in `operands` (bias / scale_a / scale_b must then be None). An
              expression with save(x, dtype) returns (out, saved): saved [M, N] holds x. A paired expression
              (gate, up; w gate/up-interleaved, see fusedgemm.swiglu) writes [M, N / 2], its operands sized N / 2.
              None (the default): identity, plus the bias when one is given.
    activation: the shorthand matmul_fused takes too: none | relu | silu | gelu | gelu_erf (None: identity),
              plus the bias when one is given (activation="silu" with a bias is epilogue="bias_silu").
    out_dtype: bfloat16, float16, float32 or the arch's fp8 (saturating); default: out's dtype, else bfloat16.
    out: optional [M, N] contiguous output to write.
    Runs on torch.cuda.current_stream(); no host synchronisation; CUDA-graph capturable. Epilogue expressions
    and fp32 / fp8 outputs compile their kernel on first use (cached on disk; FUSEDGEMM_JIT_VERBOSE=1 says so).
    CPU tensors: the same checks, output dtype and shape, computed by a torch reference (fp8 / int8 upcast,
    float64 inside, rounded once; no kernel runs).
    """
    if epilogue is None:  # the default: a dict lookup once the name was seen (host time counts at decode sizes)
        try:
            epilogue = _SHORTHAND[(activation, bias is not None)]
        except (KeyError, TypeError):  # not seen yet, or not hashable: checked (and named in the error)
            epilogue = _shorthand(None, activation, bias)
    elif activation is not None:
        epilogue = _shorthand(epilogue, activation, bias)
    elif epilogue.__class__ is str and epilogue not in _PRESET_NAMES:
        epilogue = _epilogue_text("gemm_a8", epilogue)
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
            key = (a.dtype, a.shape, a.stride(), a.get_device(), epilogue, out_dtype, _sig(bias),
                   scale_a if scale_a is None or scale_a.__class__ is float else _sig(scale_a),
                   scale_b if scale_b is None or scale_b.__class__ is float else _sig(scale_b), _sig(out))
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
    if p["arch"] == "cpu":  # no kernel: the torch reference, float64 inside, rounded once
        write_outputs(gemm_reference(a, unshuffle(b), p["expr"], p["operands"]), p["n_out"], out, saved)
        return out if saved is None else (out, saved)
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
    if _plan.forced() is None:
        b.call_plans.remember(key, entry)


_PRESET_NAMES = frozenset(EPILOGUES)


_SHORTHAND: dict = {}  # (activation, has bias) -> preset name, for the names seen


def _shorthand(epilogue, activation, bias) -> str:
    """epilogue=None and / or activation=: the preset of that activation, with the bias when one is given."""
    if epilogue is not None:
        raise ValueError(f"gemm_a8: give epilogue={epilogue!r} or activation={activation!r}, not both")
    name = preset_name(bias is not None, activation_name("gemm_a8", activation, ACTIVATIONS))
    if activation is None or isinstance(activation, str):
        _SHORTHAND[(activation, bias is not None)] = name
    return name


@functools.lru_cache(maxsize=256)
def _epilogue_text(op: str, text: str):
    """A string epilogue that is not a preset's exact name: its canonical preset name (case-insensitive) or the
    expression it parses to (an error names both readings). Cached: the fast path's key is the result."""
    form = _resolve(op, text)
    return form if isinstance(form, _epi.Node) else preset_name(*form)


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


def _gemm_a8_traced(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands):
    """Under torch.compile: call the registered op (below; its real implementation validates everything at run
    time; its fake implementation checks shapes at trace time). Python-number scales fold into alpha."""

    if out_dtype is None:
        out_dtype = out.dtype if isinstance(out, torch.Tensor) else torch.bfloat16
    if isinstance(epilogue, _epi.Node):  # operands go by name: tensors and Python scalars apart
        check_no_preset_operands(bias, scale_a, scale_b)  # the op takes none: say so here, not never
        tensors, scalars = split_operands(operands)
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


# ---- torch.library ops: what torch.compile records of gemm_a8 ------------------------------------------------
@torch.library.custom_op("fusedgemm::gemm_a8", mutates_args=())
def gemm_a8_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], scale_a: Optional[torch.Tensor],
               scale_b: Optional[torch.Tensor], alpha: float, epilogue: str, out_dtype: torch.dtype) -> torch.Tensor:
    """b is the `.data` of a PreshuffledWeight (fusedgemm.gemm_a8 unwraps it); everything is checked here."""
    p = check_gemm_a8_args(a, PreshuffledWeight(b), bias, scale_a, scale_b, epilogue, out_dtype, None)
    out = torch.empty((p["m"], p["n"]), dtype=out_dtype, device=a.device)
    p["values"]["op_alpha"] *= alpha
    p["operands"]["alpha"] *= alpha
    _op_launch(a, b, p, out)
    return out


@gemm_a8_op.register_fake
def _gemm_a8_fake(a, b, bias, scale_a, scale_b, alpha, epilogue, out_dtype):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"gemm_a8: A [M, K] and B [N, K] must agree in K, got {tuple(a.shape)} and {tuple(b.shape)}")
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("fusedgemm::gemm_a8_expr", mutates_args=())
def gemm_a8_expr_op(a: torch.Tensor, b: torch.Tensor, epilogue: str, tensor_names: str,
                    tensors: list[torch.Tensor], scalar_names: str, scalar_values: list[float],
                    out_dtype: torch.dtype) -> list[torch.Tensor]:
    """gemm_a8 with an epilogue expression (its canonical text); operands split into tensors and Python
    scalars, their names comma-separated (operand names are identifiers; a schema has no list of strings).
    Returns [out] or [out, saved] (an expression with save(...))."""
    operands = join_operands(tensor_names, tensors, scalar_names, scalar_values)
    p = check_gemm_a8_args(a, PreshuffledWeight(b), None, None, None, _epi.parse(epilogue), out_dtype, None,
                           operands=operands)
    out = torch.empty((p["m"], p["n_out"]), dtype=p["out_dtype"], device=a.device)
    saved = None if p["saved_dtype"] is None else torch.empty((p["m"], p["n_out"]), dtype=p["saved_dtype"],
                                                              device=a.device)
    _op_launch(a, b, p, out, saved)
    return [out] if saved is None else [out, saved]


def _op_launch(a, b_data, p, out, saved=None) -> None:
    """The ops' launch: the kernel, or on the CPU the torch reference (as the eager call)."""
    if p["arch"] == "cpu":
        write_outputs(gemm_reference(a, unshuffle(PreshuffledWeight(b_data)), p["expr"], p["operands"]), p["n_out"],
                      out, saved)
        return
    with torch.cuda.device(a.device):
        launch_gemm_a8(a, b_data, p, out, saved)


@gemm_a8_expr_op.register_fake
def _gemm_a8_expr_fake(a, b, epilogue, tensor_names, tensors, scalar_names, scalar_values, out_dtype):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"gemm_a8: A [M, K] and B [N, K] must agree in K, got {tuple(a.shape)} and {tuple(b.shape)}")
    expr = _epi.parse(epilogue)
    save = _epi.saved_node(expr)
    out = a.new_empty((a.shape[0], b.shape[0] // 2 if _epi.is_paired(expr) else b.shape[0]), dtype=out_dtype)
    return [out] if save is None else [out, a.new_empty(out.shape, dtype=_epi.TORCH_DTYPES[save.attrs[0]])]
