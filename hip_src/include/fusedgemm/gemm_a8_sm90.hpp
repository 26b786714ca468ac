// gemm_a8 on Hopper tensor cores: TMA -> shared memory -> wgmma, warp-specialised, split-K over a cluster.
//
// Same semantics, epilogue functor and preshuffled B as gemm_a8.hpp; only the way operands reach the tensor
// cores differs (mma.sync on sm_90 runs fp8 as converted f16 HMMA; wgmma runs it natively as QGMMA).
//
// Block = kConsumerWarpgroups x 128 consumer threads (warpgroup w owns rows 64w..64w+63 of the block tile)
// plus a producer: one warp, or a whole warpgroup that hands its registers to the consumer warpgroups
// (setmaxnreg) when they hold more accumulators (three warpgroups, 192-wide tiles, two accumulator chains). One producer lane streams K blocks of 128 bytes into a ring of kStages shared-memory
// stages; "full" barriers count the copy engine's bytes, "empty" barriers count consumer warps done.
//
// Shared-memory layouts, both K-major as wgmma reads them:
//   A stage [BM rows][128 B], 128-byte swizzle (TMA writes it, the descriptor says kSwizzle128B).
//   B stage [8 K chunks][BN / 8 core matrices][8 rows][16 B], no swizzle. The preshuffled (16,16) weight
//     already stores each 16-row x 16-byte chunk as two contiguous 8x16-byte core matrices; one TMA copy
//     per stage, through a 3-D map whose middle dimension is the row block and outer one the K chunk,
//     gathers the stage's 8 K chunks of all BN / 16 row blocks, so along N the core matrices sit 128 B
//     apart (stride offset) and along K BN x 16 B apart (leading offset).
//
// Precision: fp8 products are accumulated by the tensor core into a per-K-block register tile that is
// added to the fp32 result every 128 values of K (the tensor core's own fp8 accumulation keeps fewer
// mantissa bits); int8 accumulates exactly in int32 either way. With two accumulator chains (kChains),
// consecutive K blocks alternate between two such tiles, so one is promoted while the other's MMAs run.
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

// kSwapAB (decode, M <= kBlockM <= 64): the MMAs compute C^T = B . A^T, so the weight's rows are the wgmma's
// M (kBlockN / 64 MMAs of 64 rows per K step, one warpgroup) and the activation's rows its N (kBlockM, down
// to 16). At M = 1 an unswapped m64 MMA computes 64 rows for one: swapped, the tensor core does 1/4 of that
// work and the MMA-only time of a decode call drops from ~8 us to ~2 (qkv M = 1, docs/perf-notes.md).
// The shared-memory stages are the same; only the descriptors trade places.
//
// kChains (unswapped tiles): independent accumulator chains per warpgroup. Consecutive K blocks alternate
// between them (fp8: two partial tiles; int8: two int32 tiles summed at the end), so a block's MMAs never wait
// for the previous block's results inside the tensor core, and an fp8 block's promotion runs while the next
// block's MMAs do.
template <int kBlockM_, int kStages_, int kMinBlocksPerSm_, int kBlockN_ = 128, bool kSwapAB_ = false,
          int kChains_ = 1>
