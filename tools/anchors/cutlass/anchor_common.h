// anchor_common.h -- what the anchor's translation units share: the kernel config table, the
// runner context, unit selection, registration, and (kernel units only) the launch/timing loop.
//
// Translation units of the `anchor` binary (build.sh compiles each kernel source as G units):
//   anchor.cu              main() (-DANCHOR_UNIT=-2), checks, reference; bf16 and fp8 kernels
//   anchor_blockscaled.cu  fp8block kernels (CUTLASS example 67's blockwise-scaling mainloop)
// A kernel unit compiled with -DANCHOR_UNIT=g -DANCHOR_NUNITS=G instantiates the configs of its
// source's kinds with id % G == g; without ANCHOR_UNIT a source instantiates all of its configs
// (anchor.cu then also has main(), anchor_blockscaled.cu must be linked beside it).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <utility>

#include "cutlass/cutlass.h"

#ifndef ANCHOR_UNIT
#define ANCHOR_UNIT -1
#endif
#define ANCHOR_HAS_MAIN (ANCHOR_UNIT == -1 || ANCHOR_UNIT == -2)
#define ANCHOR_HAS_KERNELS (ANCHOR_UNIT != -2)

namespace anchor {

// BF16:     D = epi(X @ W^T)                              bf16 x bf16, fp32 accumulate
// FP8:      D = epi(scale_a[m] * scale_b[n] * (X8 @ W8^T)) e4m3, per-token x per-channel scales
// FP8Block: D = epi(sum_kb SA[m,kb] * SB[n/128,kb] * (X8[m,kb-block] . W8[n,kb-block]))
//           e4m3, DeepSeek-V3 block scales: SA [M, ceil(K/128)] (1x128 blocks of X),
//           SB [ceil(N/128), ceil(K/128)] (128x128 blocks of W), both fp32 row-major
enum class Kind : int { BF16 = 0, FP8 = 1, FP8Block = 2 };
enum class Epi : int { SiluBias = 0, None = 1 };
enum class Sched : int { Pingpong = 0, Cooperative = 1 };

// ------------------------------------------------------------------------------------------------
// Kernel configurations. One entry = one CUTLASS kernel instantiation.
//   X(id, kind, schedule, tileM, tileN, tileK, clusterM, clusterN, epilogue)
// Pingpong: the tile is per consumer warp group (2 consumer WGs alternate tiles).
// Cooperative: the tile is shared by 2 consumer WGs (each does tileM/2 rows); needs tileM >= 128.
// Both use the persistent tile scheduler (runtime swizzle / raster order swept in main()).
// fp8block: the sm90 blockwise mainloop needs tileM = 128 or 256 (NumSplitsM static_assert in
// sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp) and tileK = 128 (= the scale
// block along K), so there is no 64-row Pingpong tile; ids >= ANCHOR_FIRST_BLOCK_CONFIG.
// ------------------------------------------------------------------------------------------------
#define ANCHOR_CONFIGS(X)                                              \
  /* bf16, silu(acc + bias) */                                         \
  X( 0, BF16, Pingpong,     64, 128,  64, 2, 1, SiluBias)              \
  X( 1, BF16, Pingpong,    128, 128,  64, 1, 1, SiluBias)              \
  X( 2, BF16, Pingpong,    128, 128,  64, 2, 1, SiluBias)              \
  X( 3, BF16, Cooperative, 128, 256,  64, 2, 1, SiluBias)              \
  /* bf16, identity epilogue */                                        \
  X( 4, BF16, Pingpong,     64, 128,  64, 2, 1, None)                  \
  X( 5, BF16, Pingpong,    128, 128,  64, 1, 1, None)                  \
  X( 6, BF16, Pingpong,    128, 128,  64, 2, 1, None)                  \
  X( 7, BF16, Cooperative, 128, 256,  64, 2, 1, None)                  \
  /* fp8 e4m3 (FP8FastAccum), silu(sa*sb*acc + bias) */                \
  X( 8, FP8,  Pingpong,     64, 128, 128, 2, 1, SiluBias)              \
  X( 9, FP8,  Pingpong,    128, 128, 128, 1, 1, SiluBias)              \
  X(10, FP8,  Pingpong,    128, 128, 128, 2, 1, SiluBias)              \
  X(11, FP8,  Cooperative, 128, 256, 128, 2, 1, SiluBias)              \
  /* fp8 e4m3, scales only: sa*sb*acc */                               \
  X(12, FP8,  Pingpong,     64, 128, 128, 2, 1, None)                  \
  X(13, FP8,  Pingpong,    128, 128, 128, 1, 1, None)                  \
  X(14, FP8,  Pingpong,    128, 128, 128, 2, 1, None)                  \
  X(15, FP8,  Cooperative, 128, 256, 128, 2, 1, None)                  \
  /* fp8 e4m3, 1x128 / 128x128 block scales in the mainloop, silu(acc + bias) */ \
  X(16, FP8Block, Cooperative, 128, 128, 128, 1, 1, SiluBias)          \
  X(17, FP8Block, Cooperative, 128, 128, 128, 2, 1, SiluBias)          \
  X(18, FP8Block, Cooperative, 128, 128, 128, 1, 2, SiluBias)          \
  X(19, FP8Block, Cooperative, 256, 128, 128, 1, 1, SiluBias)          \
  X(20, FP8Block, Cooperative, 256, 128, 128, 1, 2, SiluBias)          \
  X(21, FP8Block, Pingpong,    128, 128, 128, 1, 1, SiluBias)          \
  /* fp8 e4m3 block scales, identity epilogue: bf16(acc) */            \
  X(22, FP8Block, Cooperative, 128, 128, 128, 1, 1, None)              \
  X(23, FP8Block, Cooperative, 128, 128, 128, 2, 1, None)              \
  X(24, FP8Block, Cooperative, 128, 128, 128, 1, 2, None)              \
  X(25, FP8Block, Cooperative, 256, 128, 128, 1, 1, None)              \
  X(26, FP8Block, Cooperative, 256, 128, 128, 1, 2, None)              \
  X(27, FP8Block, Pingpong,    128, 128, 128, 1, 1, None)

// build.sh reads these numbers to know how many units to compile; static_asserts keep them honest.
// The fp8block entries are the last ANCHOR_NUM_BLOCK_CONFIGS ids.
#define ANCHOR_NUM_CONFIGS 28
#define ANCHOR_NUM_BLOCK_CONFIGS 12
#define ANCHOR_FIRST_BLOCK_CONFIG (ANCHOR_NUM_CONFIGS - ANCHOR_NUM_BLOCK_CONFIGS)

// Block-scale granularity of the fp8block kind (DeepSeek-V3): 1x128 for X, 128x128 for W.
constexpr int kScaleBlock = 128;

// Everything a kernel runner needs; plain data so it can cross translation units.
struct RunCtx {
  int device = 0;
  int sm_count = 0;
  int M = 0, N = 0, K = 0;
  const void* A = nullptr;        // [M,K] bf16 or e4m3, K contiguous
  const void* B = nullptr;        // [N,K] bf16 or e4m3, K contiguous
  void* D = nullptr;              // [M,N] bf16, N contiguous
  const void* bias = nullptr;     // [N] bf16
  // fp8:      scale_a [M], scale_b [N]
  // fp8block: scale_a [M, ceil(K/128)] row-major, scale_b [ceil(N/128), ceil(K/128)] row-major
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  int swizzle = 1;                // persistent scheduler max_swizzle_size
  int raster = 0;                 // 0 = heuristic, 1 = along M, 2 = along N
  int mode = 0;                   // 0 = run once, 1 = timing loop
  int warmup = 10, reps = 50;
  void* flush = nullptr;          // L2 flush buffer, memset before every launch
  size_t flush_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t* ev_start = nullptr; // [reps]
  cudaEvent_t* ev_stop = nullptr;  // [reps]
  float* times_ms = nullptr;       // [reps] out
  void** workspace = nullptr;      // grown on demand by the runner
  size_t* workspace_bytes = nullptr;
  char msg[512] = {0};             // out: error text
};

// Return codes of a runner.
enum : int { kRunOk = 0, kRunSkip = 1, kRunError = 2 };

typedef int (*RunFn)(RunCtx&);
void anchor_register(int id, RunFn fn);  // defined with main()

#define ANCHOR_COUNT_ONE(...) +1
static_assert((0 ANCHOR_CONFIGS(ANCHOR_COUNT_ONE)) == ANCHOR_NUM_CONFIGS,
              "ANCHOR_NUM_CONFIGS must equal the number of entries in ANCHOR_CONFIGS");
#undef ANCHOR_COUNT_ONE
#define ANCHOR_COUNT_BLOCK(ID, KIND, ...) +((Kind::KIND == Kind::FP8Block) == (ID >= ANCHOR_FIRST_BLOCK_CONFIG))
static_assert((0 ANCHOR_CONFIGS(ANCHOR_COUNT_BLOCK)) == ANCHOR_NUM_CONFIGS,
              "fp8block configs must be exactly the last ANCHOR_NUM_BLOCK_CONFIGS ids");
#undef ANCHOR_COUNT_BLOCK

template <Kind K_, Sched S_, int TM, int TN, int TK, int CM, int CN, Epi E_>
struct Def {
  static constexpr Kind kind = K_;
  static constexpr Sched sched = S_;
  static constexpr Epi epi = E_;
  static constexpr int tm = TM, tn = TN, tk = TK, cm = CM, cn = CN;
};

template <int ID> struct CfgOf;
#define ANCHOR_CFGOF(ID, KIND, SCHED, TM, TN, TK, CM, CN, EPI) \
  template <> struct CfgOf<ID> { using type = Def<Kind::KIND, Sched::SCHED, TM, TN, TK, CM, CN, Epi::EPI>; };
ANCHOR_CONFIGS(ANCHOR_CFGOF)
#undef ANCHOR_CFGOF

}  // namespace anchor

