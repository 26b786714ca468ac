"""matmul_fused: y = act(alpha * (A @ B) + beta * c + bias) -- or any epilogue expression -- in one kernel, for
bf16 / fp16 / fp32 (TF32) inputs.

    y = fg.matmul_fused(x, w, bias=b, activation="silu")                  # w: nn.Linear weight [N, K]
    y = fg.matmul_fused(a, b_kn, layout="kn", alpha=2.0, beta=0.5, c=c, activation="gelu")
    y = fg.matmul_fused(x, w, epilogue=E.parse("relu(acc) + aux(r)"), operands={"r": r})

API (this file) -> checks.check_matmul_fused_args -> plan (per arch) -> runtime/gemm_a8_spec (the same kernel
family as gemm_a8: wgmma + TMA on sm_90a, MFMA on gfx942 / gfx950) -> code object (JIT) -> call_plan launch.
Differentiable in A, B, bias and c (autograd through the torch.library op, ops.py); torch.compile traces the op.
"""
from __future__ import annotations

import warnings

import torch

from . import plan as _plan
from .call_plan import CallPlan, expression_pointers
from .checks import check_matmul_fused_args
from .runtime.device import current_device_index, device_guard

_WARNED: set[str] = set()
_PLANS: dict[tuple, tuple] = {}  # call signature -> (CallPlan, out dtype, out shape, operand names, aligns, device)
_PLANS_MAX = 256


def warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, stacklevel=3)


def _tensor_meta(t):
    """A tensor's (dtype, shape, strides, device) -- parameters included -- else the value itself."""
    return None if t is None else (t.dtype, t.shape, t.stride(), t.get_device()) if isinstance(t, torch.Tensor) \
        else t


