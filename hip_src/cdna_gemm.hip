// Entry points of gemm_a8 with the preset epilogues on the CDNA LDS-staged GEMM template (cdna_gemm.hpp, reached
// through portable_gemm_tile's dispatch on the config type), built for gfx942 / gfx950 only (runtime/build.py
// UNIT_ARCHES): one extern "C" kernel per (input type, output type, preset, tile config), named and packed as
// portable_gemm.hip's (fg_gemm_a8_<in>_<out>_<preset>_<config>; PortableGemmArgs), and each once more for K filling
// whole K blocks (fg_gemm_a8_<in>_<out>_<preset>_whole_k_<config>: CdnaWholeKBlocks<config>, no K-edge test; the
// host picks it by K, runtime/gemm_spec.py whole_k_blocks). Generated epilogues get translation units of the same
// shape (pkg/fusedgemm/runtime/gemm_spec.py).
#include "include/fusedgemm/portable_gemm.hpp"
#include "include/fusedgemm/gemm_a8_instances.hpp"

#if defined(__gfx942__) || defined(__gfx950__)
#define FG_CDNA_GEMM_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG)                           \
  extern "C" __global__ void __launch_bounds__(CFG::kThreads)                                                  \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##EPI_NAME##_##CFG_NAME(const fg::PortableGemmArgs<EPI<OUT>> args) { \
    static_assert(__builtin_offsetof(fg::PortableGemmArgs<EPI<OUT>>, M) == 16 &&                               \
                      __builtin_offsetof(fg::PortableGemmArgs<EPI<OUT>>, ep) == 32,                            \
                  "PortableGemmArgs: packing layout");                                                         \
    fg::portable_gemm_tile<IN, EPI<OUT>, CFG>(args.a, args.b, args.M, args.N, args.K, args.ep);                \
  }

#define FG_CDNA_GEMM_WHOLE_K_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG) \
  FG_CDNA_GEMM_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, whole_k_##CFG_NAME, fg::CdnaWholeKBlocks<CFG>)

#define FG_CDNA_GEMM_A8_KERNELS(CFG_NAME, CFG)            \
  FG_GEMM_A8_INSTANCES(FG_CDNA_GEMM_ENTRY, CFG_NAME, CFG) \
  FG_GEMM_A8_INSTANCES(FG_CDNA_GEMM_WHOLE_K_ENTRY, CFG_NAME, CFG)
FG_CDNA_GEMM_A8_CONFIGS(FG_CDNA_GEMM_A8_KERNELS)
#endif
