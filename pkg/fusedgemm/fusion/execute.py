"""Running a fused region: one matmul_fused (or gemm_a8, fg.swiglu) kernel when the inputs allow it and it is not slower, else the
region's own torch calls (program.execute) -- the answer never depends on which. (The execution of a region,
as the fusion pass calls it; fusedgemm.runtime is the kernels' build-and-launch layer.)

    run_region(program_text, tensors, ints) -> [outputs]

Per input signature (every tensor's shape, strides, dtype, device; the ints) the lowering (lowering.lower) runs
once and is cached, with its refusal if any. Whether to use the kernel is decided per (GPU, program, GEMM shape,
M rounded up to a power of two): FUSEDGEMM_FUSION=auto (default) times both ways once, the first time such a call
runs outside graph capture, and keeps the faster (persisted in $FUSEDGEMM_CACHE_DIR/fusion_decisions_v2.json, so a
later process does not measure again); `always` / `never` skip the measurement. Until a decision exists (a call
first seen inside CUDA-graph capture), the region runs unfused: never slower than eager.
"""
from __future__ import annotations

import json
import logging
import math
import os
import statistics
import threading
import time

import torch

from ..epilogue import TORCH_DTYPES, saved_node
from ..epilogue.evaluate import evaluate_outputs
from ..matmul import matmul_fused
from ..runtime.device import emulated_arch
from ..swiglu import InterleavedGateUp, glu_expression, interleave_rows, swiglu
from ..util import cached_on
from .lowering import glu_inputs, lower
from .program import Lowered, Refused, execute, loads
from .program_a8 import run_kernel_a8, run_oracle_a8

log = logging.getLogger("fusedgemm.fusion")

_LOWERED: dict = {}      # (signature, rounding) -> Lowered | Refused
_LOWERED_MAX = 4096
_CHOSEN: dict = {}       # (signature, rounding) -> fused? (the decision of its key, looked up once)
_DECISIONS: dict | None = None   # "gpu|program|m-bucket|shapes" -> {"fused": bool, "us": [fused, unfused]}
_LOCK = threading.Lock()
# program text -> {"kernel": calls, "unfused": calls, "why": last reason for unfused}: what fg.fuse's report shows
STATS: dict = {}
# CPU mode for tests: "torch" runs the region's torch calls; "oracle" runs the lowered epilogue in float64 (the
# IR evaluator) whenever lowering succeeds -- the CPU check that a lowering means what the torch calls mean.
cpu_mode = "torch"


def _mode() -> str:
    mode = os.environ.get("FUSEDGEMM_FUSION", "auto")
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"FUSEDGEMM_FUSION must be auto, always or never, got {mode!r}")
    return mode


def _note(text: str, kind: str, why: str = "") -> None:
    s = STATS.setdefault(text, {"kernel": 0, "unfused": 0, "why": ""})
    s[kind] += 1
    if why:
        if why != s["why"]:
            log.info("fused region runs unfused: %s", why)
        s["why"] = why


