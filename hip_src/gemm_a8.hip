// Entry points of gemm_a8: one extern "C" kernel per (input type, output type, activation, tile config).
// Names: fg_gemm_a8_<in>_<out>_<act>_<config>; runtime/kernels.py builds the same names and packs the
// arguments in this order (a CPU test checks it against each code object's own metadata).
#include "include/fusedgemm/gemm_a8.hpp"
#include "include/fusedgemm/gemm_a8_instances.hpp"

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

FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m16n16k8, fg::ConfigM16N16K8)
FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m64n16k8, fg::ConfigM64N16K8)
FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m128n128, fg::ConfigM128N128)
