// Entry points of gemm_a8 on Hopper tensor cores (wgmma + TMA; gemm_a8_sm90.hpp) with the preset epilogues.
// Built for sm_90a only. Names: fg_gemm_a8_<in>_<out>_<preset>_<config>, the same scheme as gemm_a8.hip;
// runtime/kernels.py packs the arguments in this order: two 128-byte tensor maps (64-byte aligned), M, N, K,
// then the epilogue's Params.
#include "include/fusedgemm/gemm_a8_instances.hpp"
#include "include/fusedgemm/gemm_a8_sm90.hpp"

#if defined(FG_NVIDIA)
#define FG_WGMMA_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG)                              \
  extern "C" __global__ void __launch_bounds__(CFG::kThreads, CFG::kMinBlocksPerSm)                          \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##EPI_NAME##_##CFG_NAME(                                             \
          const __grid_constant__ fg::sm90::TmaDesc a_map, const __grid_constant__ fg::sm90::TmaDesc b_map,   \
          int M, int N, int K, const __grid_constant__ EPI<OUT>::Params ep) {                                 \
    fg::gemm_a8_wgmma<IN, EPI<OUT>, CFG>(a_map, b_map, M, N, K, ep);                                           \
  }

FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w64n128, fg::ConfigW64N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w128n128, fg::ConfigW128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w128n192, fg::ConfigW128N192)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w192n128, fg::ConfigW192N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, p128n128, fg::ConfigP128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, v16n128, fg::ConfigV16N128)
#endif