#if ANCHOR_HAS_KERNELS
namespace anchor {

// Which configs this translation unit instantiates (of its source's kinds).
#if ANCHOR_UNIT == -1
constexpr bool anchor_owns(int) { return true; }
#else
#ifndef ANCHOR_NUNITS
#error "-DANCHOR_UNIT=g needs -DANCHOR_NUNITS=G"
#endif
static_assert(ANCHOR_NUNITS >= 1 && ANCHOR_UNIT >= 0 && ANCHOR_UNIT < ANCHOR_NUNITS, "bad ANCHOR_UNIT/ANCHOR_NUNITS");
constexpr bool anchor_owns(int id) { return id % ANCHOR_NUNITS == ANCHOR_UNIT; }
#endif

// Registers Runner<CfgOf<ID>::type>::run for every owned ID whose kind Source::has(kind).
// Call once per source file from a namespace-scope initialiser.
template <class Source, template <class> class Runner, int... IDs>
int anchor_register_all(std::integer_sequence<int, IDs...>) {
  auto one = [](auto id_c) {
    constexpr int ID = decltype(id_c)::value;
    using D = typename CfgOf<ID>::type;
    if constexpr (anchor_owns(ID) && Source::has(D::kind)) anchor_register(ID, &Runner<D>::run);
  };
  (one(std::integral_constant<int, IDs>{}), ...);
  return 0;
}

#define ANCHOR_CUDA_OR_FAIL(expr)                                                            \
  do {                                                                                      \
    cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      snprintf(c.msg, sizeof(c.msg), "%s: %s", #expr, cudaGetErrorString(e_));             \
      return kRunError;                                                                     \
    }                                                                                       \
  } while (0)

// can_implement + workspace + initialize, then one launch (mode 0) or the timing loop (mode 1).
// Timing: every launch is preceded by an L2 flush (memset of a buffer >> L2) and bracketed by its
// own cudaEvent pair. Params/TMA descriptors are built once (initialize) outside the loop.
template <class Gemm>
int run_gemm(RunCtx& c, typename Gemm::Arguments& args) {
  Gemm gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) {
    snprintf(c.msg, sizeof(c.msg), "can_implement: %s", cutlassGetStatusString(st));
    return kRunSkip;
  }
  size_t ws = Gemm::get_workspace_size(args);
  if (ws > *c.workspace_bytes) {
    if (*c.workspace) cudaFree(*c.workspace);
    *c.workspace = nullptr;
    *c.workspace_bytes = 0;
    ANCHOR_CUDA_OR_FAIL(cudaMalloc(c.workspace, ws));
    *c.workspace_bytes = ws;
  }
  st = gemm.initialize(args, *c.workspace, c.stream);
  if (st != cutlass::Status::kSuccess) {
    snprintf(c.msg, sizeof(c.msg), "initialize: %s", cutlassGetStatusString(st));
    return kRunError;
  }

