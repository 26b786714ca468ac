"""matmul_fused: y = act(alpha * (A @ B) + beta * c + bias) -- or any epilogue expression -- in one kernel, for
bf16 / fp16 / fp32 (TF32) inputs.

    y = fg.matmul_fused(x, w, bias=b, activation="silu")                  # w: nn.Linear weight [N, K]
    y = fg.matmul_fused(a, b_kn, layout="kn", alpha=2.0, beta=0.5, c=c, activation="gelu")
    y = fg.matmul_fused(x, w, epilogue=E.parse("relu(acc) + aux(r)"), operands={"r": r})

API (this file) -> checks.check_matmul_fused_args -> plan (per arch) -> runtime/gemm_spec (the same kernel
family as gemm_a8: wgmma + TMA on sm_90a, MFMA on gfx942 / gfx950) -> code object (JIT) -> plan/call launch.
CPU tensors take the same checks, then reference.gemm_reference (torch, float64 inside) instead of a kernel.
Differentiable in A, B, bias and c (autograd through the torch.library op registered below); torch.compile
traces the op.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import epilogue as _epi, plan as _plan
from .autograd import matmul_fused_grads
from .checks import check_matmul_fused_args, keyword_form, number_or_scalar_tensor
from .plan.call import CallPlan, expression_pointers, signature as _sig
from .reference import gemm_reference, write_outputs
from .runtime.device import current_device_index, device_guard
from . import unaligned as _ua
from .util import _WARNED, PlanCache, join_operands, split_operands, warn_once  # noqa: F401  (_WARNED: tests reset it)

_PLANS = PlanCache(256)  # call signature -> (CallPlan, out dtype, out shape, operand names, aligns, device)


def _tensor_meta(t):
    """A tensor's (dtype, shape, strides, device) -- parameters included -- else the value itself."""
    return _sig(t) if isinstance(t, torch.Tensor) else t


