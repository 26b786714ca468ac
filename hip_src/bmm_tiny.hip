// Entry points of bmm_tiny: fg_bmm_tiny_<dtype>_r<R>. runtime/kernels.py (BMM_TINY) packs the arguments in
// this order; a CPU test checks it against each code object's metadata.
#include "include/fusedgemm/bmm_tiny.hpp"

// NVIDIA: at most 128 registers, so two 256-thread blocks fit per SM (one would leave too few loads in flight).
#if defined(FG_NVIDIA)
#define FG_BMM_TINY_BOUNDS __launch_bounds__(fg::kBmmTinyMaxThreads, fg::kBmmTinyMinBlocks)
#else
#define FG_BMM_TINY_BOUNDS __launch_bounds__(fg::kBmmTinyMaxThreads)
#endif

#define FG_BMM_TINY_ENTRY(DT_NAME, T, R)                                                                         \
  extern "C" __global__ void FG_BMM_TINY_BOUNDS                                                                          \
      fg_bmm_tiny_##DT_NAME##_r##R(const typename T::Storage* __restrict__ a,                                     \
                                   const typename T::Storage* __restrict__ b, typename T::Storage* __restrict__ c, \
                                   int batch, int m, int n, int k, long long sab, int sam, int sak, long long sbb,  \
                                   int sbk, int sbn, int a_mode, int b_mode, int tx, int ty, int elems, int lda,   \
                                   int ldb, int a_elem, int b_elem, int num_blocks) {                              \
    extern __shared__ float fg_bmm_smem[];                                                                       \
    fg::bmm_tiny_block<T, R>(a, b, c, batch, m, n, k, sab, sam, sak, sbb, sbk, sbn, a_mode, b_mode, tx, ty, elems, \
                             lda, ldb, a_elem, b_elem, num_blocks, fg_bmm_smem);                                 \
  }

#define FG_BMM_TINY_RS(DT_NAME, T) \
  FG_BMM_TINY_ENTRY(DT_NAME, T, 2) \
  FG_BMM_TINY_ENTRY(DT_NAME, T, 4)

FG_BMM_TINY_RS(f32, fg::InF32)
FG_BMM_TINY_RS(bf16, fg::InBf16)
FG_BMM_TINY_RS(f16, fg::InF16)