def matmul_fused(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *, layout: str = "nk",
                 alpha=1.0, beta=0.0, c: torch.Tensor | None = None, activation: str = "none", epilogue=None,
                 operands: dict | None = None, out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None,
                 precision: str | None = None):
    """y = act(alpha * (a @ B) + beta * c + bias), one kernel, fp32 inside, rounded once to out_dtype.

    a: [..., K] bf16 / fp16 / fp32 on the GPU (leading dims flattened like F.linear; any strides a TMA
       descriptor can express: unit stride along K, 16-byte aligned rows -- others are copied once, with a
       warning).
    b: [N, K] (layout="nk", an nn.Linear weight) or [K, N] (layout="kn"), a's dtype. N % 8 == 0; K * element
       size % 16 == 0.
    bias: [N] (bf16 / fp16 / fp32). c: [M, N] (or a's leading dims + [N]), [N] / [1, N] or [M, 1], may be `out`
       itself (in place: y = act(alpha AB + beta y)). alpha, beta: numbers or 1-element float32 device tensors
       (graph replays may change them). beta = 0 (a number) ignores c, as torch.addmm does.
    activation: none, relu, silu, sigmoid, gelu (tanh approximation), gelu_erf (exact), tanh, exp, neg, abs,
       square, sqrt, rsqrt. epilogue: any fusedgemm.epilogue expression instead (acc = a @ B; operands by name;
       bias / c / alpha / beta / activation then keep their defaults); an expression with save(x, dtype)
       returns (out, saved). A paired expression (gate, up; b gate/up-interleaved: fusedgemm.swiglu) writes
       [..., N / 2].
    out_dtype: bf16 / fp16 / fp32, default out's dtype, else a's. precision (fp32 inputs): 'tf32' or 'ieee';
       None follows torch.get_float32_matmul_precision() ('highest' = ieee: on sm_90a a fused kernel of three
       TF32 products of split operands, about fp32's accuracy; elsewhere torch.mm plus a separate epilogue, with
       a warning).
    Runs on torch.cuda.current_stream(); no host sync; CUDA-graph capturable. Kernels compile on first use
    (cached on disk).
    """
    if torch.compiler.is_compiling() or (_needs_grad(a, b, bias, c) and torch.is_grad_enabled()):
        from .ops import matmul_fused_via_op

        return matmul_fused_via_op(a, b, bias, layout, alpha, beta, c, activation, epilogue, operands, out_dtype,
                                   out, precision)
    # Fast path (host time per call is part of the speed at small sizes): a repeat of a checked call signature --
    # every tensor's dtype, shape, strides and device, the scalars' values, the options, the epilogue expression and
    # each operand's signature or value -- re-checks addresses and the current device, then launches.
    key = hit = None
    try:
        key = (a.dtype, a.shape, a.stride(), a.get_device(), b.dtype, b.shape, b.stride(), b.get_device(), layout,
               activation, out_dtype, precision,
               None if bias is None else (bias.dtype, bias.shape, bias.stride(), bias.get_device()),
               None if c is None else (c.dtype, c.shape, c.stride(), c.get_device()),
               alpha if alpha.__class__ is float else _tensor_meta(alpha),
               beta if beta.__class__ is float else _tensor_meta(beta),
               None if out is None else (out.dtype, out.shape, out.stride(), out.get_device()),
               torch.get_float32_matmul_precision() if a.dtype is torch.float32 else None, epilogue,
               None if operands is None else tuple(
                   (name, _tensor_meta(v) if isinstance(v, torch.Tensor) else (v.__class__, v))  # True == 1: the type too
                   for name, v in operands.items()))
        hit = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, unhashable options: the checked path says what is wrong
        key = hit = None
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
    p = check_matmul_fused_args(a, b, bias, c, alpha, beta, activation, epilogue, operands, layout, out_dtype, out,
                                precision, save_pre=save_pre)
    m, n, k, lead = p["m"], p["n"], p["k"], p["lead"]
    shape = (*lead, p["n_out"])  # n_out: N / 2 for a paired epilogue (gate, up)
    out_dtype = p["out_dtype"]
    if out is None:
        out = torch.empty(shape, dtype=out_dtype, device=a.device)
    saved = None if p["saved_dtype"] is None else torch.empty(shape, dtype=p["saved_dtype"], device=a.device)
    if p["precision"] == "ieee" and p["in_kind"] != "f32x3":
        warn_once("ieee", f"matmul_fused: float32 inputs at precision 'ieee' (torch's 'highest') on {p['arch']} run "
                          "torch.mm in fp32 and the epilogue as separate torch ops: the exact-fp32 fused kernel is "
                          "sm_90a's. Pass precision='tf32' (or torch.set_float32_matmul_precision('high')) for the "
                          "fused TF32 kernel.")
        _run_unfused_fp32(p, a, b, layout, out, saved)
        return out if saved is None else (out, saved)
    a2 = _operand_2d(p["a2"], "A", p["arch"])
    b_nk, b_layout = p["b_nk"], "nk"
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
    with device_guard(a.device):
        ldb = (b_nk.stride(1) if k > 1 else n) if b_layout == "kn" else (b_nk.stride(0) if n > 1 else k)
        plan = CallPlan(a.device.index, p["arch"], p["in_kind"], m, n, k, out_dtype, p["epi"], p["values"], pointers,
                        lda=a2.stride(0) if m > 1 else k, ldb=ldb, op="matmul_fused", b_layout=b_layout)
        plan.run(a2.data_ptr(), b_nk.data_ptr(), *(o.data_ptr() for o in outputs),
                 *(p["values"][f] for f in pointers[len(outputs):]))
    if (key is not None and saved is None and a2.data_ptr() == a.data_ptr() and b_nk.data_ptr() == b.data_ptr()
            and _plan.forced() is None):
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.pop(next(iter(_PLANS)))
        # The tensor operands in the order `pointers` lists them, by name; recorded only where each is the call's
        # own tensor (not a converted copy), so that the fast path passes what the checked path passed.
        sources = tuple(name for name, v in p["operands"].items() if isinstance(v, torch.Tensor))
        named = _call_tensors(alpha, c, beta, bias, operands)
        if all(isinstance(named.get(name), torch.Tensor) and named[name].data_ptr() == p["operands"][name].data_ptr()
               for name in sources):
            _PLANS[key] = (plan, out_dtype, shape, sources, aligns, a.device)
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


def _run_unfused_fp32(p: dict, a, b, layout, out, saved) -> None:
    """precision 'ieee': torch.mm in exact fp32, then the epilogue as torch ops in fp32."""
    from .epilogue.evaluate import evaluate_outputs

    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        bt = b.t() if layout == "nk" else b
        acc = p["a2"].float() @ bt.float()
    finally:
        torch.set_float32_matmul_precision(prev)
    y, pre = evaluate_outputs(p["expr"], acc, p["operands"], compute_dtype=torch.float32, device=acc.device)
    out.view(-1, p["n_out"]).copy_(y)
    if saved is not None:
        saved.view(-1, p["n_out"]).copy_(pre)


__all__ = ["matmul_fused", "matmul_fused_forward"]