struct WgmmaConfig {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;  // one m64nBNk32 wgmma per warpgroup per K step: 128 or 192
  static constexpr int kBlockK = 128;  // bytes = fp8/int8 values of K per stage
  static constexpr int kStages = kStages_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr bool kSwapAB = kSwapAB_;
  static constexpr int kChains = kChains_;
  static constexpr int kConsumerWarpgroups = kSwapAB ? 1 : kBlockM / 64;
  static constexpr int kMmaN = kSwapAB ? kBlockM : kBlockN;        // the wgmma's N
  static constexpr int kMmasPerStep = kSwapAB ? kBlockN / 64 : 1;  // per warpgroup and K step of 32
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  // Each SM sub-partition has 16384 registers for its warps: three consumer warpgroups plus a producer warp
  // would be capped at 128 registers per thread (spills). Then the producer is a whole warpgroup that gives
  // registers back (setmaxnreg) so the consumers can hold 160. Otherwise the producer is one warp.
  // Likewise 192-wide tiles: 2 x 96 accumulators per thread do not fit the 168 registers that two consumer
  // warpgroups and a producer warp get (one sub-partition holds 3 of the 9 warps).
  // Two chains of 64 columns likewise: fp8 holds acc + 2 partial tiles = 192 accumulators per thread.
  static constexpr bool kSetMaxNReg = kConsumerWarpgroups == 3 || kBlockN > 128 || kChains > 1;
  static constexpr int kProducerRegs = kConsumerWarpgroups == 3 ? 24 : 40;
  static constexpr int kConsumerRegs = kConsumerWarpgroups == 3 ? 160 : 232;
  static constexpr int kThreads = kConsumerThreads + (kSetMaxNReg ? 128 : 32);
  static constexpr int kStageBytesA = kBlockM * kBlockK;
  static constexpr int kStageBytesB = kBlockN * kBlockK;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kAccPerThread = kMmasPerStep * kMmaN / 2;
  static constexpr int kReduceBytes = kAccPerThread * kConsumerThreads * 4;
  static constexpr int kBarrierOffset = kStages * kStageBytes;
  // + 1024: the dynamic shared-memory base is rounded up to the 1024-byte alignment the swizzle needs.
  static constexpr int kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;
  static_assert(kSwapAB ? kBlockM == 16 && kBlockN % 64 == 0 : kBlockM % 64 == 0 && kBlockM <= 192,
                "one to three consumer warpgroups of 64 rows; swapped: 16 activation rows, 64-row weight MMAs");
  static_assert(kReduceBytes <= kBarrierOffset, "the split-K partial tile reuses the stage buffers");
  static_assert(kChains == 1 || (kChains == 2 && !kSwapAB && kConsumerWarpgroups == 2 && kBlockN == 128),
                "two chains: fp8 needs 3 x 64 accumulators per thread, which fits 2 consumer warpgroups of n128 only");
};

// Names must match runtime/kernels.py GEMM_A8_CONFIGS.
using ConfigW64N128 = WgmmaConfig<64, 4, 2>;    // M <= 64: two CTAs per SM, 4 x 24 KB in flight each
// M > 64: 6 x 32 KB stages, two accumulator chains (H100, qkv M = 8192, MMAs alone: 335 us against 405 with
// one chain; the whole kernel 416 against 432)
using ConfigW128N128 = WgmmaConfig<128, 6, 1, 128, false, 2>;
// 192-wide tiles: each wgmma does 1.5x the work of an n128 one for the same A bytes and per-block overhead
// (wait, promotion, barrier); 96 + 96 accumulator registers per consumer thread; 5 x 40 KB stages.
using ConfigW128N192 = WgmmaConfig<128, 5, 1, 192>;
using ConfigW192N128 = WgmmaConfig<192, 5, 1>;  // large M: three consumer warpgroups keep the tensor core fed
                                                // while one of them promotes; 5 x 40 KB stages
using ConfigV16N128 = WgmmaConfig<16, 4, 3, 128, true>;  // M <= 16, swapped: 4 x 18 KB stages, 3 CTAs per SM

// Which output tile a CTA computes. CTAs start roughly in launch order (blockIdx.x fastest). Row-major tile
// order makes one wave sweep a whole row of B's column tiles: right while B fits in L2 (50 MB on H100/H200),
// but a larger weight (gate_up: 117 MB of fp8) would then come again from DRAM for every row block of A.
// For those, consecutive CTAs walk down a group of 8 row blocks before moving one column right: a wave of
// 132 CTAs touches ~8 row blocks x ~17 column tiles of the operands. (Grouping weights that fit in L2
// measured 2-6% slower on the H200, so they keep row-major order.)
constexpr int kTileGroupRows = 8;
constexpr i64 kGroupTilesAboveWeightBytes = i64(48) << 20;
FG_DEVICE void tile_of_block(int N, int K, int& m_block, int& n_block) {
  if (static_cast<i64>(N) * K <= kGroupTilesAboveWeightBytes) {
    m_block = static_cast<int>(blockIdx.y);
    n_block = static_cast<int>(blockIdx.x);
    return;
  }
  const int num_n = static_cast<int>(gridDim.x), num_m = static_cast<int>(gridDim.y);
  const int pid = static_cast<int>(blockIdx.y) * num_n + static_cast<int>(blockIdx.x);
  const int first_m = pid / (kTileGroupRows * num_n) * kTileGroupRows;
  const int rows = min(num_m - first_m, kTileGroupRows);
  const int local = pid % (kTileGroupRows * num_n);
  m_block = first_m + local % rows;
  n_block = local / rows;
}

