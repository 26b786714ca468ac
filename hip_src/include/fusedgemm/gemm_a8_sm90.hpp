// gemm_a8 on Hopper tensor cores: TMA -> shared memory -> wgmma, warp-specialised, split-K over a cluster.
//
// Same semantics, epilogue functor and preshuffled B as gemm_a8.hpp; only the way operands reach the tensor
// cores differs (mma.sync on sm_90 runs fp8 as converted f16 HMMA; wgmma runs it natively as QGMMA).
//
// Block = kConsumerWarpgroups x 128 consumer threads (warpgroup w owns rows 64w..64w+63 of the block tile)
// plus one producer warp. The producer streams K blocks of 128 bytes into a ring of kStages shared-memory
// stages; "full" barriers count the copy engine's bytes, "empty" barriers count consumer warps done.
//
// Shared-memory layouts, both K-major as wgmma reads them:
//   A stage [BM rows][128 B], 128-byte swizzle (TMA writes it, the descriptor says kSwizzle128B).
//   B stage [8 K chunks][BN / 8 core matrices][8 rows][16 B], no swizzle. The preshuffled (16,16) weight
//     already stores each 16-row x 16-byte chunk as two contiguous 8x16-byte core matrices; TMA copy c of
//     a stage gathers K chunk c of all BN / 16 row blocks, so along N the core matrices sit 128 B apart
//     (stride offset) and along K BN x 16 B apart (leading offset).
//
// Precision: fp8 products are accumulated by the tensor core into a per-K-block register tile that is
// added to the fp32 result every 128 values of K (the tensor core's own fp8 accumulation keeps fewer
// mantissa bits); int8 accumulates exactly in int32 either way.
//
// Split-K: a launch may group S CTAs (S = 1, 2, 4, 8) along grid z into a cluster; CTA r takes the r-th
// share of the K blocks, parks its partial tile in its shared memory, and after a cluster barrier reduces
// one S-th of the tile's columns over all S CTAs' shared memory (fixed order: deterministic) and stores it.
// No workspace, no atomics, one launch.
#pragma once
#include "arch/sm90_async.hpp"
#include "epilogue.hpp"

#if defined(FG_NVIDIA)
namespace fg {

template <int kBlockM_, int kStages_, int kMinBlocksPerSm_>
struct WgmmaConfig {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = 128;
  static constexpr int kBlockK = 128;  // bytes = fp8/int8 values of K per stage
  static constexpr int kStages = kStages_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kConsumerWarpgroups = kBlockM / 64;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp
  static constexpr int kStageBytesA = kBlockM * kBlockK;
  static constexpr int kStageBytesB = kBlockN * kBlockK;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kAccPerThread = kBlockN / 2;
  static constexpr int kReduceBytes = kAccPerThread * kConsumerThreads * 4;
  static constexpr int kBarrierOffset = kStages * kStageBytes;
  // + 1024: the dynamic shared-memory base is rounded up to the 1024-byte alignment the swizzle needs.
  static constexpr int kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;
  static_assert(kBlockM == 64 || kBlockM == 128, "one or two consumer warpgroups");
  static_assert(kReduceBytes <= kBarrierOffset, "the split-K partial tile reuses the stage buffers");
};

// Names must match runtime/kernels.py GEMM_A8_CONFIGS.
using ConfigW64N128 = WgmmaConfig<64, 4, 2>;    // M <= 64: two CTAs per SM, 4 x 24 KB in flight each
using ConfigW128N128 = WgmmaConfig<128, 6, 1>;  // M > 64: 6 x 32 KB stages

// Writes the two adjacent outputs (row, col), (row, col + 1) through the epilogue, rounded once.
template <class Out, class Act>
FG_DEVICE void store_pair(u16* __restrict__ out, const void* __restrict__ bias, const float* __restrict__ scale_b,
                          int N, int bias_kind, int scale_b_stride, float row_scale, int row, int col, float v0,
                          float v1) {
  using Epilogue = EpilogueScaleBiasAct<Act>;
  const float y0 = Epilogue::apply(v0, row_scale * load_scale(scale_b, scale_b_stride, col),
                                   load_bias(bias, bias_kind, col));
  const float y1 = Epilogue::apply(v1, row_scale * load_scale(scale_b, scale_b_stride, col + 1),
                                   load_bias(bias, bias_kind, col + 1));
  *reinterpret_cast<u32*>(out + static_cast<i64>(row) * N + col) =
      static_cast<u32>(Out::from_float(y0)) | (static_cast<u32>(Out::from_float(y1)) << 16);
}

// Accumulator element j of consumer thread t (t counted within its warpgroup): row and column in the
// warpgroup's 64 x 128 tile (the wgmma D fragment layout).
FG_DEVICE int acc_row(int t, int j) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((j >> 1) & 1); }
FG_DEVICE int acc_col(int t, int j) { return 8 * (j >> 2) + 2 * (t & 3) + (j & 1); }

