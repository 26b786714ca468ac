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

from . import blockscale as _blockscale
from . import epilogue as _epi
from . import out_groups as _out_groups
from .checks import (FP8_DTYPE_FOR_ARCH, OUT_DTYPES, check_gemm_a8_args, check_no_preset_operands,  # noqa: F401
                     preset_values)
from .epilogue.presets import ACTIVATIONS, EPILOGUES, activation_name, preset_name, resolve as _resolve
from .preshuffle import LAYOUT_16x16, PreshuffledWeight, unshuffle
from . import plan as _plan
from .plan import choose_config as _choose_config, forced_config, plan_for, plans, sm_count as _sm_count  # noqa: F401
from .plan.call import (expression_pointers, _TMAP_L2_256B, _TMAP_L2_DECODE, CallPlan as _CallPlan,  # noqa: F401
                        _tensor_map_a, _tensor_map_b, signature as _sig)
from . import unaligned as _ua
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
    blocks = p.get("blocks")
    plan = _CallPlan(a.device.index, p["arch"], p["in_kind"], m, b_data.shape[0], k, out.dtype, p["epi"],
                     p["values"] if blocks is None else _blockscale.block_values(p["values"], blocks), pointers,
                     block_scaled=blocks is not None)
    plan.run(a.data_ptr(), b_data.data_ptr(), out.data_ptr(), *(() if saved is None else (saved.data_ptr(),)))
    return plan


