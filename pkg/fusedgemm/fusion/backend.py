"""fg.backend: a torch.compile backend that rewrites fusable GEMM regions of the Dynamo graph into
`fusedgemm::fused_region` ops and hands the graph to Inductor, so the rest of the model is still compiled.

    model = torch.compile(model, backend=fg.backend)                      # Inductor compiles everything else
    model = torch.compile(model, backend=fg.make_backend(report=True))    # prints each graph's sites

Dynamo graphs are torch-level (F.linear, torch.addmm, F.silu, tensor methods) with example values on every node,
so the matcher (match.py) is the one fg.fuse uses; the op's fake implementation runs the region's torch calls on
fake tensors, so dynamic batch / sequence sizes compile once.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator

import torch

from . import execute, match
from .program import I
from .fuse import FusionReport, SiteReport

log = logging.getLogger("fusedgemm.fusion")
REPORTS: list = []  # one FusionReport per compiled graph, newest last (bounded)


def _flatten_int_tuples(site) -> None:
    """Dynamo passes a traced `x.size()[:-1] + (n,)` as one torch.Size value; the op takes ints. Each such input
    becomes one (node, index) entry per element (a getitem at rewrite), and the program's references follow."""
    flat, remap = [], {}
    for j, node in enumerate(site.ints):
        v = match._meta_value(node)
        if isinstance(v, (tuple, list, torch.Size)):
            remap[j] = [I(len(flat) + k) for k in range(len(v))]
            flat.extend((node, k) for k in range(len(v)))
        else:
            remap[j] = [I(len(flat))]
            flat.append(node)
    if len(flat) == len(site.ints):
        return
    steps = tuple(dataclasses.replace(st, args=tuple(x for r in st.args for x in (remap[r[1]] if r[0] == "i" else [r])))
                  for st in site.program.steps)
    site.program = dataclasses.replace(site.program, steps=steps)
    site.ints = flat


def _scalars_to_tensors(site) -> None:
    """A float input of the region (Dynamo makes `math.sqrt(2 / math.pi)` a SymFloat of a graph input under
    dynamic=True) becomes a one-element float32 tensor on the region's device: the epilogue's scalar operand."""
    device = next((v.device for v in map(match._meta_value, site.tensors) if isinstance(v, torch.Tensor)), None)
    for j, node in enumerate(site.tensors):
        v = match._meta_value(node)
        if isinstance(v, (float, int, torch.SymFloat, torch.SymInt)) and not isinstance(v, bool) and device:
            site.tensors[j] = ("scalar", node, device)


def _tensor_arg(graph, x):
    if isinstance(x, tuple):
        return graph.call_function(torch.scalar_tensor, (x[1],), {"dtype": torch.float32, "device": x[2]})
    return x


def _int_arg(graph, x):
    return graph.call_function(operator.getitem, x) if isinstance(x, tuple) else x


_8BIT = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8)  # an 8-bit GEMM's operands (program_a8.py)


def _example(v):
    """A random tensor like the example value v (sizes and strides at their hints: a W.t() view stays one)."""
    sizes, strides = [_hint(d) for d in v.shape], [_hint(d) for d in v.stride()]
    if 0 in strides:  # an expanded value: copying into it would write one element many times
        strides = torch.empty(sizes, device="meta").stride()
    t = torch.empty_strided(sizes, strides, dtype=v.dtype, device=v.device)
    if v.dtype == torch.int8:
        return t.copy_(torch.randint(-127, 128, sizes, dtype=torch.int8, device=v.device))
    return t.copy_(torch.randn(sizes, device=v.device) * (1.0 if v.dtype in _8BIT else 0.1))


def _value_ok(node, want_tensor: bool, devices: str = "cuda") -> str:
    v = match._meta_value(node)
    if want_tensor:
        if not isinstance(v, torch.Tensor):
            return f"{getattr(node, 'name', node)} is not a tensor"
        if v.dtype not in (torch.bfloat16, torch.float16, torch.float32, *_8BIT):
            return f"{node.name} is {v.dtype}"
        if v.device.type != "cuda" and devices != "any":
            return f"{node.name} is on {v.device}"
        return ""
    if isinstance(node, tuple):
        return ""  # converted at rewrite (_flatten_int_tuples, _scalars_to_tensors)
    return "" if isinstance(v, (int, torch.SymInt)) else f"reshape size {node} is not an int"


