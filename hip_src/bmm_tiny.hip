// Entry points of bmm_tiny: fg_bmm_tiny_<dtype>_r<R> (register-staged) and fg_bmm_tiny_f32_async_<RM>x<RN>
// (cp.async ring, f32). runtime/kernels.py (BMM_TINY) packs the arguments in this order for all of them; a CPU
// test checks it against each code object's metadata.
#include "include/fusedgemm/bmm_tiny.hpp"

// NVIDIA: at most 128 registers, so two 256-thread blocks fit per SM (one would leave too few loads in flight).
// The cp.async kernels hold no prefetch in registers. Bounds per tile (THREADS, MIN_BLOCKS): 2x4 and 4x4 at
// (256, 3), i.e. <= 80 registers, three 256-thread blocks per SM; 4x8 (32 accumulators) at (128, 4), <= 128
// registers (at 80 it spills). tiny_bmm.py (_ASYNC_REGS) plans with the same numbers.
#if defined(FG_NVIDIA)
#define FG_BMM_TINY_BOUNDS __launch_bounds__(fg::kBmmTinyMaxThreads, fg::kBmmTinyMinBlocks)
#define FG_BMM_TINY_ASYNC_BOUNDS(THREADS, MIN_BLOCKS) __launch_bounds__(THREADS, MIN_BLOCKS)
#else
#define FG_BMM_TINY_BOUNDS __launch_bounds__(fg::kBmmTinyMaxThreads)
#define FG_BMM_TINY_ASYNC_BOUNDS(THREADS, MIN_BLOCKS) __launch_bounds__(THREADS)
#endif

#define FG_BMM_TINY_ENTRY(DT_NAME, T, R)                                                                         \
  extern "C" __global__ void FG_BMM_TINY_BOUNDS                                                                          \
      fg_bmm_tiny_##DT_NAME##_r##R(const typename T::Storage* __restrict__ a,                                     \
                                   const typename T::Storage* __restrict__ b, typename T::Storage* __restrict__ c, \
                                   int batch, int m, int n, int k, long long sab, int sam, int sak, long long sbb,  \
                                   int sbk, int sbn, int a_mode, int b_mode, int tx, int ty, int elems, int lda,   \
                                   int ldb, int a_elem, int b_elem, int num_blocks, int stages, int kc) {          \
    extern __shared__ float fg_bmm_smem[];                                                                       \
    fg::bmm_tiny_block<T, R>(a, b, c, batch, m, n, k, sab, sam, sak, sbb, sbk, sbn, a_mode, b_mode, tx, ty, elems, \
                             lda, ldb, a_elem, b_elem, num_blocks, fg_bmm_smem);                                 \
    (void)stages, (void)kc; /* one buffer, all of k: the register-staged kernels prefetch into registers */     \
  }

#define FG_BMM_TINY_RS(DT_NAME, T) \
  FG_BMM_TINY_ENTRY(DT_NAME, T, 2) \
  FG_BMM_TINY_ENTRY(DT_NAME, T, 4)

FG_BMM_TINY_RS(f32, fg::InF32)
FG_BMM_TINY_RS(bf16, fg::InBf16)
FG_BMM_TINY_RS(f16, fg::InF16)

// The cp.async kernels (f32 only: 16-bit inputs would need widening on the way into shared memory).
// NAME_TX: empty, or _tx<TX> for the kernel with tx fixed at compile time (TX; 0: any tx).
#define FG_BMM_TINY_ASYNC_ENTRY(RM, RN, TX, NAME_TX, THREADS, MIN_BLOCKS)                                        \
  extern "C" __global__ void FG_BMM_TINY_ASYNC_BOUNDS(THREADS, MIN_BLOCKS)                                       \
      fg_bmm_tiny_f32_async_##RM##x##RN##NAME_TX(                                                                \
      const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int batch, int m, int n,  \
      int k, long long sab, int sam, int sak, long long sbb, int sbk, int sbn, int a_mode, int b_mode, int tx,   \
      int ty, int elems, int lda, int ldb, int a_elem, int b_elem, int num_blocks, int stages, int kc) {        \
    extern __shared__ float fg_bmm_smem[];                                                                       \
    fg::bmm_tiny_async_block<RM, RN, TX>(a, b, c, batch, m, n, k, sab, sam, sak, sbb, sbk, sbn, a_mode, b_mode,   \
                                         tx, ty, elems, lda, ldb, a_elem, b_elem, num_blocks, stages, kc,        \
                                         fg_bmm_smem);                                                           \
  }

FG_BMM_TINY_ASYNC_ENTRY(2, 4, 0, , 256, 3)
FG_BMM_TINY_ASYNC_ENTRY(4, 4, 0, , 256, 3)
FG_BMM_TINY_ASYNC_ENTRY(4, 8, 0, , 128, 4)
FG_BMM_TINY_ASYNC_ENTRY(4, 8, 8, _tx8, 128, 4)  // n in 57..64 (64^3, 12x64x12): tx = 8
