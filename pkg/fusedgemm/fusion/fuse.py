"""fg.fuse(model): a copy of the model whose matmul + elementwise chains run as fused GEMMs.

    fused = fg.fuse(model, report=True)   # prints what was fused, what was not and why
    y = fused(x)                          # the original model is untouched; parameters are shared, not copied

Whole models rarely trace (transformers' decoder layers take caches and keyword arguments), so fuse tries
torch.fx.symbolic_trace on the model and, where tracing fails, on each child in turn: an MLP block (gate / up /
down, c_fc / act / c_proj, dense + GELU + residual) traces on its own. Each traced module with a fusable region
is replaced, in the copy, by its rewritten GraphModule; nothing else changes. Parameters and buffers are the
original objects, so load_state_dict on either model updates both.
"""
from __future__ import annotations

import copy
import dataclasses
import logging

import torch
import torch.fx

from . import execute, match, match_a8

log = logging.getLogger("fusedgemm.fusion")


@dataclasses.dataclass
class SiteReport:
    module: str      # qualified name of the traced module ("" for the root)
    site: str        # the GEMM (module path or node name) inside it
    fused: bool
    ops: list
    reason: str
    program: str = ""

    def line(self) -> str:
        where = ".".join(x for x in (self.module, self.site) if x)
        if self.fused:
            s = execute.STATS.get(self.program)
            runs = "" if s is None else f"  [ran: kernel {s['kernel']}, unfused {s['unfused']}" + \
                (f"; last unfused because: {s['why']}]" if s["unfused"] else "]")
            return f"fused    {where}: GEMM -> {' -> '.join(self.ops)}{runs}"
        return f"not fused {where}: {self.reason}"


@dataclasses.dataclass
class FusionReport:
    sites: list = dataclasses.field(default_factory=list)
    untraced: list = dataclasses.field(default_factory=list)   # (module name, why tracing failed): children tried

    @property
    def fused(self) -> list:
        return [s for s in self.sites if s.fused]

    def __str__(self) -> str:
        lines = [f"fusedgemm.fuse: {len(self.fused)} of {len(self.sites)} GEMM sites fused"]
        lines += ["  " + s.line() for s in self.sites]
        lines += [f"  untraced {name or '<root>'}: {why}" for name, why in self.untraced]
        return "\n".join(lines)


def _call_region(graph, text, tensors, ints, rounding):
    return graph.call_function(execute.run_region, (text, tensors, ints, rounding))


def _fuse_traced(mod: torch.nn.Module, name: str, report: FusionReport, rounding: str):
    """-> a GraphModule of `mod` with its regions rewritten, or None (untraceable, or nothing to fuse)."""
    try:
        graph = match_a8.A8Tracer().trace(mod)  # Linear8 modules stay leaves: GEMM nodes
    except Exception as exc:  # noqa: BLE001 -- any failure to trace means: try the children
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    modules = dict(mod.named_modules())
    sites = match.find_regions(graph, modules)
    if not sites:
        return None, None
    replaced: dict = {}
    for site in sites:
        report.sites.append(SiteReport(name, site.name, site.program is not None, site.ops, site.reason,
                                       site.program.dumps() if site.program is not None else ""))
        if site.program is not None:
            match.rewrite(graph, site, lambda g, t, ts, ints: _call_region(g, t, ts, ints, rounding),
                          replaced)
    if not any(s.program is not None for s in sites):
        return None, None
    graph.lint()
    gm = torch.fx.GraphModule(mod, graph, class_name=f"Fused{type(mod).__name__}")
    gm.train(mod.training)
    return gm, None


def _has_gemm(mod: torch.nn.Module) -> bool:
    return (any(isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D" for m in mod.modules())
            or match_a8.has_a8(mod))


def _walk(mod: torch.nn.Module, name: str, report: FusionReport, rounding: str):
    """Fuse `mod` or, when it does not trace, its children (in place in the copy). -> replacement or None."""
    if isinstance(mod, (torch.nn.Linear, match_a8.Linear8)) or not _has_gemm(mod):
        return None
    gm, why = _fuse_traced(mod, name, report, rounding)
    if gm is not None or why is None:
        return gm
    report.untraced.append((name, why))
    for child_name, child in mod.named_children():
        new = _walk(child, f"{name}.{child_name}" if name else child_name, report, rounding)
        if new is not None:
            setattr(mod, child_name, new)
    return None


def fuse(model: torch.nn.Module, *, report: bool = False, rounding: str = "fp32") -> torch.nn.Module:
    """A copy of `model` (sharing its parameters and buffers) whose fusable GEMM regions run fused.

    rounding: "fp32" (default) computes each fused epilogue in fp32 and rounds once -- at least as accurate as
    eager, which rounds every 16-bit intermediate; "eager" rounds where eager does (closer to bit-identical).
    report: print the FusionReport (also kept as `fused.fusion_report`, and logged to "fusedgemm.fusion").
    Fused regions run the kernel only where it is faster (see fusedgemm.fusion.execute); refused regions and
    inputs the kernels do not take (CPU tensors, float64, autograd) run the original torch calls."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"fuse: expected a torch.nn.Module, got {type(model).__name__}")
    if rounding not in ("fp32", "eager"):
        raise ValueError(f"fuse: rounding must be 'fp32' or 'eager', got {rounding!r}")
    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    copied = copy.deepcopy(model, memo=dict(shared))
    rep = FusionReport()
    root = _walk(copied, "", rep, rounding)
    result = root if root is not None else copied
    result.fusion_report = rep
    log.info("%s", rep)
    if report:
        print(rep)
    return result
