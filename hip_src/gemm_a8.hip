// Entry points of gemm_a8 with the preset epilogues: one extern "C" kernel per (input type, output type,
// preset, tile config). Names: fg_gemm_a8_<in>_<out>_<preset>_<config>; runtime/kernels.py builds the same
// names and packs the one argument struct (A, B, M, N, K, the epilogue's Params; GemmA8Args); a CPU test
// checks it against each code object's metadata. Generated epilogues get translation units of the same shape
// (pkg/fusedgemm/runtime/gemm_a8_spec.py).
#include "include/fusedgemm/gemm_a8.hpp"
#include "include/fusedgemm/gemm_a8_instances.hpp"

#define FG_GEMM_A8_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG)                          \
  extern "C" __global__ void __launch_bounds__(CFG::kWarps* fg::arch::MmaAtom<IN>::kWarpSize)               \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##EPI_NAME##_##CFG_NAME(const fg::GemmA8Args<EPI<OUT>> args) {   \
    static_assert(__builtin_offsetof(fg::GemmA8Args<EPI<OUT>>, M) == 16 &&                                   \
                      __builtin_offsetof(fg::GemmA8Args<EPI<OUT>>, ep) == 32, "GemmA8Args: packing layout"); \
    fg::gemm_a8_tile<IN, EPI<OUT>, CFG>(args.a, args.b, args.M, args.N, args.K, args.ep);                    \
  }

FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m16n16k8, fg::ConfigM16N16K8)
FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m64n16k8, fg::ConfigM64N16K8)
FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m128n128, fg::ConfigM128N128)