def matmul_fused(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *, layout: str = "nk",
                 alpha=1.0, beta=None, c: torch.Tensor | None = None, activation: str | None = None, epilogue=None,
                 operands: dict | None = None, out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None,
                 precision: str | None = None):
    """y = act(alpha * (a @ B) + beta * c + bias), one kernel, fp32 inside, rounded once to out_dtype.

    a: [..., K] bf16 / fp16 / fp32 on the GPU (leading dims flattened like F.linear; any strides a TMA
       descriptor can express: unit stride along K, 16-byte aligned rows -- others are copied once, with a
       warning).
    b: [N, K] (layout="nk", an nn.Linear weight) or [K, N] (layout="kn"), a's dtype; any N, K >= 1. N % 8 != 0:
       the output is a view [..., :N] of rows ceil16(N) long, [N] operands are copied per call, a given out and
       [M, N] operands whose rows are shorter are copied (warned once). K * element size % 16 != 0: a and b are
       copied into zero-padded buffers per call (warned once). docs/usage.md, "Shapes"; unaligned.py.
    bias: [N] (bf16 / fp16 / fp32). c: [M, N] (or a's leading dims + [N]), [N] / [1, N] or [M, 1], may be `out`
       itself (in place: y = act(alpha AB + beta y)). alpha, beta: numbers or 1-element float32 device tensors
       (graph replays may change them). beta defaults to 1 when c is given and to 0 otherwise (torch.addmm's
       convention); beta = 0 (a number) ignores c, as torch.addmm does; a beta other than 0 without c is an error.
    activation: None (identity), relu, silu, sigmoid, gelu (tanh approximation), gelu_erf (exact), tanh, exp, neg,
       abs, square, sqrt, rsqrt; matched case-insensitively ("SiLU"). epilogue: None (identity), a gemm_a8 preset
       name ('bias_silu': activation silu, bias required), or any fusedgemm.epilogue expression -- a node or its
       text, parsed for you -- instead (acc = a @ B; operands by name; bias / c / alpha / beta / activation then
       keep their defaults); an expression with save(x, dtype) returns (out, saved). A paired expression (gate,
       up; b gate/up-interleaved: fusedgemm.swiglu) writes [..., N / 2].
    out_dtype: bf16 / fp16 / fp32, default out's dtype, else a's. precision (fp32 inputs): 'tf32' or 'ieee';
       None follows torch.get_float32_matmul_precision() ('highest' = ieee: on sm_90a a fused kernel of three
       TF32 products of split operands, about fp32's accuracy; elsewhere torch.mm plus a separate epilogue, with
       a warning).
    Runs on torch.cuda.current_stream(); no host sync; CUDA-graph capturable. Kernels compile on first use
    (cached on disk). CPU tensors: the same checks, output dtype and shape, computed by a torch reference (float64
    inside, rounded once; no kernel runs).
    """
    if torch.compiler.is_compiling() or (_needs_grad(a, b, bias, c) and torch.is_grad_enabled()):
        return matmul_fused_via_op(a, b, bias, layout, alpha, beta, c, activation, epilogue, operands, out_dtype,
                                   out, precision)
    # Fast path (host time per call is part of the speed at small sizes): a repeat of a checked call signature --
    # every tensor's dtype, shape, strides and device, the scalars' values, the options, the epilogue expression and
    # each operand's signature or value -- re-checks addresses and the current device, then launches.
    key = hit = None
    try:
        key = (a.dtype, a.shape, a.stride(), a.get_device(), b.dtype, b.shape, b.stride(), b.get_device(), layout,
               activation, out_dtype, precision,
               _sig(bias), _sig(c), alpha if alpha.__class__ is float else _tensor_meta(alpha),
               beta if beta is None or beta.__class__ is float else _tensor_meta(beta), _sig(out),
               torch.get_float32_matmul_precision() if a.dtype is torch.float32 else None, epilogue,
               None if operands is None else tuple(
                   (name, _tensor_meta(v) if isinstance(v, torch.Tensor) else (v.__class__, v))  # True == 1: the type too
                   for name, v in operands.items()))
        hit = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, unhashable options: the checked path says what is wrong
        key = hit = None
    if hit.__class__ is _UnalignedPlan and _plan.forced() is None:  # N % 8 != 0 (unaligned.py)
        y = hit.launch(a, b, _call_tensors(alpha, c, beta, bias, operands))
        if y is not None:
            return y
        hit = None
    if hit is not None and _plan.forced() is None:
        plan, dtype, shape, sources, aligns, device = hit
        a_ptr, b_ptr = a.data_ptr(), b.data_ptr()
        if not (a_ptr & 15 or b_ptr & 15) and current_device_index() == plan.dev:
            ptrs = []
            misaligned = False
            if sources:
                named = _call_tensors(alpha, c, beta, bias, operands)
                for name, al in zip(sources, aligns):
                    p = named[name].data_ptr()
                    misaligned |= p % al != 0
                    ptrs.append(p)
            if not misaligned and (out is None or out.data_ptr() & 15 == 0):
                if out is None:
                    out = torch.empty(shape, dtype=dtype, device=device)
                plan.run(a_ptr, b_ptr, out.data_ptr(), *ptrs)
                return out
    return matmul_fused_forward(a, b, bias, layout, alpha, beta, c, activation, epilogue, operands, out_dtype, out,
                                precision, key=key)


def _needs_grad(a, b, bias, c) -> bool:
    """Whether any differentiable input requires grad (nn.Parameter included); False for non-tensors."""
    try:
        return (a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)
                or (c is not None and c.requires_grad))
    except AttributeError:
        return False


