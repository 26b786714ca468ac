// Entry points of gemm_a8 with the preset epilogues on the portable GEMM template (portable_gemm.hpp): one
// extern "C" kernel per (input type, output type, preset, tile config). Names:
// fg_gemm_a8_<in>_<out>_<preset>_<config>; runtime/kernels.py builds the same names and packs the one argument
// struct (A, B, M, N, K, the epilogue's Params; PortableGemmArgs); a CPU test checks it against each code object's
// metadata. Generated epilogues get translation units of the same shape (pkg/fusedgemm/runtime/gemm_spec.py).
#include "include/fusedgemm/portable_gemm.hpp"
#include "include/fusedgemm/gemm_a8_instances.hpp"

#define FG_PORTABLE_GEMM_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG)                       \
  extern "C" __global__ void __launch_bounds__(CFG::kWarps* fg::arch::MmaAtom<IN>::kWarpSize)                  \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##EPI_NAME##_##CFG_NAME(const fg::PortableGemmArgs<EPI<OUT>> args) { \
    static_assert(__builtin_offsetof(fg::PortableGemmArgs<EPI<OUT>>, M) == 16 &&                               \
                      __builtin_offsetof(fg::PortableGemmArgs<EPI<OUT>>, ep) == 32,                            \
                  "PortableGemmArgs: packing layout");                                                         \
    fg::portable_gemm_tile<IN, EPI<OUT>, CFG>(args.a, args.b, args.M, args.N, args.K, args.ep);                \
  }

// Every config of gemm_configs.hpp with gemm_a8 preset kernels.
#define FG_PORTABLE_GEMM_A8_KERNELS(CFG_NAME, CFG) FG_GEMM_A8_INSTANCES(FG_PORTABLE_GEMM_ENTRY, CFG_NAME, CFG)
FG_PORTABLE_GEMM_A8_CONFIGS(FG_PORTABLE_GEMM_A8_KERNELS)