template <class In, class Out, class Act, class Cfg>
FG_DEVICE void gemm_a8_wgmma(const sm90::TmaDesc& a_map,  // A [M, K] row-major, box 128 B x BM, swizzle 128
                             const sm90::TmaDesc& b_map,  // B (16,16) preshuffled, see above
                             u16* __restrict__ out, const void* __restrict__ bias,
                             const float* __restrict__ scale_a, const float* __restrict__ scale_b, int M, int N,
                             int K, int bias_kind, int scale_a_stride, int scale_b_stride, float alpha) {
  using Mma = sm90::Wgmma<In>;
  using Acc = typename Mma::Acc;
  constexpr int kAcc = Cfg::kAccPerThread;
  static_assert(kAcc == Mma::kAccPerThread, "one m64n128 wgmma per warpgroup per K step");

  if (sm90::dynamic_smem_bytes() < Cfg::kSmemBytes) __trap();  // host / device layouts disagree: fail loudly
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + ((1024 - (sm90::smem_addr(smem_raw) & 1023)) & 1023);
  u8* stage_a = smem;
  u8* stage_b = smem + Cfg::kStages * Cfg::kStageBytesA;
  sm90::u64* full = reinterpret_cast<sm90::u64*>(smem + Cfg::kBarrierOffset);
  sm90::u64* empty = full + Cfg::kStages;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int m0 = static_cast<int>(blockIdx.y) * Cfg::kBlockM;
  const int n0 = static_cast<int>(blockIdx.x) * Cfg::kBlockN;
  const int splits = static_cast<int>(sm90::cluster_size());
  const int rank = static_cast<int>(sm90::cluster_rank());
  const int k_blocks = (K + Cfg::kBlockK - 1) / Cfg::kBlockK;
  const int kb_begin = rank * k_blocks / splits;
  const int kb_count = (rank + 1) * k_blocks / splits - kb_begin;

  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], Cfg::kConsumerThreads / 32);
    }
    sm90::fence_mbar_init();
  }
  __syncthreads();

  Acc acc[kAcc];
