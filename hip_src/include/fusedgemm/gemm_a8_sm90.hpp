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
//
// kPersistent (unswapped, two consumer warpgroups, n128; no split-K): one wave of CTAs, each looping over
// tiles, with the epilogue handed to the producer warpgroup's three spare warps. The consumers park each
// finished tile's fp32 accumulators in shared memory and start the next tile's K blocks at once, so the
// epilogue (scales, bias, activation, stores: 2.7 of a tile's 17.4 us on H100, qkv M = 8192) and the CTA
// start-up run under the next tile's MMAs instead of between them.
template <int kBlockM_, int kStages_, int kMinBlocksPerSm_, int kBlockN_ = 128, bool kSwapAB_ = false,
          int kChains_ = 1, bool kPersistent_ = false>
struct WgmmaConfig {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;  // one m64nBNk32 wgmma per warpgroup per K step: 128 or 192
  static constexpr int kBlockK = 128;  // bytes = fp8/int8 values of K per stage
  static constexpr int kStages = kStages_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr bool kSwapAB = kSwapAB_;
  static constexpr int kChains = kChains_;
  static constexpr bool kPersistent = kPersistent_;
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
  // A persistent kernel's epilogue warps are the producer warpgroup's.
  static constexpr bool kSetMaxNReg = kConsumerWarpgroups == 3 || kBlockN > 128 || kChains > 1 || kPersistent;
  // NOTE: setmaxnreg moves registers within the CTA's launch allocation (384 threads x 168 = 64512): the consumers'
  // 2 x 128 x 232 leave exactly 128 x 40 for the producer warpgroup. Asking more deadlocks setmaxnreg.inc (seen
  // with 48 on an H100: the persistent kernel hung).
  static constexpr int kProducerRegs = kConsumerWarpgroups == 3 ? 24 : 40;
  static constexpr int kConsumerRegs = kConsumerWarpgroups == 3 ? 160 : 232;
  static constexpr int kThreads = kConsumerThreads + (kSetMaxNReg ? 128 : 32);
  static constexpr int kStageBytesA = kBlockM * kBlockK;
  static constexpr int kStageBytesB = kBlockN * kBlockK;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kAccPerThread = kMmasPerStep * kMmaN / 2;
  static constexpr int kReduceBytes = kAccPerThread * kConsumerThreads * 4;
  // Persistent: the parked tile (fp32, kBlockM x kBlockN) and the tile's staged epilogue values follow the
  // stages: room for kStagedFloats = kBlockM + 2 kBlockN floats, the rows' values ([k][kBlockM]) then the
  // columns' ([k][kBlockN]) -- one per row and two per column for the presets (alpha * scale_a; scale_b, bias).
  // An epilogue with more hoisted values does not fit (the host does not plan it on this config).
  static constexpr int kEpilogueThreads = kPersistent ? 96 : 0;
  static constexpr int kParkedOffset = kStages * kStageBytes;
  static constexpr int kStagedOffset = kParkedOffset + (kPersistent ? kBlockM * kBlockN * 4 : 0);
  static constexpr int kStagedFloats = kPersistent ? kBlockM + 2 * kBlockN : 0;
  static constexpr int kBarrierOffset = kStagedOffset + kStagedFloats * 4;
  static constexpr int kBarriers = 2 * kStages + (kPersistent ? 2 : 0);  // + parked tile full / empty
  // + 1024: the dynamic shared-memory base is rounded up to the 1024-byte alignment the swizzle needs.
  static constexpr int kSmemBytes = kBarrierOffset + kBarriers * 8 + 1024;
  static_assert(kSwapAB ? kBlockM == 16 && kBlockN % 64 == 0 : kBlockM % 64 == 0 && kBlockM <= 192,
                "one to three consumer warpgroups of 64 rows; swapped: 16 activation rows, 64-row weight MMAs");
  static_assert(kReduceBytes <= kBarrierOffset, "the split-K partial tile reuses the stage buffers");
  static_assert(kChains == 1 || (kChains == 2 && !kSwapAB && kConsumerWarpgroups == 2 && kBlockN == 128),
                "two chains: fp8 needs 3 x 64 accumulators per thread, which fits 2 consumer warpgroups of n128 only");
  static_assert(!kPersistent || (!kSwapAB && kConsumerWarpgroups == 2 && kBlockN == 128),
                "persistent: the parked-tile layout and the epilogue warps' row mapping assume a 128 x 128 tile");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_90 CTA can have");
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
// M > 64, many tiles: persistent, epilogue warps, 5 x 32 KB stages (the parked tile takes 64 KB).
using ConfigP128N128 = WgmmaConfig<128, 5, 1, 128, false, 1, true>;
using ConfigV16N128 = WgmmaConfig<16, 4, 3, 128, true>;  // M <= 16, swapped: 4 x 18 KB stages, 3 CTAs per SM

// Which output tile a CTA computes. CTAs start roughly in launch order (blockIdx.x fastest). Row-major tile
// order makes one wave sweep a whole row of B's column tiles: right while B fits in L2 (50 MB on H100/H200),
// but a larger weight (gate_up: 117 MB of fp8) would then come again from DRAM for every row block of A.
// For those, consecutive CTAs walk down a group of 8 row blocks before moving one column right: a wave of
// 132 CTAs touches ~8 row blocks x ~17 column tiles of the operands. (Grouping weights that fit in L2
// measured 2-6% slower on the H200, so they keep row-major order.)
constexpr int kTileGroupRows = 8;
constexpr i64 kGroupTilesAboveWeightBytes = i64(48) << 20;
// Tile t (0 <= t < num_n * num_m, in the order CTAs take them) -> its row and column block.
FG_DEVICE void tile_of(int t, int num_n, int num_m, int N, int K, int& m_block, int& n_block) {
  if (static_cast<i64>(N) * K <= kGroupTilesAboveWeightBytes) {
    m_block = t / num_n;
    n_block = t - m_block * num_n;
    return;
  }
  const int first_m = t / (kTileGroupRows * num_n) * kTileGroupRows;
  const int rows = min(num_m - first_m, kTileGroupRows);
  const int local = t % (kTileGroupRows * num_n);
  m_block = first_m + local % rows;
  n_block = local / rows;
}
// A CTA-per-tile grid: the block's linear index is its tile.
FG_DEVICE void tile_of_block(int N, int K, int& m_block, int& n_block) {
  const int num_n = static_cast<int>(gridDim.x), num_m = static_cast<int>(gridDim.y);
  tile_of(static_cast<int>(blockIdx.y) * num_n + static_cast<int>(blockIdx.x), num_n, num_m, N, K, m_block,
          n_block);
}

// Rows of A one TMA copy brings: the whole tile, except when all of M fits in one tile: then M rounded up to
// 8 (the copy engine slows down on out-of-bounds rows; rows of the tile past the box keep stale bytes, which
// only reach output rows >= M, never stored). The host encodes A's tensor map with the same box.
template <class Cfg>
FG_DEVICE int a_box_rows(int M) {
  return M >= Cfg::kBlockM ? Cfg::kBlockM : ((M + 7) & ~7);
}

// Accumulator element j of consumer thread t (t counted within its warpgroup): row and column in the
// warpgroup's 64 x 128 tile (the wgmma D fragment layout).
FG_DEVICE int acc_row(int t, int j) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((j >> 1) & 1); }
FG_DEVICE int acc_col(int t, int j) { return 8 * (j >> 2) + 2 * (t & 3) + (j & 1); }

