"""Automatic fusion: GEMM + elementwise chains in a model's graph become fused GEMMs.

    fused = fg.fuse(model, report=True)                 # FX rewrite of a copy (fuse.py)
    compiled = torch.compile(model, backend=fg.backend)  # the same rewrite inside torch.compile (backend.py)

match.py finds the regions, program.py describes one, lowering.py lowers it to one
fused call (program_a8.py: the 8-bit kinds of kinds_a8.py), execute.py runs it.
"""
from .backend import REPORTS, backend, make_backend, rewrite_graph
from .fuse import FusionReport, fuse

__all__ = ["REPORTS", "FusionReport", "backend", "fuse", "make_backend", "rewrite_graph"]
