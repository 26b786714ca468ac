// Entry points of gemm_a8: one extern "C" kernel per (input type, output type, activation, tile config).
// Names: fg_gemm_a8_<in>_<out>_<act>_<config>; runtime/kernels.py builds the same names and packs the
// arguments in this order (a CPU test checks it against each code object's own metadata).
#include "include/fusedgemm/gemm_a8.hpp"

#define FG_GEMM_A8_ENTRY(IN_NAME, IN, OUT_NAME, OUT, ACT_NAME, ACT, CFG_NAME, CFG)                         \
  extern "C" __global__ void __launch_bounds__(CFG::kWarps* fg::arch::MmaAtom<IN>::kWarpSize) \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##ACT_NAME##_##CFG_NAME(                                           \
          const fg::u8* __restrict__ a, const fg::u8* __restrict__ b, fg::u16* __restrict__ out,            \
          const void* __restrict__ bias, const float* __restrict__ scale_a,                                  \
          const float* __restrict__ scale_b, int M, int N, int K, int bias_kind, int scale_a_stride,         \
          int scale_b_stride, float alpha) {                                                                 \
    fg::gemm_a8_tile<IN, OUT, ACT, CFG>(a, b, out, bias, scale_a, scale_b, M, N, K, bias_kind,              \
                                         scale_a_stride, scale_b_stride, alpha);                             \
  }

#define FG_GEMM_A8_ACTS(IN_NAME, IN, OUT_NAME, OUT, CFG_NAME, CFG)                              \
  FG_GEMM_A8_ENTRY(IN_NAME, IN, OUT_NAME, OUT, none, fg::ActIdentity, CFG_NAME, CFG)            \
  FG_GEMM_A8_ENTRY(IN_NAME, IN, OUT_NAME, OUT, relu, fg::ActRelu, CFG_NAME, CFG)                \
  FG_GEMM_A8_ENTRY(IN_NAME, IN, OUT_NAME, OUT, silu, fg::ActSilu, CFG_NAME, CFG)                \
  FG_GEMM_A8_ENTRY(IN_NAME, IN, OUT_NAME, OUT, gelu, fg::ActGeluTanh, CFG_NAME, CFG)            \
  FG_GEMM_A8_ENTRY(IN_NAME, IN, OUT_NAME, OUT, gelu_erf, fg::ActGeluErf, CFG_NAME, CFG)

#define FG_GEMM_A8_OUTS(IN_NAME, IN, CFG_NAME, CFG)             \
  FG_GEMM_A8_ACTS(IN_NAME, IN, bf16, fg::OutBf16, CFG_NAME, CFG) \
  FG_GEMM_A8_ACTS(IN_NAME, IN, f16, fg::OutF16, CFG_NAME, CFG)

#define FG_GEMM_A8_CONFIG(CFG_NAME, CFG)               \
  FG_GEMM_A8_OUTS(fp8, fg::Fp8E4M3, CFG_NAME, CFG)     \
  FG_GEMM_A8_OUTS(i8, fg::Int8, CFG_NAME, CFG)

FG_GEMM_A8_CONFIG(m16n16k8, fg::ConfigM16N16K8)
FG_GEMM_A8_CONFIG(m64n16k8, fg::ConfigM64N16K8)
FG_GEMM_A8_CONFIG(m128n128, fg::ConfigM128N128)