// The column values (Epi::load_col) of a consumer thread's accumulator columns: for each of its kGroups 8-column
// groups g, columns n0 + acc_col(t, 4 g) and the one after (zeros past N). All are loaded before the first store,
// so the epilogue waits for one round of loads instead of one per group (ncu, qkv M = 8192: the per-group loads
// were ~9% of all warp stall samples, with the tensor core idle behind them).
template <class Epi, int kGroups>
struct ColumnValues {
  float v[2 * kGroups][Epi::kColValues];

  FG_DEVICE void load(const typename Epi::Params& ep, int N, int n0, int t) {
    int cols[2 * kGroups];
    bool in[2 * kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        cols[2 * g + e] = n0 + acc_col(t, 4 * g) + e;
        in[2 * g + e] = n0 + acc_col(t, 4 * g) < N;  // N % 16 == 0: a column pair is all in or all out
      }
    }
    Epi::template load_cols<2 * kGroups>(ep, cols, in, v);
  }
};

// The row values of rows row0 and row0 + 8 (zeros past M).
template <class Epi>
FG_DEVICE void load_row_pair(const typename Epi::Params& ep, int M, int row0, float (&r)[2][Epi::kRowValues]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (row0 + 8 * h < M) {
      Epi::load_row(ep, row0 + 8 * h, r[h]);
    } else {
#pragma unroll
      for (int k = 0; k < Epi::kRowValues; ++k) r[h][k] = 0.f;
    }
  }
}

