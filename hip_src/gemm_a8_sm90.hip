// Entry points of gemm_a8 on Hopper tensor cores (wgmma + TMA; gemm_a8_sm90.hpp) with the preset epilogues.
// Built for sm_90a only. Names: fg_gemm_a8_<in>_<out>_<preset>_<config>, the same scheme as gemm_a8.hip;
// runtime/kernels.py packs the one argument struct GemmA8Sm90Args: two 128-byte tensor maps (64-byte aligned),
// M, N, K, then the epilogue's Params.
#include "include/fusedgemm/gemm_a8_instances.hpp"
#include "include/fusedgemm/gemm_a8_sm90.hpp"

#if defined(FG_NVIDIA)
#define FG_WGMMA_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG)                              \
  extern "C" __global__ void __launch_bounds__(CFG::kThreads, CFG::kMinBlocksPerSm)                          \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##EPI_NAME##_##CFG_NAME(                                             \
          const __grid_constant__ fg::GemmA8Sm90Args<EPI<OUT>> args) {                                        \
    static_assert(__builtin_offsetof(fg::GemmA8Sm90Args<EPI<OUT>>, M) == 256 &&                                \
                      __builtin_offsetof(fg::GemmA8Sm90Args<EPI<OUT>>, ep) == 272, "GemmA8Sm90Args: packing layout"); \
    fg::gemm_a8_wgmma<IN, EPI<OUT>, CFG>(args.a_map, args.b_map, args.M, args.N, args.K, args.ep);             \
  }

FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w64n128, fg::ConfigW64N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w128n128, fg::ConfigW128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w128n192, fg::ConfigW128N192)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, w192n128, fg::ConfigW192N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, p128n128, fg::ConfigP128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, cp128n128, fg::ConfigCP128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, s128n128, fg::ConfigS128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, q128n128, fg::ConfigQ128N128)
FG_GEMM_A8_INSTANCES(FG_WGMMA_ENTRY, v16n128, fg::ConfigV16N128)
#endif