def _real_tensors():
    """Real tensors inside a backend call even if a fake mode is active (torch versions differ)."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
    except ImportError:
        return contextlib.nullcontext()
    return unset_fake_temporarily()


def _hint(x):
    return x.node.hint if isinstance(x, (torch.SymInt, torch.SymFloat)) else x


def _faster_fused(site, rounding: str) -> tuple[bool, str]:
    """At compile time, on random inputs shaped like the example values (sizes at their hints): whether the fused
    kernel beats the region's eager torch calls (execute._decide, cached and persisted). A region that loses is
    left to Inductor, which fuses its elementwise tail itself -- the rewrite must never make a graph slower."""
    mode = execute._mode()
    if mode != "auto":
        return mode == "always", f"FUSEDGEMM_FUSION={mode}"
    with _real_tensors():
        return _measure(site, rounding)


def _measure(site, rounding: str) -> tuple[bool, str]:
    tensors, ints = [], []
    for t in site.tensors:
        if isinstance(t, tuple):  # a float made a one-element tensor at rewrite
            tensors.append(torch.ones(1, device=t[2]))
            continue
        tensors.append(_example(match._meta_value(t)))
    for i in site.ints:
        v = match._meta_value(i[0] if isinstance(i, tuple) else i)
        ints.append(_hint(v[i[1]] if isinstance(i, tuple) else v))
    text = site.program.dumps()
    lw = execute.lowered_for(text, tensors, ints, rounding)
    if not isinstance(lw, execute.Lowered):
        return False, str(lw)
    with torch.no_grad():
        fused = bool(execute._decide(text, lw, tensors, ints, at_compile=True))
    return fused, "" if fused else "measured slower than the unfused ops at the example shape (left to Inductor)"


def rewrite_graph(gm: torch.fx.GraphModule, *, rounding: str = "fp32", devices: str = "cuda") -> FusionReport:
    """Rewrite gm's fusable regions in place; -> the report. devices="any" also rewrites CPU regions (tests)."""
    report = FusionReport()
    sites = match.find_regions(gm.graph, dict(gm.named_modules()))
    replaced: dict = {}
    for site in sites:
        reason = site.reason
        if site.program is not None:
            _flatten_int_tuples(site)
            _scalars_to_tensors(site)
            why = [_value_ok(t, True, devices) for t in site.tensors if not isinstance(t, (str, tuple))]
            why += [_value_ok(i, False) for i in site.ints]
            why = [w for w in why if w]
            reason = "; ".join(why)
        ok = site.program is not None and not reason
        if ok and devices == "cuda":
            ok, reason = _faster_fused(site, rounding)
        report.sites.append(SiteReport("", site.name, ok, site.ops, reason,
                                       site.program.dumps() if ok else ""))
        if ok:
            match.rewrite(gm.graph, site, lambda g, text, ts, ints: g.call_function(
                torch.ops.fusedgemm.fused_region.default, ([_tensor_arg(g, t) for t in ts], [_int_arg(g, i) for i in ints], text, rounding)),
                          replaced)
    gm.graph.lint()
    gm.recompile()
    return report


def make_backend(*, inner="inductor", rounding: str = "fp32", report: bool = False, devices: str = "cuda"):
    """A torch.compile backend: the fusion rewrite, then `inner` ("inductor", "eager", or a backend callable)."""
    if rounding not in ("fp32", "eager"):
        raise ValueError(f"make_backend: rounding must be 'fp32' or 'eager', got {rounding!r}")

    def fusedgemm_backend(gm: torch.fx.GraphModule, example_inputs):
        rep = rewrite_graph(gm, rounding=rounding, devices=devices)
        REPORTS.append(rep)
        del REPORTS[:-64]
        log.info("%s", rep)
        if report:
            print(rep)
        if inner == "eager":
            return gm.forward
        if inner == "inductor":
            from torch._inductor.compile_fx import compile_fx

            return compile_fx(gm, example_inputs)
        return inner(gm, example_inputs)

    return fusedgemm_backend


backend = make_backend()