def matmul_fused_forward(a, b, bias, layout, alpha, beta, c, activation, epilogue, operands, out_dtype, out,
                         precision, save_pre: bool = False, key=None):
    """Every check, then the launch. Returns out, or (out, saved) when the epilogue saves (save_pre: the
    pre-activation, for the backward). Records the plan under `key` for the fast path."""
    c0, operands0 = c, operands
    c, operands = _fit_aux(a, b, c, layout, epilogue, operands)
    if c is not c0 or (operands0 and any(v is not operands0[name] for name, v in operands.items())):
        key = None  # an operand copied (fit_rows): the fast path would pass the call's own
    p = check_matmul_fused_args(a, b, bias, c, alpha, beta, activation, epilogue, operands, layout, out_dtype, out,
                                precision, save_pre=save_pre)
    m, n, k, lead = p["m"], p["n"], p["k"], p["lead"]
    n_out = p["n_out"]
    shape = (*lead, n_out)  # n_out: N / 2 for a paired epilogue (gate, up)
    out_dtype = p["out_dtype"]
    # N % 8 != 0: outputs are written as rows of `width` columns (a view [..., :N] is returned; see unaligned.py)
    width = _out_width(n, n_out)
    target = None
    if out is not None and width != n_out:
        _ua.warn_out_copy("matmul_fused", n_out, width)
        target, out = out, None
    if out is None:
        out = _ua.padded_empty(lead, n_out, width, out_dtype, a.device)
    saved = None if p["saved_dtype"] is None else _ua.padded_empty(lead, n_out, width, p["saved_dtype"], a.device)
    if target is not None:
        key = None  # no fast-path plan: out is filled by a copy
    ys = _forward_outputs(a, b, layout, p, out, saved, width, key, (alpha, c, beta, bias, operands))
    if target is not None:
        target.copy_(out)
        ys = target if saved is None else (target, saved)
    return ys


class _UnalignedPlan:
    """The fast path's entry for an N % 8 != 0 call: the plan, and what each call does as the checked path did --
    the [N] operands padded to `width`, the output allocated as rows of `width` (unaligned.py)."""

    __slots__ = ("plan", "dtype", "lead", "n_out", "width", "sources", "aligns", "pads")

    def __init__(self, plan, dtype, lead, n_out, width, sources, aligns, pads):
        self.plan, self.dtype, self.lead, self.n_out, self.width = plan, dtype, tuple(lead), n_out, width
        self.sources, self.aligns, self.pads = sources, aligns, pads

    def launch(self, a, b, named):
        """-> out, or None where an address or the device does not suit the plan (the checked path then)."""
        plan = self.plan
        a_ptr, b_ptr = a.data_ptr(), b.data_ptr()
        if a_ptr & 15 or b_ptr & 15 or current_device_index() != plan.dev:
            return None
        keep, ptrs = [], []
        for name, al, pad in zip(self.sources, self.aligns, self.pads):
            t = named[name]
            if pad:
                t = _ua.pad_vec(t, self.n_out, self.width)
                keep.append(t)
            p = t.data_ptr()
            if p % al:
                return None
            ptrs.append(p)
        out = _ua.padded_empty(self.lead, self.n_out, self.width, self.dtype, a.device)
        plan.run(a_ptr, b_ptr, out.data_ptr(), *ptrs)
        return out


def _out_width(n: int, n_out: int) -> int:
    """The outputs' row stride: n_out, or for an N the kernels do not mask exactly (N % 8 != 0) n_out rounded up
    to 16 (unaligned.py)."""
    return n_out if n % 8 == 0 else _ua.round_up(n_out)