def _signature(text, tensors, ints) -> tuple:
    return (text, tuple((t.shape, t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else t
                        for t in tensors), tuple(ints))


def lowered_for(text: str, tensors, ints, rounding: str = "fp32", key=None):
    """The cached Lowered (or Refused) of this program for inputs like these (key: their signature, if known)."""
    key = key or (_signature(text, tensors, ints), rounding)
    hit = _LOWERED.get(key)
    if hit is None:
        try:
            hit = lower(loads(text), tensors, ints, rounding)
        except Refused as exc:
            hit = exc
        if len(_LOWERED) >= _LOWERED_MAX:
            _LOWERED.clear()
            _CHOSEN.clear()
        _LOWERED[key] = hit
    return hit


def _needs_grad(tensors) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def run_region(text: str, tensors, ints=(), rounding: str = "fp32") -> list:
    """The region's outputs for these inputs (see the module docstring)."""
    tensors = list(tensors)
    ints = list(ints)
    first = tensors[0] if tensors and isinstance(tensors[0], torch.Tensor) else None
    if first is None or _needs_grad(tensors):
        _note(text, "unfused", "needs grad (the fused kernels' autograd covers matmul_fused's own forms)"
              if first is not None else "no tensor inputs")
        return execute(loads(text), tensors, ints)
    if not first.is_cuda and emulated_arch() is None:  # (inside fusedgemm.testing.emulate: the kernels)
        if cpu_mode == "oracle":
            lw = lowered_for(text, tensors, ints, rounding)
            if isinstance(lw, Lowered):
                _note(text, "kernel")
                return _run_oracle(lw, tensors)
            _note(text, "unfused", str(lw))
        else:
            _note(text, "unfused", "CPU tensors")
        return execute(loads(text), tensors, ints)
    mode = _mode()
    if mode == "auto" and not first.is_cuda:  # emulated: nothing to time (the emulator models no speed)
        mode = "always"
    key = (_signature(text, tensors, ints), rounding)
    lw = None if mode == "never" else lowered_for(text, tensors, ints, rounding, key)
    if not isinstance(lw, Lowered):
        _note(text, "unfused", "FUSEDGEMM_FUSION=never" if lw is None else str(lw))
        return execute(loads(text), tensors, ints)
    if mode == "auto":
        fused = _CHOSEN.get(key)
        if fused is None:
            fused = _decide(text, lw, tensors, ints)
            if fused is not None:
                _CHOSEN[key] = fused
        if not fused:
            _note(text, "unfused", "measured slower than unfused for this shape" if fused is not None
                  else "not measured yet (first seen inside graph capture or compilation)")
            return execute(loads(text), tensors, ints)
    try:
        out = _run_kernel(lw, tensors)
    except (ValueError, TypeError) as exc:  # a shape or stride the kernels refuse: remembered, then unfused
        _LOWERED[key] = Refused(f"matmul_fused: {exc}")
        _note(text, "unfused", f"matmul_fused: {exc}")
        return execute(loads(text), tensors, ints)
    _note(text, "kernel")
    return out


def _operand_values(lw: Lowered, tensors) -> dict:
    m, n = math.prod(lw.out_shape[:-1]), lw.out_shape[-1]
    vals = {}
    for name, (j, kind) in lw.operands.items():
        t = tensors[j]
        if kind == "scalar":
            vals[name] = t.reshape(1) if t.dtype == torch.float32 else t.reshape(1).float()
        elif kind == "aux":
            vals[name] = t.reshape(m, n)
        else:
            vals[name] = t.reshape(-1)
    return vals


def _glu_operands(lw: Lowered, args) -> tuple:
    """(the interleaved [2I, K] InterleavedGateUp, the bias [2I] in fg.swiglu's gate-half-first order or None) of
    a gated GEMM's args. Cached on the weight tensor the model holds -- w_gate of a pair, the merged parameter
    itself of a merged one (never a slice view, which would be a new tensor each call) -- freed with it, and
    remade when a weight or bias changes in place (its _version moves) or is another tensor: never stale.
    Inference tensors (no version counter) get a fresh copy per call."""
    weights = args[1:]
    if lw.glu_form == "pair":
        wg, bg, wu, bu = (None if t is None else t.detach() for t in weights)
        owner, attr = weights[0], "_fusedgemm_gated_pair"
        gate, up = (wg, bg), (wu, bu)
    else:
        w, b = (None if t is None else t.detach() for t in weights)
        owner, attr = weights[0], "_fusedgemm_merged_glu"
        half = w.shape[0] // 2
        first, second = (w[:half], None if b is None else b[:half]), (w[half:], None if b is None else b[half:])
        # the activation on the second half (up_gate): its rows are the gate
        gate, up = (first, second) if lw.glu_form == "gate_up" else (second, first)

    def make():
        return (InterleavedGateUp(interleave_rows(gate[0], up[0])),
                None if gate[1] is None else torch.cat((gate[1], up[1])))

    if any(t is not None and t.is_inference() for t in weights):  # no version counter: an update is unseen
        with torch.no_grad():
            return make()
    key = (lw.glu_form, *(None if t is None else (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t._version)
                          for t in weights))
    return cached_on(owner, attr, key, make)


def _run_kernel(lw: Lowered, tensors) -> list:
    if lw.a8 is not None:  # an 8-bit GEMM: one gemm_a8 call (program_a8.py)
        return run_kernel_a8(lw, tensors, _operand_values)
    if lw.glu:

        args = glu_inputs(lw, tensors)
        w, bias = _glu_operands(lw, args)
        return [swiglu(args[0], w, bias, activation=lw.glu).reshape(lw.out_shape)]
    a, b = tensors[lw.a], tensors[lw.b]
    if lw.transpose_b:
        b = b.t()
    res = matmul_fused(a, b, layout=lw.layout, epilogue=lw.expr, operands=_operand_values(lw, tensors),
                       out_dtype=lw.out_dtype)
    if lw.saved_shape is None:
        return [res.reshape(lw.out_shape)]
    out, saved = res
    return [out.reshape(lw.out_shape), saved.reshape(lw.saved_shape)]


def _run_oracle(lw: Lowered, tensors) -> list:
    """The lowered region evaluated in float64 by the epilogue IR's evaluator (CPU tests)."""
    if lw.a8 is not None:
        return run_oracle_a8(lw, tensors, _operand_values)
    if lw.glu:  # the interleaved weight and the paired epilogue, as the kernel gets them

        args = glu_inputs(lw, tensors)
        w, bias = _glu_operands(lw, args)
        acc = args[0].double().reshape(-1, args[0].shape[-1]) @ w.weight.double().t()
        n = w.weight.shape[0] // 2
        ops = {} if bias is None else {"bias_gate": bias[:n], "bias_up": bias[n:]}
        out, _ = evaluate_outputs(glu_expression(lw.glu, bias=bias is not None), acc, ops)
        return [out.to(lw.out_dtype).reshape(lw.out_shape)]
    a, b = tensors[lw.a], tensors[lw.b]
    if lw.transpose_b:
        b = b.t()
    b_kn = b.double().t() if lw.layout == "nk" else b.double()
    acc = a.double().reshape(-1, a.shape[-1]) @ b_kn
    out, saved = evaluate_outputs(lw.expr, acc, _operand_values(lw, tensors))
    outs = [out.to(lw.out_dtype).reshape(lw.out_shape)]
    if lw.saved_shape is not None:
        outs.append(saved.to(TORCH_DTYPES[saved_node(lw.expr).attrs[0]]).reshape(lw.saved_shape))
    return outs


# ---- measure once, keep the faster -----------------------------------------------------------------------------

# The decisions' file; its version goes up when the measurement changes, so that decisions measured the old way
# are measured again (v2: device time without the host's issue, _time_pair).
DECISIONS_FILE = "fusion_decisions_v2.json"


def _decisions_path():
    from ..runtime.build import cache_dir

    return cache_dir() / DECISIONS_FILE


def _load_decisions() -> dict:
    global _DECISIONS
    if _DECISIONS is None:
        try:
            _DECISIONS = json.loads(_decisions_path().read_text())
        except (OSError, ValueError):
            _DECISIONS = {}
    return _DECISIONS


def _save_decisions() -> None:
    path = _decisions_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_DECISIONS, indent=0, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache: decisions stay in this process
        log.warning("fusion decisions not saved to %s: %s", path, exc)


def decision_key(text: str, lw: Lowered, tensors) -> str:
    a, b = tensors[lw.a], tensors[lw.b]
    m = a.numel() // a.shape[-1] if a.shape[-1] else 0
    bucket = 1 << max(0, (m - 1).bit_length())
    dev = torch.cuda.get_device_name(a.device)
    return f"{dev}|{text}|M<={bucket}|{tuple(a.shape[-1:])}x{tuple(b.shape)}|{a.dtype}"


def _decide(text: str, lw: Lowered, tensors, ints, at_compile: bool = False) -> bool | None:
    """Whether the kernel is faster for this key: the persisted decision, else measured now; None when it
    cannot be measured now (inside graph capture or compilation)."""
    key = decision_key(text, lw, tensors)
    with _LOCK:
        d = _load_decisions().get(key)
    if d is not None:
        return d["fused"]
    if torch.cuda.is_current_stream_capturing() or (torch.compiler.is_compiling() and not at_compile):
        return None
    program = loads(text)
    t_fused, t_unfused = _time_pair(lambda: _run_kernel(lw, tensors), lambda: execute(program, tensors, ints))
    fused = t_fused <= FUSED_MARGIN * t_unfused
    log.info("fusion decision %s: fused %.1f us, unfused %.1f us -> %s", key, t_fused, t_unfused,
             "fused" if fused else "unfused")
    with _LOCK:
        _load_decisions()[key] = {"fused": fused, "us": [round(t_fused, 2), round(t_unfused, 2)]}
        _save_decisions()
    return fused


# The kernel must be this much faster to be chosen: a near tie is left unfused, so that measurement noise cannot
# make a region slower (a smaller margin kept regions the benchmark times slower: docs/perf-notes.md). Each timed
# run starts from a flushed L2, as the benchmark's do.
FUSED_MARGIN = 0.95
_FLUSH_BYTES = 256 << 20  # more than the last-level cache of any supported GPU (MI300X's Infinity Cache: 256 MB)


def _time_pair(f, g, reps: int = 15) -> tuple[float, float]:
    """-> the cost in microseconds per call of f and of g: each one's larger of its device time and its host issue
    time, which of the two bounds a stream of calls. Device time: median over runs measured alternately (clock and
    power drift hit both alike), each after an L2 flush and a spin kernel that outlasts the host's issue, so the
    events time the GPU's work only (as bench.common.Timer does; events that also time the host's issue leave
    regions unfused that the GPU runs faster fused). Host time: median issue time of one call, no sync.
    Two warm-up calls of each first (the kernel compiles in the first)."""
    for fn in (f, g, f, g):
        fn()
    torch.cuda.synchronize()
    host: tuple[list, list] = ([], [])
    for _ in range(3):
        for fn, hs in ((f, host[0]), (g, host[1])):
            t0 = time.perf_counter()
            fn()
            hs.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
    host_us = (statistics.median(host[0]), statistics.median(host[1]))
    spin_cycles = int((2 * max(host_us) + 20) * 2000)  # cycles at <= 2 GHz
    flush = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device=torch.cuda.current_device())
    times: tuple[list, list] = ([], [])
    for _ in range(reps):
        for fn, ts in ((f, times[0]), (g, times[1])):
            flush.fill_(1)
            torch.cuda._sleep(spin_cycles)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            ts.append(start.elapsed_time(end) * 1e3)
    del flush
    dev_us = (statistics.median(times[0]), statistics.median(times[1]))
    log.info("fusion timing: device %.1f / %.1f us, host %.1f / %.1f us (fused / unfused)", *dev_us, *host_us)
    return max(dev_us[0], host_us[0]), max(dev_us[1], host_us[1])


# ---- torch.library op: the call the fusion pass puts in a graph (backend.py) ------------------------------
@torch.library.custom_op("fusedgemm::fused_region", mutates_args=())
def fused_region_op(tensors: list[torch.Tensor], ints: list[int], program: str, rounding: str) -> list[torch.Tensor]:
    """A region cut by the fusion pass (fusedgemm.fusion): one fused GEMM where it is faster, else the region's
    own torch calls. Not differentiable (the pass leaves regions that need a gradient to Inductor)."""
    return [y.contiguous() for y in run_region(program, tensors, ints, rounding)]


@fused_region_op.register_fake
def _fused_region_fake(tensors, ints, program, rounding):
    return [torch.empty(y.shape, dtype=y.dtype, device=y.device) for y in execute(loads(program), tensors, ints)]