// Rows of A one TMA copy brings: the whole tile, except when all of M fits in one tile: then M rounded up to
// 8 (the copy engine slows down on out-of-bounds rows; rows of the tile past the box keep stale bytes, which
// only reach output rows >= M, never stored). The host encodes A's tensor map with the same box.
template <class Cfg>
FG_DEVICE int a_box_rows(int M) {
  return M >= Cfg::kBlockM ? Cfg::kBlockM : ((M + 7) & ~7);
}

// Writes the two adjacent outputs (row, col), (row, col + 1) through the epilogue, rounded once.
template <class Out, class Act>
FG_DEVICE void store_pair(u16* __restrict__ out, int N, int row, int col, float v0, float v1, float scale0,
                          float scale1, float bias0, float bias1) {
  using Epilogue = EpilogueScaleBiasAct<Act>;
  const float y0 = Epilogue::apply(v0, scale0, bias0);
  const float y1 = Epilogue::apply(v1, scale1, bias1);
  *reinterpret_cast<u32*>(out + static_cast<i64>(row) * N + col) =
      static_cast<u32>(Out::from_float(y0)) | (static_cast<u32>(Out::from_float(y1)) << 16);
}

// Accumulator element j of consumer thread t (t counted within its warpgroup): row and column in the
// warpgroup's 64 x 128 tile (the wgmma D fragment layout).
FG_DEVICE int acc_row(int t, int j) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((j >> 1) & 1); }
FG_DEVICE int acc_col(int t, int j) { return 8 * (j >> 2) + 2 * (t & 3) + (j & 1); }

// Column scales and bias of a consumer thread's accumulator columns: for each of its kGroups 8-column groups
// g, columns n0 + acc_col(t, 4 g) and the one after (0 past N). All are loaded before the first store, so
// the epilogue waits for one round of loads instead of one per group (ncu, qkv M = 8192: the per-group
// loads were ~9% of all warp stall samples, with the tensor core idle behind them).
template <int kGroups>
struct ColumnOperands {
  float scale[2 * kGroups], bias[2 * kGroups];

  FG_DEVICE void load(const void* __restrict__ bias_ptr, const float* __restrict__ scale_b, int scale_b_stride,
                      int bias_kind, int N, int n0, int t) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int col = n0 + acc_col(t, 4 * g);
      const bool in = col < N;  // N % 16 == 0: a column pair is all in or all out
#pragma unroll
      for (int e = 0; e < 2; ++e) scale[2 * g + e] = in ? load_scale(scale_b, scale_b_stride, col + e) : 0.f;
    }
    // One loop per bias type (a uniform branch outside, independent loads inside).
    auto load_all = [&](auto load_one) {
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int col = n0 + acc_col(t, 4 * g);
#pragma unroll
        for (int e = 0; e < 2; ++e) bias[2 * g + e] = col < N ? load_one(col + e) : 0.f;
      }
    };
    if (bias_kind == kBiasF32)
      load_all([&](int c) { return static_cast<const float*>(bias_ptr)[c]; });
    else if (bias_kind == kBiasNone)
      load_all([](int) { return 0.f; });
    else
      load_all([&](int c) { return load_bias(bias_ptr, bias_kind, c); });
  }
};

// The epilogue of one 8-column group (accumulator elements j..j+3 of a thread: columns col, col + 1 of rows
// row0 and row0 + 8) with those columns' scales sb0, sb1 and biases b0, b1.
template <class Out, class Act, class Acc>
FG_DEVICE void store_group(u16* __restrict__ out, int M, int N, const float (&row_scale)[2], int row0, int col,
                           float sb0, float sb1, float b0, float b1, Acc v0, Acc v1, Acc v2, Acc v3) {
  if (col >= N) return;
  if (row0 < M)
    store_pair<Out, Act>(out, N, row0, col, static_cast<float>(v0), static_cast<float>(v1), row_scale[0] * sb0,
                         row_scale[0] * sb1, b0, b1);
  if (row0 + 8 < M)
    store_pair<Out, Act>(out, N, row0 + 8, col, static_cast<float>(v2), static_cast<float>(v3), row_scale[1] * sb0,
                         row_scale[1] * sb1, b0, b1);
}