def gemm_a8(a: torch.Tensor, b: PreshuffledWeight, bias: torch.Tensor | None = None, *, scale_a=None, scale_b=None,
            epilogue=None, out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None,
            operands: dict | None = None, activation: str | None = None, out_group: int | None = None):
    """y = epilogue(a @ w.T), one kernel, rounded once. With a preset epilogue name:
    y = act(a @ w.T * scale_a[:, None] * scale_b[None, :] + bias).

    a: [M, K] fp8 (e4m3fn on sm_90/gfx950, e4m3fnuz on gfx942) or int8, contiguous (any strides when K % 16:
       it is copied), on the GPU.
    b: fusedgemm.preshuffle(w) for w [N, K] of a's dtype; any N, K >= 1 (preshuffle pads the weight once).
       An N not a multiple of 16: the output (out=None) is a view [M, :N] of an [M, ceil16(N)] buffer, [N]
       operands are copied into padded vectors per call, a given out is written through a buffer (a copy, warned
       once). A K not a multiple of 16: a is copied into a zero-padded [M, ceil16(K)] buffer (warned once).
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
    out_group: 128 writes the output as the next layer's 1x128 block-quantised input: returns (codes [M, N] in
              out_dtype -- the arch's fp8, the default --, scales [M, ceil(N / 128)] float32), what
              quantize_rows(y, "fp8", group=128) gives for y the fp32 output, in one kernel (out_groups.py;
              gfx942 / gfx950, sm_90a and CPU tensors; N % 16 == 0 on a GPU; no out=, no save(...); a gate / up
              pair's [M, N / 2] outputs are grouped by 128 as well; on sm_90a a pair's and decode-size calls run
              as the GEMM to fp32 then quantize_rows: out_groups.two_kernels).
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
    if out_group is not None:
        def fp32_gemm():  # the same call to fp32 (out_groups.two_kernels: the calls that take GEMM + quantize_rows)
            return gemm_a8(a, b, bias, scale_a=scale_a, scale_b=scale_b, epilogue=epilogue, out_dtype=torch.float32,
                           operands=operands)
        return _out_groups.gemm_a8_out_group(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands,
                                             out_group, fp32_gemm)
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
    if plan.__class__ is _UnalignedPlan and _plan.forced() is None:  # a weight stored padded (any N, K)
        y = plan.launch(a, b, bias, scale_a, scale_b)
        if y is not None:
            return y
        plan = None
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
    if isinstance(b, PreshuffledWeight) and tuple(b.padded_shape) != tuple(b.shape):
        operands = _fit_operands(a, b, epilogue, operands)
        p = check_gemm_a8_args(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands=operands)
        return _run_unaligned(a, b, p, out, key, bias)
    p = check_gemm_a8_args(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, operands=operands)
    out_dtype = p["out_dtype"]
    if out is None:
        out = torch.empty((p["m"], p["n_out"]), dtype=out_dtype, device=a.device)
    saved = None
    if p["saved_dtype"] is not None:
        saved = torch.empty((p["m"], p["n_out"]), dtype=p["saved_dtype"], device=a.device)
    if p["arch"] == "cpu":  # no kernel: the torch reference, float64 inside, rounded once
        write_outputs(gemm_reference(a, unshuffle(b), p["expr"], p["operands"], blocks=p["blocks"]), p["n_out"],
                      out, saved)
        return out if saved is None else (out, saved)
    if p["blocks"] is not None:  # block-scaled fp8 (blockscale.py)
        if p["preset"] is None:  # an expression: a plan per call (none kept for the fast path)
            with device_guard(a.device):
                launch_gemm_a8(a, b.data, p, out, saved)
            return out if saved is None else (out, saved)
        # A preset: the fast path's plan, whose scale slots are the block-scale fields on a block side
        pointers = ("out", "op_bias", "bs_a" if p["blocks"].a is not None else "op_scale_a",
                    "bs_b" if p["blocks"].b is not None else "op_scale_b")
        with device_guard(a.device):
            plan = _CallPlan(a.device.index, p["arch"], p["in_kind"], p["m"], p["n"], p["k"], out_dtype, p["epi"],
                             _blockscale.block_values(p["values"], p["blocks"]), pointers,
                             1 if bias is None else bias.element_size(), block_scaled=True)
            plan.run(a.data_ptr(), b.data.data_ptr(), out.data_ptr(), *(
                0 if t is None or not isinstance(t, torch.Tensor) else t.data_ptr() for t in (bias, scale_a, scale_b)))
        if key is not None:
            _remember(b, key, (plan, out_dtype, 2 * out.element_size(), None, ()))
        return out
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


def _fit_operands(a, b: PreshuffledWeight, epilogue, operands):
    """An expression's [M, N] operands, for a weight of an N not a multiple of 16: rows reaching ceil16(N)
    (copied when they do not, with a one-time warning: unaligned.fit_rows)."""
    if not isinstance(operands, dict):
        return operands
    if isinstance(epilogue, str) and epilogue not in _PRESET_NAMES:
        try:
            epilogue = _epilogue_text("gemm_a8", epilogue)
        except (ValueError, TypeError):
            return operands  # the checks name what is wrong
    if not isinstance(epilogue, _epi.Node):
        return operands
    paired = _epi.is_paired(epilogue)
    n, n_pad = b.shape[0], b.padded_shape[0]
    return _ua.fit_aux_operands("gemm_a8", epilogue, operands, n // 2 if paired else n,
                                n_pad // 2 if paired else n_pad)


class _UnalignedPlan:
    """The fast path's entry for a preset call on a weight stored padded: the launch plan of the padded problem
    and what each call pads (A's K, the [N] operands) before it launches, as _run_unaligned does."""

    __slots__ = ("plan", "dtype", "n", "width", "k", "k_pad", "bias_align")

    def __init__(self, plan, dtype, n, width, k, k_pad, bias_align):
        self.plan, self.dtype, self.n, self.width = plan, dtype, n, width
        self.k, self.k_pad, self.bias_align = k, k_pad, bias_align

    def launch(self, a, b, bias, scale_a, scale_b):
        """-> out, or None where an address or the device does not suit the plan (the checked path then)."""
        plan = self.plan
        a_k = a if self.k_pad == self.k else _ua.pad_k("gemm_a8", a, self.k_pad)
        a_ptr, b_ptr = a_k.data_ptr(), b.data.data_ptr()
        if a_ptr & 15 or b_ptr & 15 or current_device_index() != plan.dev:
            return None
        n, width = self.n, self.width
        if bias is not None:
            bias = _ua.pad_vec(bias, n, width)
        if scale_b is not None and scale_b.__class__ is not float:
            scale_b = _ua.pad_vec(scale_b, n, width)
        bias_ptr = 0 if bias is None else bias.data_ptr()
        sa_ptr = 0 if scale_a is None or scale_a.__class__ is float else scale_a.data_ptr()
        sb_ptr = 0 if scale_b is None or scale_b.__class__ is float else scale_b.data_ptr()
        if bias_ptr % self.bias_align or sa_ptr & 3 or sb_ptr & 3:
            return None
        out = _ua.padded_empty((plan.m,), n, width, self.dtype, a.device)
        plan.run(a_ptr, b_ptr, out.data_ptr(), bias_ptr, sa_ptr, sb_ptr)
        return out


def _run_unaligned(a, b: PreshuffledWeight, p: dict, out, key=None, bias=None):
    """gemm_a8 on a weight stored padded (N or K not a multiple of 16), after the checks (p: for the true N, K).
    The kernel runs on the padded problem [M, Np] x [Np, Kp]: A of K % 16 != 0 copied into a zero-padded [M, Kp]
    buffer, [N] operands padded to Np, outputs written as [M, Np] rows (a view [M, :N] is returned; a given out
    of such an N is filled by a copy). Returns out, or (out, saved). A preset call given a fast-path `key` (and
    no out) leaves an _UnalignedPlan on the weight: the repeat calls skip the checks and the planning."""
    m, n, k, n_out = p["m"], p["n"], p["k"], p["n_out"]
    n_pad, k_pad = b.padded_shape
    width = n_pad // 2 if n_out != n else n_pad  # the kernel's output columns (N / 2 for a paired epilogue)
    if k_pad != k:
        _ua.warn_pad_k("gemm_a8", "A", k, k_pad, a.dtype)
    if out is not None and width != n_out:
        _ua.warn_out_copy("gemm_a8", n_out, width)
    target = out
    if out is None or width != n_out:
        out = _ua.padded_empty((m,), n_out, width, p["out_dtype"], a.device)
    saved = None
    if p["saved_dtype"] is not None:
        saved = _ua.padded_empty((m,), n_out, width, p["saved_dtype"], a.device)
    if p["arch"] == "cpu":  # no kernel: the torch reference on the true shapes
        write_outputs(gemm_reference(a, unshuffle(b), p["expr"], p["operands"], blocks=p["blocks"]), n_out, out,
                      saved)
    else:
        a_k = _ua.pad_k("gemm_a8", a, k_pad)
        keep = _ua.pad_col_values(p["expr"], p["operands"], p["values"], n_out, width)  # noqa: F841 (alive)
        outputs = [out] if saved is None else [out, saved]
        blocks = p["blocks"]  # block scales: ceil(K_pad / 128) == ceil(K / 128) blocks, N_pad < 128 ceil(N / 128)
        # a preset (not block-scaled): the operands' addresses are passed per call, so the plan can be kept
        keep_plan = p["preset"] is not None and saved is None and blocks is None
        pointers = PRESET_POINTERS if keep_plan else ("out", "saved")[:len(outputs)]
        bias_align = bias.element_size() if keep_plan and bias is not None else 1
        with device_guard(a.device):
            plan = _CallPlan(a.device.index, p["arch"], p["in_kind"], m, n_pad, k_pad, out.dtype, p["epi"],
                             p["values"] if blocks is None else _blockscale.block_values(p["values"], blocks),
                             pointers, bias_align, block_scaled=blocks is not None)
            plan.run(a_k.data_ptr(), b.data.data_ptr(), *(o.data_ptr() for o in outputs),
                     *(p["values"][f] for f in pointers[len(outputs):]))
        if keep_plan and key is not None and target is None:
            _remember(b, key, _UnalignedPlan(plan, out.dtype, n, width, k, k_pad, bias_align))
    if target is not None and target is not out:
        target.copy_(out)
        out = target
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
        if any(isinstance(s, torch.Tensor) and s.dim() == 2 and s.numel() > 1 for s in (scale_a, scale_b)):
            raise ValueError("gemm_a8: block scales with an epilogue expression are not traced by torch.compile yet; "
                             "use a preset epilogue (bias / activation names) there, or call it eagerly")
        check_no_preset_operands(bias, scale_a, scale_b)  # the op takes none: say so here, not never
        tensors, scalars = split_operands(operands)
        if not isinstance(b, PreshuffledWeight):
            raise TypeError(f"gemm_a8: B must be a PreshuffledWeight from fusedgemm.preshuffle, got {type(b).__name__}")
        ys = torch.ops.fusedgemm.gemm_a8_expr(a, b.data, str(epilogue), ",".join(tensors), list(tensors.values()),
                                              ",".join(scalars), list(scalars.values()), out_dtype, *_true_nk(b))
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
    y = torch.ops.fusedgemm.gemm_a8(a, b.data, bias, scale_a, scale_b, alpha, epilogue, out_dtype, *_true_nk(b))
    if out is not None:
        out.copy_(y)
        return out
    return y


def _true_nk(b: PreshuffledWeight) -> tuple[int, int]:
    """The ops' n, k arguments: the weight's true [N, K] when it is stored padded, else -1, -1 (data's shape)."""
    return (-1, -1) if tuple(b.shape) == tuple(b.data.shape) else tuple(b.shape)


def _wrap(b: torch.Tensor, n: int, k: int) -> PreshuffledWeight:
    """The ops' b (a PreshuffledWeight's `.data`) with its true N, K (n, k < 0: data's shape)."""
    return PreshuffledWeight(b, LAYOUT_16x16, None if n < 0 else n, None if k < 0 else k)


def _fake_out(a, b, n: int, k: int, n_out_of, dtype):
    """The fake output of the ops: [M, n_out], a view of [M, width] rows when the weight is stored padded (as
    _run_unaligned returns it)."""
    n = b.shape[0] if n < 0 else n
    k = b.shape[1] if k < 0 else k
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != k:
        raise ValueError(f"gemm_a8: A [M, K] and B [N, K] must agree in K, got {tuple(a.shape)} and [{n}, {k}]")
    n_out, width = n_out_of(n), n_out_of(b.shape[0])
    if b.shape[0] == n:
        return a.new_empty((a.shape[0], n_out), dtype=dtype)
    return a.new_empty((a.shape[0], width), dtype=dtype)[:, :n_out]


# ---- torch.library ops: what torch.compile records of gemm_a8 ------------------------------------------------
@torch.library.custom_op("fusedgemm::gemm_a8", mutates_args=())
def gemm_a8_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], scale_a: Optional[torch.Tensor],
               scale_b: Optional[torch.Tensor], alpha: float, epilogue: str, out_dtype: torch.dtype, n: int = -1,
               k: int = -1) -> torch.Tensor:
    """b is the `.data` of a PreshuffledWeight (fusedgemm.gemm_a8 unwraps it), n, k its true N, K when it is
    stored padded (-1: data's shape); everything is checked here."""
    wb = _wrap(b, n, k)
    p = check_gemm_a8_args(a, wb, bias, scale_a, scale_b, epilogue, out_dtype, None)
    p["values"]["op_alpha"] *= alpha
    p["operands"]["alpha"] *= alpha
    if tuple(wb.shape) != tuple(b.shape):
        return _run_unaligned(a, wb, p, None)
    out = torch.empty((p["m"], p["n"]), dtype=out_dtype, device=a.device)
    _op_launch(a, b, p, out)
    return out