  if (c.mode == 0) {
    st = gemm.run(c.stream);
    if (st != cutlass::Status::kSuccess) {
      snprintf(c.msg, sizeof(c.msg), "run: %s", cutlassGetStatusString(st));
      return kRunError;
    }
    ANCHOR_CUDA_OR_FAIL(cudaGetLastError());
    ANCHOR_CUDA_OR_FAIL(cudaStreamSynchronize(c.stream));
    return kRunOk;
  }

  for (int i = 0; i < c.warmup; ++i) {
    ANCHOR_CUDA_OR_FAIL(cudaMemsetAsync(c.flush, i & 0xff, c.flush_bytes, c.stream));
    st = gemm.run(c.stream);
    if (st != cutlass::Status::kSuccess) {
      snprintf(c.msg, sizeof(c.msg), "run (warmup): %s", cutlassGetStatusString(st));
      return kRunError;
    }
  }
  for (int i = 0; i < c.reps; ++i) {
    ANCHOR_CUDA_OR_FAIL(cudaMemsetAsync(c.flush, (i + 7) & 0xff, c.flush_bytes, c.stream));
    ANCHOR_CUDA_OR_FAIL(cudaEventRecord(c.ev_start[i], c.stream));
    st = gemm.run(c.stream);
    ANCHOR_CUDA_OR_FAIL(cudaEventRecord(c.ev_stop[i], c.stream));
    if (st != cutlass::Status::kSuccess) {
      snprintf(c.msg, sizeof(c.msg), "run: %s", cutlassGetStatusString(st));
      return kRunError;
    }
  }
  ANCHOR_CUDA_OR_FAIL(cudaGetLastError());
  ANCHOR_CUDA_OR_FAIL(cudaStreamSynchronize(c.stream));
  for (int i = 0; i < c.reps; ++i) {
    ANCHOR_CUDA_OR_FAIL(cudaEventElapsedTime(&c.times_ms[i], c.ev_start[i], c.ev_stop[i]));
  }
  return kRunOk;
}

}  // namespace anchor
#endif  // ANCHOR_HAS_KERNELS