def _fit_aux(a, b, c, layout, epilogue, operands):
    """For an N % 8 != 0: c and an expression's aux operands ([M, N]) with rows reaching the output width (copied
    into a padded-stride buffer when they do not, with a one-time warning; unaligned.fit_rows)."""
    try:
        n = b.shape[0] if layout == "nk" else b.shape[1]
        k = a.shape[-1]
        m = a.numel() // k if k else 0
    except (AttributeError, IndexError, TypeError):
        return c, operands
    if not isinstance(n, int) or n % 8 == 0:
        return c, operands
    expr = epilogue
    if isinstance(epilogue, str):
        try:
            _act, expr = keyword_form("matmul_fused", None, epilogue, None)
        except (ValueError, TypeError):
            expr = None
    if isinstance(expr, _epi.Node):
        paired = _epi.is_paired(expr)
        n_out = n // 2 if paired else n
        return c, _ua.fit_aux_operands("matmul_fused", expr, operands, n_out, _out_width(n, n_out))
    if isinstance(c, torch.Tensor) and c.dim() >= 2 and c.shape[-1] == n and m and c.numel() == m * n and \
            not (c.dim() == 2 and c.shape[0] == 1 and m != 1):  # [1, N] is the [N] vector form
        c2 = c.reshape(m, n)
        if not _ua.rows_reach(c2, _out_width(n, n)):
            c = _ua.fit_rows("matmul_fused", c2, n, _out_width(n, n))
    return c, operands