@gemm_a8_op.register_fake
def _gemm_a8_fake(a, b, bias, scale_a, scale_b, alpha, epilogue, out_dtype, n=-1, k=-1):
    return _fake_out(a, b, n, k, lambda x: x, out_dtype)


@torch.library.custom_op("fusedgemm::gemm_a8_expr", mutates_args=())
def gemm_a8_expr_op(a: torch.Tensor, b: torch.Tensor, epilogue: str, tensor_names: str,
                    tensors: list[torch.Tensor], scalar_names: str, scalar_values: list[float],
                    out_dtype: torch.dtype, n: int = -1, k: int = -1) -> list[torch.Tensor]:
    """gemm_a8 with an epilogue expression (its canonical text); operands split into tensors and Python
    scalars, their names comma-separated (operand names are identifiers; a schema has no list of strings).
    n, k: as gemm_a8's op. Returns [out] or [out, saved] (an expression with save(...))."""
    operands = join_operands(tensor_names, tensors, scalar_names, scalar_values)
    wb = _wrap(b, n, k)
    expr = _epi.parse(epilogue)
    if tuple(wb.shape) != tuple(b.shape):
        operands = _fit_operands(a, wb, expr, operands)
        p = check_gemm_a8_args(a, wb, None, None, None, expr, out_dtype, None, operands=operands)
        ys = _run_unaligned(a, wb, p, None)
        return list(ys) if isinstance(ys, tuple) else [ys]
    p = check_gemm_a8_args(a, wb, None, None, None, expr, out_dtype, None,
                           operands=operands)
    out = torch.empty((p["m"], p["n_out"]), dtype=p["out_dtype"], device=a.device)
    saved = None if p["saved_dtype"] is None else torch.empty((p["m"], p["n_out"]), dtype=p["saved_dtype"],
                                                              device=a.device)
    _op_launch(a, b, p, out, saved)
    return [out] if saved is None else [out, saved]


def _op_launch(a, b_data, p, out, saved=None) -> None:
    """The ops' launch: the kernel, or on the CPU the torch reference (as the eager call)."""
    if p["arch"] == "cpu":
        write_outputs(gemm_reference(a, unshuffle(PreshuffledWeight(b_data)), p["expr"], p["operands"],
                                     blocks=p["blocks"]), p["n_out"],
                      out, saved)
        return
    with torch.cuda.device(a.device):
        launch_gemm_a8(a, b_data, p, out, saved)


@gemm_a8_expr_op.register_fake
def _gemm_a8_expr_fake(a, b, epilogue, tensor_names, tensors, scalar_names, scalar_values, out_dtype, n=-1, k=-1):
    expr = _epi.parse(epilogue)
    save = _epi.saved_node(expr)
    paired = _epi.is_paired(expr)
    width = (lambda x: x // 2) if paired else (lambda x: x)
    out = _fake_out(a, b, n, k, width, out_dtype)
    if save is None:
        return [out]
    return [out, _fake_out(a, b, n, k, width, _epi.TORCH_DTYPES[save.attrs[0]])]
