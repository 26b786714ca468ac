// Entry points of gemm_a8 with the preset epilogues: one extern "C" kernel per (input type, output type,
// preset, tile config). Names: fg_gemm_a8_<in>_<out>_<preset>_<config>; runtime/kernels.py builds the same
// names and packs the arguments (A, B, M, N, K, the epilogue's Params) in this order, a CPU test checks it
// against each code object's metadata. Generated epilogues get their own translation units of the same shape
// (pkg/fusedgemm/runtime/specs.py).
#include "include/fusedgemm/gemm_a8.hpp"
#include "include/fusedgemm/gemm_a8_instances.hpp"

#define FG_GEMM_A8_ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG)                          \
  extern "C" __global__ void __launch_bounds__(CFG::kWarps* fg::arch::MmaAtom<IN>::kWarpSize)               \
      fg_gemm_a8_##IN_NAME##_##OUT_NAME##_##EPI_NAME##_##CFG_NAME(                                           \
          const fg::u8* __restrict__ a, const fg::u8* __restrict__ b, int M, int N, int K,                  \
          const EPI<OUT>::Params ep) {                                                                       \
    fg::gemm_a8_tile<IN, EPI<OUT>, CFG>(a, b, M, N, K, ep);                                                  \
  }

FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m16n16k8, fg::ConfigM16N16K8)
FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m64n16k8, fg::ConfigM64N16K8)
FG_GEMM_A8_INSTANCES(FG_GEMM_A8_ENTRY, m128n128, fg::ConfigM128N128)
