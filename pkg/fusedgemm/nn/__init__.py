"""Drop-in modules (fusedgemm.nn): same parameters and state_dict keys as the torch modules they replace.

    FusedLinear    nn.Linear + activation (+ scale, residual) as one matmul_fused kernel     (linear.py)
"""
from .linear import FusedLinear

__all__ = ["FusedLinear"]