// Split-K over the cluster, step 1: once every consumer is past its last wgmma (the stages are free), park this
// thread's accumulators in its CTA's shared memory as their own bits (int32 partial sums stay exact), element
// j of consumer thread t at [j][t], and wait until every CTA of the cluster has.
template <class Cfg, int kAcc, class Acc>
FG_DEVICE const u32* park_partials(const Acc (&acc)[kAcc], u8* smem, int t) {
  u32* partial = reinterpret_cast<u32*>(smem);
  sm90::named_barrier_sync(1, Cfg::kConsumerThreads);
#pragma unroll
  for (int j = 0; j < kAcc; ++j) partial[j * Cfg::kConsumerThreads + t] = __builtin_bit_cast(u32, acc[j]);
  sm90::cluster_sync();
  return partial;
}

// Step 2: elements j .. j + kN - 1 of thread t summed over the cluster's CTAs in rank order, so the result does
// not depend on timing. (Step 3, the caller's: a last cluster barrier keeps each CTA's partial tile alive
// until every CTA has read it.)
template <class Cfg, int kN, class Acc>
FG_DEVICE void cluster_sum(const u32* partial, int j, int t, int splits, Acc (&v)[kN]) {
#pragma unroll
  for (int e = 0; e < kN; ++e) v[e] = Acc(0);
  for (int r = 0; r < splits; ++r)
#pragma unroll
    for (int e = 0; e < kN; ++e)
      v[e] += __builtin_bit_cast(Acc, sm90::ld_cluster_u32(&partial[(j + e) * Cfg::kConsumerThreads + t], r));
}

// The swapped (kSwapAB) epilogue. Accumulator element j of consumer thread t: MMA h = j / kAccPerMma, whose
// D row (a weight row: output column n0 + 64 h + acc_row) and column (an activation row: output row m0 +
// acc_col) follow the wgmma D layout. Each value is stored alone (2 bytes; a decode call writes a few KB).
// With split-K, the partial tiles are reduced over the cluster as in the unswapped path (fixed order), each
// CTA storing 1 / splits of the elements.
template <class Out, class Act, class Cfg, int kAcc, int kAccPerMma, class Acc>
FG_DEVICE void store_swapped(u16* __restrict__ out, const void* __restrict__ bias, const float* __restrict__ scale_a,
                             const float* __restrict__ scale_b, int M, int N, int bias_kind, int scale_a_stride,
                             int scale_b_stride, float alpha, int m0, int n0, int t, int splits, int rank,
                             const Acc (&acc)[kAcc], u8* smem) {
  using Epilogue = EpilogueScaleBiasAct<Act>;
  auto store_one = [&](int j, Acc v) {
    const int h = j / kAccPerMma, e = j % kAccPerMma;
    const int m = m0 + acc_col(t, e), n = n0 + 64 * h + acc_row(t, e);
    if (m >= M || n >= N) return;
    const float scale = alpha * load_scale(scale_a, scale_a_stride, m) * load_scale(scale_b, scale_b_stride, n);
    out[static_cast<i64>(m) * N + n] =
        Out::from_float(Epilogue::apply(static_cast<float>(v), scale, load_bias(bias, bias_kind, n)));
  };
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) store_one(j, acc[j]);
    return;
  }
  const u32* partial = park_partials<Cfg>(acc, smem, t);
  const int per_rank = kAcc / splits;
  for (int j = rank * per_rank; j < (rank + 1) * per_rank; ++j) {
    Acc v[1];
    cluster_sum<Cfg>(partial, j, t, splits, v);
    store_one(j, v[0]);
  }
  sm90::cluster_sync();  // keep this CTA's partial tile alive until every CTA has read it
}

