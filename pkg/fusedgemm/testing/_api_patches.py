"""Where the public ops meet the device (arch of a tensor, device index, stream, SM count): what `emulate` points
at the emulated device so CPU tensors reach the kernels. Best effort over internal names: a name that is not
there is skipped (see docs/emulator.md, "End to end")."""
from __future__ import annotations

import contextlib
import importlib

CUS = {"gfx942": 304, "gfx950": 256}  # compute units of MI300X / MI355X


def _mod(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def patches(arch: str) -> list[tuple[object, str, object]]:
    out = []
    # the one hook the package consults wherever it decides "CPU tensor -> the torch reference" (checks.arch_of,
    # quantize_rows, swiglu, bmm_tiny, the fusion pass): inside the context CPU tensors are the emulated device's
    device = _mod("fusedgemm.runtime.device")
    out.append((device, "_EMULATED_ARCH", arch))
    for name in ("fusedgemm.plan", "fusedgemm.runtime.launch", "fusedgemm.quant", "fusedgemm.tiny_bmm"):
        m = _mod(name)
        if m is not None:
            out.append((m, "device_arch", lambda _i: arch))
    tiny = _mod("fusedgemm.tiny_bmm")
    if tiny is not None:
        # (CUs, LDS, threads, registers) per compute unit of the emulated device
        limits = (CUS[arch], 64 * 1024 if arch == "gfx942" else 160 * 1024, 2048, 512 * 64 * 4)
        out.append((tiny, "_device_limits", lambda _i=None: limits))
    plan = _mod("fusedgemm.plan")
    if plan is not None:
        out.append((plan, "sm_count", lambda _i=None: CUS[arch]))
        out.append((plan, "gpu_name", lambda _i=None: f"emulated {arch}"))
    for name in ("fusedgemm.plan.call", "fusedgemm.call_plan", "fusedgemm.quant", "fusedgemm.tiny_bmm",
                 "fusedgemm.gemm_a8", "fusedgemm.matmul", "fusedgemm.swiglu", "fusedgemm.plan.grouped_call",
                 "fusedgemm.grouped", "fusedgemm.out_groups"):
        m = _mod(name)
        if m is None:
            continue
        out.append((m, "current_raw_stream", lambda _i=None: 0))
        out.append((m, "current_device_index", lambda: None))
        out.append((m, "device_guard", lambda _d: contextlib.nullcontext()))
    # launch caches: fresh inside the context (a kernel loaded there is bound to the emulated device), the old
    # ones back on exit; plans a call would leave on a weight are not left (gemm_a8._remember)
    # (matmul_fused's fast-path plans are keyed by device index, -1 for every CPU tensor: without a fresh cache a
    # plan made for one emulated arch would serve another context, or a CPU call after the context)
    for name, attrs in (("fusedgemm.plan.call", ("_KERNELS",)), ("fusedgemm.tiny_bmm", ("_FAST", "_LAUNCHES")),
                        ("fusedgemm.quant", ("_LAUNCHES",)), ("fusedgemm.matmul", ("_PLANS",)),
                        ("fusedgemm.grouped", ("_PLANS",))):
        m = _mod(name)
        for attr in attrs:
            old = getattr(m, attr, None) if m is not None else None
            if isinstance(old, dict):
                out.append((m, attr, type(old)(old.limit) if hasattr(old, "limit") else {}))
    for name in ("fusedgemm.gemm_a8", "fusedgemm.matmul"):
        m = _mod(name)
        if m is not None and hasattr(m, "_remember"):
            out.append((m, "_remember", lambda *a, **k: None))
    return out
