// Entry points of gemm_a8 with the preset epilogues on the sm_90a GEMM template (wgmma + TMA; sm90_gemm.hpp).
// Built for sm_90a only. Names: fg_gemm_a8_<in>_<out>_<preset>_<config>, the same scheme as portable_gemm.hip;
// runtime/kernels.py packs the one argument struct Sm90GemmArgs: two 128-byte tensor maps (64-byte aligned),
// M, N, K, then the epilogue's Params.
#include "include/fusedgemm/gemm_a8_instances.hpp"
#include "include/fusedgemm/sm90_gemm.hpp"

#if defined(FG_NVIDIA)
#define FG_SM90_GEMM_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG)                              \
  extern "C" __global__ void __launch_bounds__(CFG::kThreads, CFG::kMinBlocksPerSm)                               \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##EPI_NAME##_##CFG_NAME(                                                \
          const __grid_constant__ fg::Sm90GemmArgs<EPI<OUT>> args) {                                              \
    static_assert(__builtin_offsetof(fg::Sm90GemmArgs<EPI<OUT>>, M) == 256 &&                                     \
                      __builtin_offsetof(fg::Sm90GemmArgs<EPI<OUT>>, ep) == 272, "Sm90GemmArgs: packing layout"); \
    fg::sm90_gemm<IN, EPI<OUT>, CFG>(args.a_map, args.b_map, args.M, args.N, args.K, args.ep);                    \
  }

// Every config of gemm_configs.hpp with gemm_a8 preset kernels.
#define FG_SM90_GEMM_A8_KERNELS(CFG_NAME, CFG) FG_GEMM_A8_INSTANCES(FG_SM90_GEMM_ENTRY, CFG_NAME, CFG)
FG_SM90_GEMM_A8_CONFIGS(FG_SM90_GEMM_A8_KERNELS)
#endif