// Timing probes for performance work (ci/probe_sm90.py builds them; the package never does): which part of
// the pipeline bounds the kernel. kProbe 1: no MMAs (copies only); 2: no copies (MMAs on whatever is in
// shared memory); 3: B is a plain row-major [N, K] weight read through a 2-D 128-byte-swizzled map; 4: no
// copies, and the MMAs read B through a 128-byte-swizzle descriptor (does B's no-swizzle layout cost MMA rate?).
enum ProbeMode : int { kProbeNone = 0, kProbeNoMma = 1, kProbeNoCopy = 2, kProbePlainB = 3, kProbeNoCopyPlainB = 4 };
__host__ __device__ constexpr bool probe_no_copy(int probe) { return probe == kProbeNoCopy || probe == kProbeNoCopyPlainB; }
__host__ __device__ constexpr bool probe_plain_b(int probe) { return probe == kProbePlainB || probe == kProbeNoCopyPlainB; }

template <class In, class Out, class Act, class Cfg, int kProbe = kProbeNone>
FG_DEVICE void gemm_a8_wgmma(const sm90::TmaDesc& a_map,  // A [M, K] row-major, box 128 B x BM, swizzle 128
                             const sm90::TmaDesc& b_map,  // B (16,16) preshuffled, see above
                             u16* __restrict__ out, const void* __restrict__ bias,
                             const float* __restrict__ scale_a, const float* __restrict__ scale_b, int M, int N,
                             int K, int bias_kind, int scale_a_stride, int scale_b_stride, float alpha) {
  using Mma = sm90::Wgmma<In, Cfg::kMmaN>;
  using Acc = typename Mma::Acc;
  constexpr int kAcc = Cfg::kAccPerThread;
  constexpr int kAccPerMma = Mma::kAccPerThread;
  static_assert(kAcc == Cfg::kMmasPerStep * kAccPerMma, "kMmasPerStep m64 wgmmas per warpgroup per K step");

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
  int m_block, n_block;
  tile_of_block(N, K, m_block, n_block);
  const int m0 = m_block * Cfg::kBlockM;
  const int n0 = n_block * Cfg::kBlockN;
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

  if (warp >= Cfg::kConsumerThreads / 32) {
    // ---- producer: one lane issues the copies ------------------------------------------------------------
    if constexpr (Cfg::kSetMaxNReg) sm90::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (warp == Cfg::kConsumerThreads / 32 && lane == 0) {
      const int a_rows = a_box_rows<Cfg>(M);
      sm90::prefetch_tma_desc(&a_map);
      sm90::prefetch_tma_desc(&b_map);
      for (int i = 0; i < kb_count; ++i) {
        const int s = i % Cfg::kStages;
        sm90::mbar_wait(&empty[s], ((i / Cfg::kStages) & 1) ^ 1);
        if constexpr (probe_no_copy(kProbe)) {
          sm90::mbar_arrive(&full[s]);
          continue;
        }
        sm90::mbar_arrive_expect_tx(&full[s], a_rows * Cfg::kBlockK + Cfg::kStageBytesB);
        const int kb = kb_begin + i;
        sm90::tma_load_2d(stage_a + s * Cfg::kStageBytesA, &a_map, &full[s], kb * Cfg::kBlockK, m0);
        u8* b_dst = stage_b + s * Cfg::kStageBytesB;
        if constexpr (kProbe == kProbePlainB) {
          sm90::tma_load_2d(b_dst, &b_map, &full[s], kb * Cfg::kBlockK, n0);
          continue;
        }
        // One copy gathers K chunks kb*8 .. kb*8+7 of the tile's BN/16 row blocks; the map's dimensions are
        // ordered (256 B, row block, K chunk), so the box lands as [K chunk][row block][256 B].
        sm90::tma_load_3d(b_dst, &b_map, &full[s], 0, n0 / 16, kb * (Cfg::kBlockK / 16));
      }
    }
    if (splits > 1) {  // the cluster barriers of the split-K reduction count every thread
      sm90::cluster_sync();
      sm90::cluster_sync();
    }
    return;
  }

  // ---- consumer warpgroups --------------------------------------------------------------------------------
  if constexpr (Cfg::kSetMaxNReg) sm90::setmaxnreg_inc<Cfg::kConsumerRegs>();
  Acc acc[kAcc];
#pragma unroll
  for (int j = 0; j < kAcc; ++j) acc[j] = Acc(0);
  {
    const int wg = warp >> 2;
    // Issue K block i's MMAs into `d` (asynchronously; committed as one group). accumulate = false: the
    // block's first MMA overwrites d.
    auto issue = [&](int i, Acc(&d)[kAcc], bool accumulate) {
      const int s = i % Cfg::kStages;
      sm90::mbar_wait(&full[s], (i / Cfg::kStages) & 1);
      if constexpr (kProbe == kProbeNoMma) return;
      const u32 a_base = sm90::smem_addr(stage_a + s * Cfg::kStageBytesA + wg * 64 * Cfg::kBlockK);
      const u32 b_base = sm90::smem_addr(stage_b + s * Cfg::kStageBytesB);
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
        const sm90::u64 da = sm90::smem_desc(a_base + 32 * kk, 16, 8 * Cfg::kBlockK, sm90::kSwizzle128B);
        if constexpr (Cfg::kSwapAB) {
          // Weight rows 64h..64h+63 (8 core matrices of 8 rows, 128 B apart) are the MMA's A, the activation
          // its B: D[h] = B_h . A^T.
#pragma unroll
          for (int h = 0; h < Cfg::kMmasPerStep; ++h) {
            const sm90::u64 dw = sm90::smem_desc(b_base + 2 * kk * Cfg::kBlockN * 16 + h * 8 * 128,
                                                 Cfg::kBlockN * 16, 128, sm90::kNoSwizzle);
            Mma::mma(*reinterpret_cast<Acc(*)[kAccPerMma]>(&d[h * kAccPerMma]), dw, da, accumulate || kk > 0);
          }
        } else {
          const sm90::u64 db =
              probe_plain_b(kProbe)
                  ? sm90::smem_desc(b_base + 32 * kk, 16, 8 * Cfg::kBlockK, sm90::kSwizzle128B)
                  : sm90::smem_desc(b_base + 2 * kk * Cfg::kBlockN * 16, Cfg::kBlockN * 16, 128, sm90::kNoSwizzle);
          Mma::mma(d, da, db, accumulate || kk > 0);
        }
      }
      sm90::wgmma_commit();
    };
    // K block i's MMAs are complete: its stage can be refilled.
    auto release = [&](int i) {
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&empty[i % Cfg::kStages]);
    };
    if constexpr (Mma::kExactAccumulator) {
      // int8: the tensor core's int32 sums are exact, so every K block accumulates straight into an int32
      // tile and the MMAs of consecutive blocks queue back to back; only the stage release waits, one block
      // behind. Two chains: odd blocks go to acc2, added to acc at the end.
      Acc acc2[kAcc];  // the second chain (unused with one chain)
      for (int i = 0; i < kb_count; ++i) {
        bool second = false;
        if constexpr (Cfg::kChains > 1) second = i & 1;
        if (second)
          issue(i, acc2, i > 1);
        else
          issue(i, acc, i > 0);
        if (i > 0) {
          sm90::wgmma_wait<1>();
          release(i - 1);
        }
      }
      sm90::wgmma_wait<0>();
      sm90::fence_regs(acc);
      if (kb_count > 0) release(kb_count - 1);
      if constexpr (Cfg::kChains > 1) {
        sm90::fence_regs(acc2);
        if (kb_count > 1) {
#pragma unroll
          for (int j = 0; j < kAcc; ++j) acc[j] += acc2[j];
        }
      }
    } else if constexpr (Cfg::kChains > 1) {
      // fp8, two partial tiles: block i's MMAs are issued into part[i % 2] before block i - 1's partial tile
      // (the other one) is waited for and promoted, so the promotion overlaps the tensor core's work.
      // NOTE: ptxas tracks which wgmma group a wait retires only in straight-line code: across a loop's back
      // edge it assumes the other partial tile may still be in flight and serialises every wgmma (C7514). So
      // the loop body is kUnroll blocks, unrolled, ending in wait<0> (one exposed promotion per kUnroll
      // blocks); a remainder of fewer blocks runs one block at a time.
      constexpr int kUnroll = 4;
      Acc part0[kAcc], part1[kAcc];
      auto promote = [&](Acc(&p)[kAcc]) {
        sm90::fence_regs(p);
#pragma unroll
        for (int j = 0; j < kAcc; ++j) acc[j] += p[j];
      };
      int i = 0;
      for (; i + kUnroll <= kb_count; i += kUnroll) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (u & 1) {
            sm90::fence_regs(part1);
            issue(i + u, part1, false);
          } else {
            sm90::fence_regs(part0);
            issue(i + u, part0, false);
          }
          if (u > 0) {
            sm90::wgmma_wait<1>();  // block i + u - 1 is complete
            release(i + u - 1);
            if (u & 1)
              promote(part0);
            else
              promote(part1);
          }
        }
        sm90::wgmma_wait<0>();
        release(i + kUnroll - 1);
        if ((kUnroll - 1) & 1)
          promote(part1);
        else
          promote(part0);
      }
      for (; i < kb_count; ++i) {
        sm90::fence_regs(part0);
        issue(i, part0, false);
        sm90::wgmma_wait<0>();
        release(i);
        promote(part0);
      }
    } else {
      // fp8: each K block goes to a partial tile that is waited for and added to the fp32 result (promotion
      // every 128 values of K).
      Acc part[kAcc];
#pragma unroll
      for (int j = 0; j < kAcc; ++j) part[j] = Acc(0);
      for (int i = 0; i < kb_count; ++i) {
        sm90::fence_regs(part);
        issue(i, part, false);
        sm90::wgmma_wait<0>();
        sm90::fence_regs(part);
        release(i);
#pragma unroll
        for (int j = 0; j < kAcc; ++j) acc[j] += part[j];
      }
    }
  }

  // ---- epilogue -------------------------------------------------------------------------------------------
  const int ct = tid & 127;                   // thread within its consumer warpgroup
  if constexpr (Cfg::kSwapAB) {
    store_swapped<Out, Act, Cfg, kAcc, kAccPerMma>(out, bias, scale_a, scale_b, M, N, bias_kind, scale_a_stride,
                                                   scale_b_stride, alpha, m0, n0, ct, splits, rank, acc, smem);
  } else {
    const int wg_row0 = m0 + 64 * (warp >> 2);  // first row of the warpgroup's tile
    const int row0 = wg_row0 + acc_row(ct, 0);
    float row_scale[2];  // alpha * scale_a of rows row0 and row0 + 8
#pragma unroll
    for (int h = 0; h < 2; ++h)
      row_scale[h] = row0 + 8 * h < M ? alpha * load_scale(scale_a, scale_a_stride, row0 + 8 * h) : 0.f;
    if (splits == 1) {
      ColumnOperands<kAcc / 4> col_ops;
      col_ops.load(bias, scale_b, scale_b_stride, bias_kind, N, n0, ct);
#pragma unroll
      for (int j = 0; j < kAcc; j += 4)
        store_group<Out, Act>(out, M, N, row_scale, row0, n0 + acc_col(ct, j), col_ops.scale[j / 2],
                              col_ops.scale[j / 2 + 1], col_ops.bias[j / 2], col_ops.bias[j / 2 + 1], acc[j],
                              acc[j + 1], acc[j + 2], acc[j + 3]);
      return;
    }

    const u32* partial = park_partials<Cfg>(acc, smem, tid);  // split-K over the cluster
    {
      // Each CTA stores 1 / splits of the groups, loading their column operands as it goes: hoisting all of a
      // thread's loads here (as the splits == 1 path does) made the decode shapes 3-5 us slower (H200).
      const int per_rank = kAcc / splits;  // a multiple of 8: whole 8-column groups
      for (int j = rank * per_rank; j < (rank + 1) * per_rank; j += 4) {
        const int col = n0 + acc_col(ct, j);
        if (col >= N) continue;
        Acc v[4];
        cluster_sum<Cfg>(partial, j, tid, splits, v);
        store_group<Out, Act>(out, M, N, row_scale, row0, col, load_scale(scale_b, scale_b_stride, col),
                              load_scale(scale_b, scale_b_stride, col + 1), load_bias(bias, bias_kind, col),
                              load_bias(bias, bias_kind, col + 1), v[0], v[1], v[2], v[3]);
      }
    }
    sm90::cluster_sync();  // keep this CTA's partial tile alive until every CTA has read it
  }
}

}  // namespace fg
#endif  // FG_NVIDIA