def _forward_outputs(a, b, layout, p, out, saved, width, key, call_args):
    """matmul_fused_forward after the checks, with its outputs allocated (rows of `width` columns); call_args:
    the call's (alpha, c, beta, bias, operands), for the fast-path record."""
    alpha, c, beta, bias, operands = call_args
    m, n, k = p["m"], p["n"], p["k"]
    out_dtype = p["out_dtype"]
    shape = tuple(out.shape)
    es = p["a2"].element_size()
    kp = _ua.round_up(k, 16 // es)
    if kp != k and not (p["precision"] == "ieee" and p["in_kind"] != "f32x3"):  # (said on the CPU too)
        _ua.warn_pad_k("matmul_fused", "A and B", k, kp, p["a2"].dtype)
    if p["arch"] == "cpu":  # no kernel: the torch reference, float64 inside, rounded once
        b_nk = b if layout == "nk" else b.t()
        write_outputs(gemm_reference(p["a2"], b_nk, p["expr"], p["operands"]), p["n_out"], out, saved)
        return out if saved is None else (out, saved)
    if p["precision"] == "ieee" and p["in_kind"] != "f32x3":
        warn_once("ieee", f"matmul_fused: float32 inputs at precision 'ieee' (torch's 'highest') on {p['arch']} run "
                          "torch.mm in fp32 and the epilogue as separate torch ops: the exact-fp32 fused kernel is "
                          "sm_90a's. Pass precision='tf32' (or torch.set_float32_matmul_precision('high')) for the "
                          "fused TF32 kernel.")
        b_nk = b if layout == "nk" else b.t()
        write_outputs(gemm_reference(p["a2"], b_nk, p["expr"], p["operands"], compute_dtype=torch.float32), p["n_out"],
                      out, saved)
        return out if saved is None else (out, saved)
    if kp != k:  # rows of K are not 16-byte vectors: A and B copied into zero-padded [.., kp] buffers
        a2 = _ua.pad_k("matmul_fused", p["a2"], kp)
        b_nk, b_layout, k = _ua.pad_k("matmul_fused", b if layout == "nk" else b.t(), kp), "nk", kp
        key = None
    else:
        a2 = _operand_2d(p["a2"], "A", p["arch"])
        b_nk, b_layout = p["b_nk"], "nk"
    if b_nk is None and (n * es) % 16:  # layout 'kn' with rows of N not 16-byte vectors: transposed
        warn_once("kn-n", f"matmul_fused: layout='kn' with N={n} ([K, N] rows not a multiple of 16 bytes) copies B "
                          "to [N, K] on every call; pass the weight as [N, K] (layout='nk') to avoid the copy")
        b_nk = b.t().contiguous()
    if b_nk is None:  # layout 'kn': read in place where a kernel takes it (sm_90a, 16-bit), else transposed
        if p["arch"] == "sm_90a" and p["in_kind"] in ("bf16", "fp16"):
            b_nk, b_layout = _operand_2d(b.t(), "B", p["arch"], n_major=True), "kn"
        else:
            warn_once("kn", f"matmul_fused: layout='kn' copies B to [N, K] on every call for {a.dtype} on "
                            f"{p['arch']} (the MN-major B kernels are sm_90a bf16 / fp16); pass the weight as [N, K] "
                            "(layout='nk') to avoid the copy")
            b_nk = b.t().contiguous()
    if b_layout == "nk":
        b_nk = _operand_2d(b_nk, "B", p["arch"])
    outputs = [out] if saved is None else [out, saved]
    pointers, aligns = expression_pointers(p["expr"], p["operands"], saved is not None)
    keep = _ua.pad_col_values(p["expr"], p["operands"], p["values"], p["n_out"], width)  # noqa: F841 (alive)
    with device_guard(a.device):
        ldb = (b_nk.stride(1) if k > 1 else n) if b_layout == "kn" else (b_nk.stride(0) if n > 1 else k)
        plan = CallPlan(a.device.index, p["arch"], p["in_kind"], m, n, k, out_dtype, p["epi"], p["values"], pointers,
                        lda=a2.stride(0) if m > 1 else k, ldb=ldb, op="matmul_fused", b_layout=b_layout,
                        ld_out=width)
        plan.run(a2.data_ptr(), b_nk.data_ptr(), *(o.data_ptr() for o in outputs),
                 *(p["values"][f] for f in pointers[len(outputs):]))
    if (key is not None and saved is None and a2.data_ptr() == a.data_ptr() and b_nk.data_ptr() == b.data_ptr()
            and _plan.forced() is None):
        # The tensor operands in the order `pointers` lists them, by name; recorded only where each is the call's
        # own tensor (not a converted copy), so that the fast path passes what the checked path passed.
        sources = tuple(name for name, v in p["operands"].items() if isinstance(v, torch.Tensor))
        named = _call_tensors(alpha, c, beta, bias, operands)
        if all(isinstance(named.get(name), torch.Tensor) and named[name].data_ptr() == p["operands"][name].data_ptr()
               for name in sources):
            if width == p["n_out"]:
                _PLANS.remember(key, (plan, out_dtype, shape, sources, aligns, a.device))
            else:
                kinds = {name: o.kind for name, o in _epi.operands(p["expr"]).items()}
                pads = tuple(kinds.get(name) == "n_vec" and p["operands"][name].numel() > 1 for name in sources)
                _PLANS.remember(key, _UnalignedPlan(plan, out_dtype, p["lead"], p["n_out"], width, sources, aligns,
                                                    pads))
    return out if saved is None else (out, saved)


def _call_tensors(alpha, c, beta, bias, operands) -> dict:
    """A call's tensors by the names its epilogue's operands have (check_matmul_fused_args): an expression's
    `operands` (alpha, c, beta and bias must then keep their defaults), else alpha, c, beta and bias."""
    return operands if operands is not None else {"alpha": alpha, "c": c, "beta": beta, "bias": bias}


def _operand_2d(t: torch.Tensor, what: str, arch: str, n_major: bool = False) -> torch.Tensor:
    """t ([rows, K]) itself when its strides and address suit the kernel (unit stride along K; on sm_90a any
    16-byte multiple row stride, on AMD dense rows), else a contiguous copy with a one-time warning. n_major: t is
    the [N, K] view of a [K, N] B, read along N (unit stride along N, 16-byte multiple K stride)."""
    if n_major:
        kn = t.t()
        if (kn.stride(1) == 1 or kn.shape[1] == 1) and kn.data_ptr() % 16 == 0 and \
                (kn.shape[0] <= 1 or (kn.stride(0) * kn.element_size()) % 16 == 0):
            return t
        warn_once(f"copy-{what}", f"matmul_fused: {what} ([K, N]) with strides {tuple(kn.stride())} is copied to a "
                                  "contiguous tensor first: the kernel reads rows of 16-byte vectors along N")
        return kn.contiguous().t()
    rows, k = t.shape
    ok = (t.stride(1) == 1 or k == 1) and t.data_ptr() % 16 == 0
    if arch == "sm_90a":
        ok = ok and (rows <= 1 or (t.stride(0) * t.element_size()) % 16 == 0)
    else:
        ok = ok and (rows <= 1 or t.stride(0) == k)
    if ok:
        return t
    warn_once(f"copy-{what}", f"matmul_fused: {what} with strides {tuple(t.stride())} (address offset "
                              f"{t.data_ptr() % 16} mod 16) is copied to a contiguous tensor first: the kernel reads "
                              "rows of 16-byte vectors (unit stride along K, 16-byte aligned rows)")
    return t.contiguous()


# ---- matmul_fused: one op for autograd and torch.compile ----------------------------------------------------------
@torch.library.custom_op("fusedgemm::matmul_fused", mutates_args=())
def matmul_fused_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], c: Optional[torch.Tensor],
                    alpha: float, beta: float, alpha_t: Optional[torch.Tensor], beta_t: Optional[torch.Tensor],
                    activation: str, layout: str, out_dtype: torch.dtype, precision: str,
                    save_pre: bool) -> list[torch.Tensor]:
    """matmul_fused's keyword form; alpha_t / beta_t (1-element float32 tensors) replace alpha / beta when given.
    Returns [y] or, with save_pre and an activation, [y, pre-activation] (what the backward needs)."""
    ys = matmul_fused_forward(a, b, bias, layout, alpha if alpha_t is None else alpha_t,
                              beta if beta_t is None else beta_t, c, activation, None, None, out_dtype, None,
                              precision or None, save_pre=save_pre)
    return list(ys) if isinstance(ys, tuple) else [ys]