#pragma unroll
  for (int j = 0; j < kAcc; ++j) acc[j] = Acc(0);

  if (warp == Cfg::kConsumerThreads / 32) {
    // ---- producer warp: one lane issues the copies -------------------------------------------------------
    if (lane == 0) {
      sm90::prefetch_tma_desc(&a_map);
      sm90::prefetch_tma_desc(&b_map);
      for (int i = 0; i < kb_count; ++i) {
        const int s = i % Cfg::kStages;
        sm90::mbar_wait(&empty[s], ((i / Cfg::kStages) & 1) ^ 1);
        sm90::mbar_arrive_expect_tx(&full[s], Cfg::kStageBytes);
        const int kb = kb_begin + i;
        sm90::tma_load_2d(stage_a + s * Cfg::kStageBytesA, &a_map, &full[s], kb * Cfg::kBlockK, m0);
        u8* b_dst = stage_b + s * Cfg::kStageBytesB;
#pragma unroll
        for (int c = 0; c < Cfg::kBlockK / 16; ++c)  // K chunk c of every 16-row block of the tile
          sm90::tma_load_3d(b_dst + c * Cfg::kBlockN * 16, &b_map, &full[s], 0, kb * (Cfg::kBlockK / 16) + c,
                            n0 / 16);
      }
    }
  } else {
    // ---- consumer warpgroups ------------------------------------------------------------------------------
    const int wg = warp >> 2;
    Acc part[kAcc];
    for (int i = 0; i < kb_count; ++i) {
      const int s = i % Cfg::kStages;
      sm90::mbar_wait(&full[s], (i / Cfg::kStages) & 1);
      const u32 a_base = sm90::smem_addr(stage_a + s * Cfg::kStageBytesA + wg * 64 * Cfg::kBlockK);
      const u32 b_base = sm90::smem_addr(stage_b + s * Cfg::kStageBytesB);
      sm90::fence_regs(part);
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
        const sm90::u64 da = sm90::smem_desc(a_base + 32 * kk, 16, 8 * Cfg::kBlockK, sm90::kSwizzle128B);
        const sm90::u64 db = sm90::smem_desc(b_base + 2 * kk * Cfg::kBlockN * 16, Cfg::kBlockN * 16, 128,
                                             sm90::kNoSwizzle);
        Mma::mma(part, da, db, kk);
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait_all();
      sm90::fence_regs(part);
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&empty[s]);
#pragma unroll
      for (int j = 0; j < kAcc; ++j) acc[j] += part[j];  // fp32 promotion every 128 values of K
    }
  }

  // ---- epilogue -------------------------------------------------------------------------------------------
  const int ct = tid & 127;                        // thread within its consumer warpgroup
  const int wg_row0 = m0 + 64 * (warp >> 2);       // first row of the warpgroup's tile
  const bool consumer = tid < Cfg::kConsumerThreads;
  if (splits == 1) {
    if (!consumer) return;
    float row_scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = wg_row0 + acc_row(ct, 2 * h);
      row_scale[h] = row < M ? alpha * load_scale(scale_a, scale_a_stride, row) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kAcc; j += 2) {
      const int row = wg_row0 + acc_row(ct, j);
      const int col = n0 + acc_col(ct, j);
      if (row < M && col < N)
        store_pair<Out, Act>(out, bias, scale_b, N, bias_kind, scale_b_stride, row_scale[(j >> 1) & 1], row,
                             col, static_cast<float>(acc[j]), static_cast<float>(acc[j + 1]));
    }
    return;
  }

  // Split-K over the cluster. Partial tile layout: element j of consumer thread tid at [j][tid], stored as
  // the accumulator's own bits (int32 partial sums stay exact).
  u32* partial = reinterpret_cast<u32*>(smem);
  __syncthreads();  // every consumer is past its last wgmma: the stage buffers are free
  if (consumer) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) partial[j * Cfg::kConsumerThreads + tid] = __builtin_bit_cast(u32, acc[j]);
  }
  sm90::cluster_sync();
  if (consumer) {
    const int per_rank = kAcc / splits;  // a multiple of 4: whole 8-column groups
    float row_scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = wg_row0 + acc_row(ct, 2 * h);
      row_scale[h] = row < M ? alpha * load_scale(scale_a, scale_a_stride, row) : 0.f;
    }
    for (int j = rank * per_rank; j < (rank + 1) * per_rank; j += 2) {
      Acc v0 = Acc(0), v1 = Acc(0);
      for (int r = 0; r < splits; ++r) {  // fixed order: the result does not depend on timing
        v0 += __builtin_bit_cast(Acc, sm90::ld_cluster_u32(&partial[j * Cfg::kConsumerThreads + tid], r));
        v1 += __builtin_bit_cast(Acc, sm90::ld_cluster_u32(&partial[(j + 1) * Cfg::kConsumerThreads + tid], r));
      }
      const int row = wg_row0 + acc_row(ct, j);
      const int col = n0 + acc_col(ct, j);
      if (row < M && col < N)
        store_pair<Out, Act>(out, bias, scale_b, N, bias_kind, scale_b_stride,
                             (j & 2) ? row_scale[1] : row_scale[0], row, col, static_cast<float>(v0),
                             static_cast<float>(v1));  // (j is not a constant here: no register-array index)
    }
  }
  sm90::cluster_sync();  // keep this CTA's partial tile alive until every CTA has read it
}

}  // namespace fg
#endif  // FG_NVIDIA
