"""Drop-in modules (fusedgemm.nn): same parameters and state_dict keys as the torch modules they replace.

    FusedLinear    nn.Linear + activation (+ scale, residual) as one matmul_fused kernel     (linear.py)
    Linear8        nn.Linear quantized to fp8 / int8: quantize_rows + one gemm_a8 per call   (linear8.py)
    quantize       every eligible nn.Linear of a model -> Linear8, in place                  (linear8.py)
    GatedMLP       gate/up/down MLP (Llama, Qwen2, Phi-3): gate and up as one fg.swiglu GEMM (gated_mlp.py)
    FusedMoE       Mixtral / Qwen2-MoE / Qwen3-MoE sparse MoE block: experts as two grouped GEMMs (moe.py)
"""
from .gated_mlp import GatedMLP
from .linear import FusedLinear
from .linear8 import Linear8, quantize
from .moe import FusedMoE

__all__ = ["FusedLinear", "FusedMoE", "GatedMLP", "Linear8", "quantize"]
