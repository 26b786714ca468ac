"""fusedgemm: GPU GEMM kernels with fused epilogues for AMD Instinct (gfx942, gfx950) and NVIDIA Hopper (sm_90a).

    wq = fusedgemm.preshuffle(w8)                                  # [N, K] fp8/int8 weight, tagged layout
    y  = fusedgemm.gemm_a8(x8, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    y  = fusedgemm.matmul_fused(x, w, bias=b, activation="silu")  # bf16 / fp16 / fp32 (TF32), any epilogue
    c  = fusedgemm.bmm(a, b)                                       # tiny batched GEMM (m, n, k <= 64)
    h  = fusedgemm.swiglu(x, w_gate_up)                            # silu(x Wg^T) * (x Wu^T), one GEMM
    y  = fusedgemm.grouped_matmul(x, w_experts, offs=offs)          # mixture of experts: [M, K] x [G, N, K]
    m  = fusedgemm.fuse(model)  /  torch.compile(model, backend=fusedgemm.backend)   # automatic fusion

CPU tensors: every op runs the same argument checks and returns the same output dtype and shape as on a GPU,
computed by a torch reference (no kernel runs on the CPU).
"""
from .tiny_bmm import bmm, bmm_tiny
from .epilogue.presets import ACTIVATIONS, EPILOGUES
from .gemm_a8 import FP8_DTYPE_FOR_ARCH, gemm_a8
from .grouped import grouped_gemm_a8, grouped_matmul, grouped_swiglu
from .matmul import matmul_fused
from .swiglu import InterleavedGateUp, deinterleave_gate_up, interleave_gate_up, swiglu, swiglu_reference
from .quant import quantize_rows, quantize_weight
from .nn.linear8 import quantize
from . import nn
from .fusion import backend, fuse, make_backend
from .preshuffle import LAYOUT_16x16, PreshuffledWeight, preshuffle, unshuffle
from .runtime.arch import SUPPORTED_ARCHES, UnsupportedArchError

__all__ = ["ACTIVATIONS", "EPILOGUES", "bmm", "bmm_tiny", "FP8_DTYPE_FOR_ARCH", "LAYOUT_16x16", "PreshuffledWeight", "SUPPORTED_ARCHES",
           "UnsupportedArchError", "backend", "fuse", "gemm_a8", "make_backend", "matmul_fused", "nn", "preshuffle", "quantize", "quantize_rows", "quantize_weight", "unshuffle"]
__all__ += ["grouped_gemm_a8", "grouped_matmul", "grouped_swiglu"]
__all__ += ["InterleavedGateUp", "deinterleave_gate_up", "interleave_gate_up", "swiglu", "swiglu_reference"]
__version__ = "0.1.0"