// The epilogue of one 8-column group (accumulator elements j..j+3 of a thread: columns col, col + 1 of rows
// row0 and row0 + 8) with those columns' values c0, c1: two pair stores through the epilogue slot.
template <class Epi, class Acc>
FG_DEVICE void store_group(const typename Epi::Params& ep, int M, int N, const float (&r)[2][Epi::kRowValues],
                           int row0, int col, const float (&c0)[Epi::kColValues], const float (&c1)[Epi::kColValues],
                           Acc v0, Acc v1, Acc v2, Acc v3) {
  if (col >= N) return;
  float c[2][Epi::kColValues];
#pragma unroll
  for (int k = 0; k < Epi::kColValues; ++k) {
    c[0][k] = c0[k];
    c[1][k] = c1[k];
  }
  if (row0 < M) {
    const float acc[2] = {static_cast<float>(v0), static_cast<float>(v1)};
    Epi::template store<2>(ep, row0, col, acc, r[0], c);
  }
  if (row0 + 8 < M) {
    const float acc[2] = {static_cast<float>(v2), static_cast<float>(v3)};
    Epi::template store<2>(ep, row0 + 8, col, acc, r[1], c);
  }
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
template <class Epi, class Cfg, int kAcc, int kAccPerMma, class Acc>
FG_DEVICE void store_swapped(const typename Epi::Params& ep, int M, int N, int m0, int n0, int t, int splits, int rank,
                             const Acc (&acc)[kAcc], u8* smem) {
  auto store_one = [&](int j, Acc v) {
    const int h = j / kAccPerMma, e = j % kAccPerMma;
    const int m = m0 + acc_col(t, e), n = n0 + 64 * h + acc_row(t, e);
    if (m >= M || n >= N) return;
    float r[Epi::kRowValues], c[1][Epi::kColValues];
    Epi::load_row(ep, m, r);
    Epi::load_col(ep, n, c[0]);
    const float a[1] = {static_cast<float>(v)};
    Epi::template store<1>(ep, m, n, a, r, c);
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

// The consumer warpgroups' main loop: K blocks i = 0 .. kb_count - 1 of the tile into acc (zeroed by the
// caller). Block i is the CTA's g0 + i-th: the ring's stage and phase follow that count, so a persistent CTA's
// tiles continue one sequence.
template <class In, class Cfg, int kProbe, class Acc, int kAcc>
FG_DEVICE void consumer_mainloop(Acc (&acc)[kAcc], int g0, int kb_count, u8* stage_a, u8* stage_b,
                                 sm90::u64* full, sm90::u64* empty, int wg, int lane) {
  using Mma = sm90::Wgmma<In, Cfg::kMmaN>;
  constexpr int kAccPerMma = Mma::kAccPerThread;
  // Issue K block i's MMAs into `d` (asynchronously; committed as one group). accumulate = false: the
  // block's first MMA overwrites d.
  auto issue = [&](int i, Acc(&d)[kAcc], bool accumulate) {
    const int g = g0 + i;
    const int s = g % Cfg::kStages;
    sm90::mbar_wait(&full[s], (g / Cfg::kStages) & 1);
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
    if (lane == 0) sm90::mbar_arrive(&empty[(g0 + i) % Cfg::kStages]);
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

// ---- persistent kernel with epilogue warps (Cfg::kPersistent) ------------------------------------------------
// Parked tile: element (row, col) of the 128 x 128 fp32 tile at word row * 128 + (col ^ ((row & 3) << 3)). The
// XOR puts the four rows that a consumer half-warp writes (one 8-word group each) on different banks, and keeps
// an epilogue thread's four columns 4c..4c+3 together (one conflict-free 16-byte read).
FG_DEVICE int parked_index(int row, int col) { return row * 128 + (col ^ ((row & 3) << 3)); }

// The epilogue warps' part of a tile: rows r = w, w + 3, ... of the parked tile (w: epilogue warp), columns
// 4 lane .. 4 lane + 3, through the epilogue slot (one 4-value store per row and thread). The rows' and columns'
// values were staged in shared memory: staged[k * kBlockM + r] for row value k, then col_staged[k * kBlockN + c].
template <class Epi>
FG_DEVICE void store_parked_rows(const typename Epi::Params& ep, const float* parked, const float* row_staged,
                                 const float* col_staged, int M, int m0, int col, int col_local, int w) {
  constexpr int kBlock = 128;
  const int rows = min(kBlock, M - m0);
#pragma unroll 1
  for (int r = w; r < rows; r += 3) {
    // NOTE: the column values are re-read from shared memory per row: held across the loop, they do not fit
    // the epilogue warps' 40 registers (spills).
    float c[4][Epi::kColValues];
#pragma unroll
    for (int k = 0; k < Epi::kColValues; ++k) {
      const float4 cv = *reinterpret_cast<const float4*>(&col_staged[k * kBlock + col_local]);
      c[0][k] = cv.x;
      c[1][k] = cv.y;
      c[2][k] = cv.z;
      c[3][k] = cv.w;
    }
    const float4 v = *reinterpret_cast<const float4*>(&parked[parked_index(r, col_local)]);
    float rv[Epi::kRowValues];
#pragma unroll
    for (int k = 0; k < Epi::kRowValues; ++k) rv[k] = row_staged[k * kBlock + r];
    const float acc[4] = {v.x, v.y, v.z, v.w};
    Epi::template store<4>(ep, m0 + r, col, acc, rv, c);
  }
}

// The persistent kernel's shared memory: stages (A, then B), the parked tile, the staged epilogue values, the
// barriers.
// The base comes through an asm volatile, so each role recomputes it after its setmaxnreg (no CSE with the
// prologue's copy).
template <class Cfg>
struct PersistentSmem {
  u8* base;
  FG_DEVICE PersistentSmem() {
    extern __shared__ u8 smem_raw[];
    u32 addr = sm90::smem_addr(smem_raw);
    asm volatile("" : "+r"(addr));
    base = smem_raw + ((1024 - (addr & 1023)) & 1023);
  }
  FG_DEVICE u8* stage_a() const { return base; }
  FG_DEVICE u8* stage_b() const { return base + Cfg::kStages * Cfg::kStageBytesA; }
  FG_DEVICE float* parked() const { return reinterpret_cast<float*>(base + Cfg::kParkedOffset); }
  FG_DEVICE float* row_staged() const { return reinterpret_cast<float*>(base + Cfg::kStagedOffset); }
  template <class Epi>
  FG_DEVICE float* col_staged() const { return row_staged() + Epi::kRowValues * Cfg::kBlockM; }
  FG_DEVICE sm90::u64* full() const { return reinterpret_cast<sm90::u64*>(base + Cfg::kBarrierOffset); }
  FG_DEVICE sm90::u64* empty() const { return full() + Cfg::kStages; }
  FG_DEVICE sm90::u64* parked_full() const { return full() + 2 * Cfg::kStages; }
  FG_DEVICE sm90::u64* parked_empty() const { return full() + 2 * Cfg::kStages + 1; }
};

// One wave of CTAs; CTA c computes tiles c, c + gridDim.x, ... (tile_of order). Warp roles:
//  * consumer warpgroups 0, 1: per tile, the K blocks (consumer_mainloop, K blocks counted across tiles), then
//    wait until the parked tile is free, park the accumulators as fp32, and go on with the next tile;
//  * producer warpgroup, warp 0: TMA copies of every tile's K blocks into the ring, running ahead across tiles;
//  * producer warpgroup, warps 1-3 (epilogue warps, 40 registers): per tile, the rows' scales and the columns'
//    scales and biases into shared memory (while the consumers still compute), then wait for the parked tile and
//    store it through the epilogue.
// Two barriers hand the parked tile over: parked_full (256 consumer arrivals) and parked_empty (96).
template <class In, class Epi, class Cfg, int kProbe>
FG_DEVICE void gemm_a8_wgmma_persistent(const sm90::TmaDesc& a_map, const sm90::TmaDesc& b_map, int M, int N, int K,
                                        const typename Epi::Params& ep) {
  static_assert(Epi::kRowValues * Cfg::kBlockM + Epi::kColValues * Cfg::kBlockN <= Cfg::kStagedFloats,
                "the epilogue hoists more row/column values than the persistent config stages");
  using Mma = sm90::Wgmma<In, Cfg::kMmaN>;
  using Acc = typename Mma::Acc;
  constexpr int kAcc = Cfg::kAccPerThread;
  constexpr int kConsumerWarps = Cfg::kConsumerThreads / 32;

  if (sm90::dynamic_smem_bytes() < Cfg::kSmemBytes) __trap();  // host / device layouts disagree: fail loudly
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;
  // NOTE: each role derives its shared-memory addresses and tile counts after its setmaxnreg (PersistentSmem,
  // from an opaque base): a value computed before the split and live across setmaxnreg.dec 40 would be
  // spilled to local memory.
  if (tid == 0) {
    const PersistentSmem<Cfg> sm;
    for (int s = 0; s < Cfg::kStages; ++s) {
      sm90::mbar_init(&sm.full()[s], 1);
      sm90::mbar_init(&sm.empty()[s], kConsumerWarps);
    }
    sm90::mbar_init(sm.parked_full(), Cfg::kConsumerThreads);
    sm90::mbar_init(sm.parked_empty(), Cfg::kEpilogueThreads);
    sm90::fence_mbar_init();
  }
  __syncthreads();
  // Per role, after its setmaxnreg (see above): tiles along N and M, all tiles, K blocks per tile.
  auto counts = [&](int& num_n, int& num_m, int& num_tiles, int& kb_count) {
    num_n = (N + Cfg::kBlockN - 1) / Cfg::kBlockN;
    num_m = (M + Cfg::kBlockM - 1) / Cfg::kBlockM;
    num_tiles = num_n * num_m;
    kb_count = (K + Cfg::kBlockK - 1) / Cfg::kBlockK;
  };

  if (warp >= kConsumerWarps) {
    sm90::setmaxnreg_dec<Cfg::kProducerRegs>();
    const PersistentSmem<Cfg> sm;
    int num_n, num_m, num_tiles, kb_count;
    counts(num_n, num_m, num_tiles, kb_count);
    const int w = warp - kConsumerWarps - 1;  // epilogue warp 0..2; -1: the copy warp
    if (w < 0) {
      if (lane == 0) {
        u8* stage_a = sm.stage_a();
        u8* stage_b = sm.stage_b();
        sm90::u64* full = sm.full();
        sm90::u64* empty = sm.empty();
        const int a_rows = a_box_rows<Cfg>(M);
        sm90::prefetch_tma_desc(&a_map);
        sm90::prefetch_tma_desc(&b_map);
        for (int t = blockIdx.x, g = 0; t < num_tiles; t += gridDim.x) {
          int m_block, n_block;
          tile_of(t, num_n, num_m, N, K, m_block, n_block);
          for (int i = 0; i < kb_count; ++i, ++g) {
            const int s = g % Cfg::kStages;
            sm90::mbar_wait(&empty[s], ((g / Cfg::kStages) & 1) ^ 1);
            if constexpr (probe_no_copy(kProbe)) {
              sm90::mbar_arrive(&full[s]);
              continue;
            }
            sm90::mbar_arrive_expect_tx(&full[s], a_rows * Cfg::kBlockK + Cfg::kStageBytesB);
            sm90::tma_load_2d(stage_a + s * Cfg::kStageBytesA, &a_map, &full[s], i * Cfg::kBlockK,
                              m_block * Cfg::kBlockM);
            sm90::tma_load_3d(stage_b + s * Cfg::kStageBytesB, &b_map, &full[s], 0, n_block * (Cfg::kBlockN / 16),
                              i * (Cfg::kBlockK / 16));
          }
        }
      }
      return;
    }
    const int e = 32 * w + lane;  // epilogue thread 0..95
    for (int t = blockIdx.x, it = 0; t < num_tiles; t += sm90::grid_ctas_x(), ++it) {
      int m_block, n_block;
      tile_of(t, num_n, num_m, N, K, m_block, n_block);
      const int m0 = m_block * Cfg::kBlockM;
      const int col = n_block * Cfg::kBlockN + 4 * lane;
      const int n0 = n_block * Cfg::kBlockN;
      // Addresses come from a fresh PersistentSmem per tile: held across the loop, 40 registers do not suffice.
      const PersistentSmem<Cfg> tsm;
      float* row_staged = tsm.row_staged();
      float* col_staged = tsm.template col_staged<Epi>();
      // This thread's rows e, e + 96 and columns likewise, each set's loads all in flight at once (through the
      // read-only path): the staging must stay far shorter than a tile's MMAs.
      constexpr int kSlots = (Cfg::kBlockM + Cfg::kEpilogueThreads - 1) / Cfg::kEpilogueThreads;
      static_assert(Cfg::kBlockN == Cfg::kBlockM, "one slot count for rows and columns");
      int rows[kSlots], cols[kSlots];
      bool row_in[kSlots], col_in[kSlots];
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int i = e + s * Cfg::kEpilogueThreads;
        rows[s] = m0 + i;
        cols[s] = n0 + i;
        row_in[s] = i < Cfg::kBlockM && m0 + i < M;
        col_in[s] = i < Cfg::kBlockN && n0 + i < N;
      }
      float rv[kSlots][Epi::kRowValues], cv[kSlots][Epi::kColValues];
      Epi::template load_rows<kSlots>(ep, rows, row_in, rv);
      Epi::template load_cols<kSlots>(ep, cols, col_in, cv);
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int i = e + s * Cfg::kEpilogueThreads;
        if (i < Cfg::kBlockM) {  // zeros past M / N (load_rows / load_cols write 0 where not in)
#pragma unroll
          for (int k = 0; k < Epi::kRowValues; ++k) row_staged[k * Cfg::kBlockM + i] = rv[s][k];
#pragma unroll
          for (int k = 0; k < Epi::kColValues; ++k) col_staged[k * Cfg::kBlockN + i] = cv[s][k];
        }
      }
      sm90::named_barrier_sync(2, Cfg::kEpilogueThreads);  // the rows' and columns' operands are in
      sm90::mbar_wait(tsm.parked_full(), it & 1);
      if (col < N)  // N % 16 == 0: the thread's four columns are all in or all out
        store_parked_rows<Epi>(ep, tsm.parked(), row_staged, col_staged, M, m0, col, 4 * lane, w);
      sm90::mbar_arrive(tsm.parked_empty());
      sm90::named_barrier_sync(2, Cfg::kEpilogueThreads);  // everyone is done with the staged values
    }
    return;
  }

  sm90::setmaxnreg_inc<Cfg::kConsumerRegs>();
  const PersistentSmem<Cfg> sm;
  u8* stage_a = sm.stage_a();
  u8* stage_b = sm.stage_b();
  sm90::u64* full = sm.full();
  sm90::u64* empty = sm.empty();
  float* parked = sm.parked();
  sm90::u64* parked_full = sm.parked_full();
  sm90::u64* parked_empty = sm.parked_empty();
  int num_n, num_m, num_tiles, kb_count;
  counts(num_n, num_m, num_tiles, kb_count);
  // NOTE: the fp8 two-chain main loop needs 192 accumulators of the 232 registers; little else may stay live
  // across it (the tile count only; the rest is recomputed after), or ptxas spills inside the loop.
  const int ctas = static_cast<int>(gridDim.x);
  const int my_tiles = (num_tiles - static_cast<int>(blockIdx.x) + ctas - 1) / ctas;
  for (int it = 0; it < my_tiles; ++it) {
    Acc acc[kAcc];
#pragma unroll
    for (int j = 0; j < kAcc; ++j) acc[j] = Acc(0);
    consumer_mainloop<In, Cfg, kProbe>(acc, it * kb_count, kb_count, stage_a, stage_b, full, empty, warp >> 2, lane);
    sm90::mbar_wait(parked_empty, (it & 1) ^ 1);  // the epilogue warps are done with the previous tile
    const int ct = tid & 127;  // thread within its consumer warpgroup
#pragma unroll
    for (int j = 0; j < kAcc; j += 2)
      *reinterpret_cast<float2*>(&parked[parked_index(64 * (warp >> 2) + acc_row(ct, j), acc_col(ct, j))]) =
          make_float2(static_cast<float>(acc[j]), static_cast<float>(acc[j + 1]));
    sm90::mbar_arrive(parked_full);
  }
}

// Timeline probe (ci/probe_sm90.py --stamps; compiled only with FG_PROBE_STAMPS): consumer thread 0 of each
// CTA records, into fg_probe_stamps[CTA][8], the global timer at kernel entry, main-loop start and end and
// epilogue end, the SM clock at main-loop start and end, and the SM id. Read back per SM, they show where a
// tile's time goes: CTA start-up, pipeline fill, the main loop's cycles against the tensor core's, epilogue.
#if defined(FG_PROBE_STAMPS)
__device__ unsigned long long* fg_probe_stamps;
FG_DEVICE void probe_stamp(int slot, bool clock) {
  if (threadIdx.x != 0) return;
  unsigned long long t;
  if (clock)
    t = clock64();
  else
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  fg_probe_stamps[(blockIdx.y * gridDim.x + blockIdx.x) * 8 + slot] = t;
  if (slot == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    fg_probe_stamps[(blockIdx.y * gridDim.x + blockIdx.x) * 8 + 7] = sm;
  }
}
#define FG_PROBE_STAMP(SLOT, CLOCK) probe_stamp(SLOT, CLOCK)
#else
#define FG_PROBE_STAMP(SLOT, CLOCK)
#endif

template <class In, class Epi, class Cfg, int kProbe>
FG_DEVICE void gemm_a8_wgmma_tiles(const sm90::TmaDesc& a_map,  // A [M, K] row-major, box 128 B x BM, swizzle 128
                                   const sm90::TmaDesc& b_map,  // B (16,16) preshuffled, see above
                                   int M, int N, int K, const typename Epi::Params& ep) {
  using Mma = sm90::Wgmma<In, Cfg::kMmaN>;
  using Acc = typename Mma::Acc;
  constexpr int kAcc = Cfg::kAccPerThread;
  constexpr int kAccPerMma = Mma::kAccPerThread;
  static_assert(kAcc == Cfg::kMmasPerStep * kAccPerMma, "kMmasPerStep m64 wgmmas per warpgroup per K step");

  if (sm90::dynamic_smem_bytes() < Cfg::kSmemBytes) __trap();  // host / device layouts disagree: fail loudly
  FG_PROBE_STAMP(0, false);
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
  FG_PROBE_STAMP(1, false);
  FG_PROBE_STAMP(4, true);
  consumer_mainloop<In, Cfg, kProbe>(acc, 0, kb_count, stage_a, stage_b, full, empty, warp >> 2, lane);
  FG_PROBE_STAMP(5, true);
  FG_PROBE_STAMP(2, false);
  // ---- epilogue -------------------------------------------------------------------------------------------
  const int ct = tid & 127;                   // thread within its consumer warpgroup
  if constexpr (Cfg::kSwapAB) {
    store_swapped<Epi, Cfg, kAcc, kAccPerMma>(ep, M, N, m0, n0, ct, splits, rank, acc, smem);
  } else {
    const int wg_row0 = m0 + 64 * (warp >> 2);  // first row of the warpgroup's tile
    const int row0 = wg_row0 + acc_row(ct, 0);
    float row_values[2][Epi::kRowValues];  // of rows row0 and row0 + 8
    load_row_pair<Epi>(ep, M, row0, row_values);
    if (splits == 1) {
      ColumnValues<Epi, kAcc / 4> col_values;
      col_values.load(ep, N, n0, ct);
#pragma unroll
      for (int j = 0; j < kAcc; j += 4)
        store_group<Epi>(ep, M, N, row_values, row0, n0 + acc_col(ct, j), col_values.v[j / 2],
                         col_values.v[j / 2 + 1], acc[j], acc[j + 1], acc[j + 2], acc[j + 3]);
      FG_PROBE_STAMP(3, false);
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
        float c[2][Epi::kColValues];
        const int cols[2] = {col, col + 1};
        const bool in[2] = {true, true};
        Epi::template load_cols<2>(ep, cols, in, c);
        store_group<Epi>(ep, M, N, row_values, row0, col, c[0], c[1], v[0], v[1], v[2], v[3]);
      }
    }
    sm90::cluster_sync();  // keep this CTA's partial tile alive until every CTA has read it
  }
}

// The kernel body of every sm_90 gemm_a8 entry point: a CTA per tile, or persistent CTAs (Cfg::kPersistent).
template <class In, class Epi, class Cfg, int kProbe = kProbeNone>
FG_DEVICE void gemm_a8_wgmma(const sm90::TmaDesc& a_map,  // A [M, K] row-major, box 128 B x BM, swizzle 128
                             const sm90::TmaDesc& b_map,  // B (16,16) preshuffled, see above
                             int M, int N, int K,
                             const typename Epi::Params& ep) {  // the epilogue's operands and outputs (epilogue.hpp)
  if constexpr (Cfg::kPersistent)
    gemm_a8_wgmma_persistent<In, Epi, Cfg, kProbe>(a_map, b_map, M, N, K, ep);
  else
    gemm_a8_wgmma_tiles<In, Epi, Cfg, kProbe>(a_map, b_map, M, N, K, ep);
}

}  // namespace fg
#endif  // FG_NVIDIA
