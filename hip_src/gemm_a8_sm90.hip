// Entry points of gemm_a8 on Hopper tensor cores (wgmma + TMA; gemm_a8_sm90.hpp). Built for sm_90a only.
// Names: fg_gemm_a8_<in>_<out>_<act>_<config>, the same scheme as gemm_a8.hip; runtime/kernels.py packs
// the arguments in this order: two 128-byte tensor maps (64-byte aligned), then the gemm_a8 arguments
// without A and B pointers.
#include "include/fusedgemm/gemm_a8_instances.hpp"
#include "include/fusedgemm/gemm_a8_sm90.hpp"

#if defined(FG_NVIDIA)
#define FG_WGMMA_ENTRY(IN_NAME, IN, OUT_NAME, OUT, ACT_NAME, ACT, CFG_NAME, CFG)                               \
  extern "C" __global__ void __launch_bounds__(CFG::kThreads, CFG::kMinBlocksPerSm)                          \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##ACT_NAME##_##CFG_NAME(                                             \
          const __grid_constant__ fg::sm90::TmaDesc a_map, const __grid_constant__ fg::sm90::TmaDesc b_map,   \
          fg::u16* __restrict__ out, const void* __restrict__ bias, const float* __restrict__ scale_a,        \
          const float* __restrict__ scale_b, int M, int N, int K, int bias_kind, int scale_a_stride,          \
          int scale_b_stride, float alpha) {                                                                   \
    fg::gemm_a8_wgmma<IN, OUT, ACT, CFG>(a_map, b_map, out, bias, scale_a, scale_b, M, N, K, bias_kind,       \
                                         scale_a_stride, scale_b_stride, alpha);                               \
  }

FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w64n128, fg::ConfigW64N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w128n128, fg::ConfigW128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w128n192, fg::ConfigW128N192)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w192n128, fg::ConfigW192N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, p128n128, fg::ConfigP128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, v16n128, fg::ConfigV16N128)
#endif