@matmul_fused_op.register_fake
def _matmul_fused_fake(a, b, bias, c, alpha, beta, alpha_t, beta_t, activation, layout, out_dtype, precision,
                       save_pre):
    n, kb = b.shape if layout == "nk" else (b.shape[1], b.shape[0])
    if b.dim() != 2 or a.shape[-1] != kb:
        raise ValueError(f"matmul_fused: A [..., K] and B ({layout}) must agree in K, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    width = _out_width(n, n)
    y = _ua.padded_empty(tuple(a.shape[:-1]), n, width, out_dtype, a.device)
    if save_pre and activation != "none":
        return [y, _ua.padded_empty(tuple(a.shape[:-1]), n, width, a.dtype, a.device)]
    return [y]


def _matmul_fused_setup(ctx, inputs, output):
    a, b, bias, c, alpha, beta, alpha_t, beta_t, activation, layout, _out_dtype, _precision, _save = inputs
    ctx.activation, ctx.layout, ctx.alpha, ctx.beta = activation, layout, alpha, beta
    ctx.c_shape = None if c is None else tuple(c.shape)
    ctx.c_dtype = None if c is None else c.dtype
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.bias_shape = None if bias is None else tuple(bias.shape)
    pre = output[1] if len(output) > 1 else None
    if pre is not None:
        ctx.mark_non_differentiable(pre)  # the saved pre-activation: no gradient flows into it
    ctx.set_materialize_grads(False)  # so autograd does not fill a zero gradient for it (an M x N pass)
    ctx.save_for_backward(a, b, pre, alpha_t, beta_t)


def _matmul_fused_backward(ctx, grads):
    a, b, pre, alpha_t, beta_t = ctx.saved_tensors
    if grads[0] is None:  # grads are not materialised: y took no part in the loss
        return (None,) * 13
    alpha = ctx.alpha if alpha_t is None else alpha_t
    beta = ctx.beta if beta_t is None else beta_t
    da, db, dbias, dc = matmul_fused_grads(ctx, a, b, pre, alpha, beta, grads[0])
    return da, db, dbias, dc, None, None, None, None, None, None, None, None, None


matmul_fused_op.register_autograd(_matmul_fused_backward, setup_context=_matmul_fused_setup)


@torch.library.custom_op("fusedgemm::matmul_fused_expr", mutates_args=())
def matmul_fused_expr_op(a: torch.Tensor, b: torch.Tensor, epilogue: str, tensor_names: str,
                         tensors: list[torch.Tensor], scalar_names: str, scalar_values: list[float], layout: str,
                         out_dtype: torch.dtype, precision: str) -> list[torch.Tensor]:
    """matmul_fused with an epilogue expression (canonical text; operands as in gemm_a8_expr). Not differentiable."""
    operands = join_operands(tensor_names, tensors, scalar_names, scalar_values)
    ys = matmul_fused_forward(a, b, None, layout, 1.0, 0.0, None, "none", _epi.parse(epilogue), operands, out_dtype,
                              None, precision or None)
    return list(ys) if isinstance(ys, tuple) else [ys]


@matmul_fused_expr_op.register_fake
def _matmul_fused_expr_fake(a, b, epilogue, tensor_names, tensors, scalar_names, scalar_values, layout, out_dtype,
                            precision):
    n = b.shape[0] if layout == "nk" else b.shape[1]
    expr = _epi.parse(epilogue)
    n_out = n // 2 if _epi.is_paired(expr) else n  # a paired epilogue (gate, up) writes N / 2 columns
    save = _epi.saved_node(expr)
    lead, width = tuple(a.shape[:-1]), _out_width(n, n_out)
    out = _ua.padded_empty(lead, n_out, width, out_dtype, a.device)
    if save is None:
        return [out]
    return [out, _ua.padded_empty(lead, n_out, width, _epi.TORCH_DTYPES[save.attrs[0]], a.device)]


def matmul_fused_via_op(a, b, bias, layout, alpha, beta, c, activation, epilogue, operands, out_dtype, out,
                        precision):
    """matmul_fused through the registered ops: under torch.compile, and eagerly when a gradient is needed."""
    activation, epilogue = keyword_form("matmul_fused", activation, epilogue, bias)
    if beta is None:
        beta = 0.0 if c is None else 1.0
    if out_dtype is None:
        out_dtype = out.dtype if isinstance(out, torch.Tensor) else a.dtype
    if isinstance(epilogue, _epi.Node):
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in (a, b, *(operands or {}).values())) \
                and torch.is_grad_enabled():
            raise NotImplementedError("matmul_fused: epilogue expressions are not differentiable yet; use the "
                                      "keyword form (bias, c, alpha, beta, activation) or torch.no_grad()")
        tensors, scalars = split_operands(operands)
        ys = torch.ops.fusedgemm.matmul_fused_expr(a, b, str(epilogue), ",".join(tensors), list(tensors.values()),
                                                   ",".join(scalars), list(scalars.values()), layout, out_dtype,
                                                   precision or "")
    else:
        for v, name in ((alpha, "alpha"), (beta, "beta")):
            if isinstance(v, torch.Tensor) and v.requires_grad and torch.is_grad_enabled():
                raise NotImplementedError(f"matmul_fused: {name} is not differentiable (a, b, bias and c are)")
            number_or_scalar_tensor(v, name)  # the op takes floats: say what came before float() does
        alpha_t = alpha if isinstance(alpha, torch.Tensor) else None
        beta_t = beta if isinstance(beta, torch.Tensor) else None
        save_pre = torch.is_grad_enabled() and activation != "none" and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in (a, b, bias, c))
        ys = torch.ops.fusedgemm.matmul_fused(a, b, bias, c, 1.0 if alpha_t is not None else float(alpha),
                                              0.0 if beta_t is not None else float(beta), alpha_t, beta_t,
                                              activation, layout, out_dtype, precision or "", save_pre)
    if out is not None:
        out.copy_(ys[0])
        ys = [out, *ys[1:]]
    if isinstance(epilogue, _epi.Node):
        return ys[0] if len(ys) == 1 else (ys[0], ys[1])
    return ys[0]


__all__ = ["matmul_fused", "matmul_fused_forward"]
