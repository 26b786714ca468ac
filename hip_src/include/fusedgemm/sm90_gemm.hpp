// The sm_90a GEMM template (gemm_a8 and matmul_fused on Hopper tensor cores): TMA -> shared memory -> wgmma,
// warp-specialised, split-K over a cluster.
//
// Same semantics, epilogue functor and preshuffled B as portable_gemm.hpp; only the way operands reach the tensor
// cores differs (mma.sync on sm_90 runs fp8 as converted f16 HMMA; wgmma runs it natively as QGMMA).
//
// Block = kConsumerWarpgroups x 128 consumer threads (warpgroup w owns rows 64w..64w+63 of the block tile)
// plus a producer: one warp, or a whole warpgroup that hands its registers to the consumer warpgroups
// (setmaxnreg) when they hold more accumulators (three warpgroups, 192- or 256-wide tiles, two accumulator
// chains). One producer lane streams K blocks of 128 bytes into a ring of kStages shared-memory
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
#include "sm90_gemm_mainloop.hpp"
#include "sm90_gemm_persistent.hpp"
#include "sm90_gemm_stores.hpp"
#include "gemm_groups.hpp"

#if defined(FG_NVIDIA)
namespace fg {

// The tile loop's store: a warpgroup's 64 x kBlockN accumulators (at row m0, column n0 of the output) through the
// epilogue slot in 64-column chunks, each staged in the warpgroup's 64 x 64 fp32 buffer in shared memory. A
// thread writes its fragment's 32 values of the chunk, then reads back four consecutive columns of a row, so a
// half-warp stores 64 consecutive outputs of one row (4-value stores). Stored straight from the fragment layout a
// warp's store instruction covers 2 columns of 8 rows, and the consumers wait on those stores with the tensor core
// idle.
// Buffer element (row, col) at swizzled_index<64>(row, col): a half-warp's fragment writes (one 8-column group of
// four rows each) and an 8-lane phase of the 16-byte reads fall on distinct banks.

// hand_over: the last chunk is only written into the buffer, for the spare warps (store_handed_chunk).
template <class Epi, bool kVec4Aligned, class Acc, int kAcc>
FG_DEVICE void store_tile_staged(const typename Epi::Params& ep, int M, int N, int m0, int n0,
                                 const Acc (&acc)[kAcc], float* buf, int ct, int wg, bool hand_over) {
  static_assert(kAcc % 32 == 0, "64-column chunks: 8 groups of 4 accumulators per thread");
  constexpr int kChunks = kAcc / 32;
  constexpr int kRows = 8;  // rows per thread per chunk: 16 w + 2 i + (lane >> 4), i < 8 (w: warp in warpgroup)
  const int lane = ct & 31;
  const int col_local = 4 * (lane & 15);
  int rows[kRows];
  bool row_in[kRows];
  const bool full_rows = m0 + 64 <= M;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    rows[i] = 16 * (ct >> 5) + 2 * i + (lane >> 4);
    row_in[i] = m0 + rows[i] < M;
  }
  const float* const row_buf[2] = {&buf[swizzled_index<64>(rows[0], col_local)],
                                   &buf[swizzled_index<64>(rows[1], col_local)]};
  float rv[kRows][Epi::kRowValues];
  {
    int m[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) m[i] = m0 + rows[i];
    Epi::template load_rows<kRows>(ep, m, row_in, rv);
  }
#pragma unroll  // constant accumulator indices (a run-time index would put acc in local memory)
  for (int c = 0; c < kChunks; ++c) {
    const bool handed = c == kChunks - 1 && hand_over;
    const int col = n0 + 64 * c + col_local;
    float cv[4][Epi::kColValues];
    if (!handed) {
      const int cols[4] = {col, col + 1, col + 2, col + 3};
      const bool in[4] = {col < N, col < N, col < N, col < N};  // N % 8 == 0: all four in or all out
      Epi::template load_cols<4>(ep, cols, in, cv);
    }
    sm90::named_barrier_sync(2 + wg, 128);  // the warpgroup's reads of the previous chunk are done
#pragma unroll
    for (int j = 0; j < 32; j += 2)  // (a float2 store: nvcc split half of them into two 4-byte stores)
      sm90::st_shared_v2(sm90::smem_addr(&buf[swizzled_index<64>(acc_row(ct, j), acc_col(ct, j))]),
                         static_cast<float>(acc[32 * c + j]), static_cast<float>(acc[32 * c + j + 1]));
    if (handed) continue;
    sm90::named_barrier_sync(2 + wg, 128);  // the chunk is in
    // Row i's four values: rows i and i + 2 differ by 4 (same swizzle), so its address is row (i & 1)'s plus a
    // constant (an immediate offset: computed per row, the address took ~10 of the ~55 instructions per row).
    auto store_row = [&](int i) {
      const float4 v = *reinterpret_cast<const float4*>(row_buf[i & 1] + (i >> 1) * 4 * 64);
      const float y[4] = {v.x, v.y, v.z, v.w};
      Epi::template store<4, kVec4Aligned>(ep, m0 + rows[i], col, y, rv[i], cv);
    };
    if (col < N) {
      // All 64 rows in (every tile but a ragged last row block): the rows without a branch each, so their chains
      // (shared-memory read, epilogue math, store) interleave; a branch per row made each its own block.
      if (full_rows) {
#pragma unroll
        for (int i = 0; i < kRows; ++i) store_row(i);
      } else {
#pragma unroll
        for (int i = 0; i < kRows; ++i)
          if (row_in[i]) store_row(i);
      }
    }
  }
}

// The tile loop's spare warps (the producer warpgroup's warps 1-3, w = 0..2): the chunk of columns n0 .. n0 + 63 that
// the consumers left in their buffers (store_tile_staged, hand_over; warpgroup g's rows 64 g .. 64 g + 63 in
// buf + 4096 g). A half-warp stores one row's 64 values, 4 per thread: rows u = 2 w + half, u + 6, ... of the 128.
// The row values are loaded per row: three warps have a whole tile's MMAs to do this in.
template <class Epi>
FG_DEVICE void store_handed_chunk(const typename Epi::Params& ep, int M, int N, int m0, int n0, const float* buf,
                                  int w, int lane) {
  const int col_local = 4 * (lane & 15);
  const int col = n0 + col_local;
  if (col >= N) return;  // N % 8 == 0: all four in or all out
  float cv[4][Epi::kColValues];
  {
    const int cols[4] = {col, col + 1, col + 2, col + 3};
    const bool in[4] = {true, true, true, true};
    Epi::template load_cols<4>(ep, cols, in, cv);
  }
#pragma unroll 1
  for (int u = 2 * w + (lane >> 4); u < 128 && m0 + u < M; u += 6) {
    const float* row = buf + (u >> 6) * 64 * 64;  // warpgroup u >> 6's buffer
    const float4 v = *reinterpret_cast<const float4*>(&row[swizzled_index<64>(u & 63, col_local)]);
    float rv[Epi::kRowValues];
    Epi::load_row(ep, m0 + u, rv);
    const float y[4] = {v.x, v.y, v.z, v.w};
    Epi::template store<4, false>(ep, m0 + u, col, y, rv, cv);
  }
}

// bs: the block scales (Cfg::kBlockScaled only; BlockScaled<Config> in sm90_gemm_common.hpp).
// kGrouped: a grouped GEMM's CTA (gemm_groups.hpp, `ga`): grid y counts virtual row blocks, B's maps span the G
// groups' stacked weights (group g's columns at g * N), the column operands are [G, N]; CTA-per-tile configs that
// neither swap A and B nor pair CTAs, no split-K.
template <class In, class Epi, class Cfg, bool kGrouped = false>
FG_DEVICE void sm90_gemm_tiles(const sm90::TmaDesc& a_map,  // A [M, K] row-major, box 128 B x BM, swizzle 128
                               const sm90::TmaDesc& b_map,  // B (16,16) preshuffled, see above
                               int M, int N, int K, const typename Epi::Params& ep,
                               const BlockScaleArgs& bs = BlockScaleArgs{}, const GroupArgs& ga = GroupArgs{}) {
  static_assert(!kGrouped || !(Cfg::kTileLoop || Cfg::kPairB || Cfg::kSwapAB),
                "grouped GEMMs run on the CTA-per-tile, unswapped, unpaired configs");
  static_assert(OutGroupOf<Epi>::value == 0 || !(Cfg::kTileLoop || Cfg::kPairB || Cfg::kSwapAB),
                "group-quantised outputs run on the CTA-per-tile, unswapped, unpaired configs (store_groups)");
  using Mma = MmaOf<In, Cfg>;
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
  // The cluster is a B-multicast pair (Cfg::kPairB) or the split-K group (split-K over K blocks), never both.
  const int pair_rank = Cfg::kPairB ? static_cast<int>(sm90::cluster_rank()) : 0;
  // The CTA's tiles: its block's one, or (Cfg::kTileLoop) tiles (pairs' units) persistent_first, + step, ...
  // my_tiles of them; tile_at(it) -> the it-th one's first row and column.
  int my_tiles = 1;
  if constexpr (Cfg::kTileLoop)
    my_tiles = max(0, cta_unit_count(unit_count<Cfg>((N + Cfg::kBlockN - 1) / Cfg::kBlockN,
                                                     (M + Cfg::kBlockM - 1) / Cfg::kBlockM),
                                     persistent_first<Cfg>(), persistent_step<Cfg>()));
  auto tile_at = [&](int it, int& m0, int& n0) {
    int m_block, n_block;
    if constexpr (Cfg::kTileLoop)
      persistent_tile<In, Cfg>(persistent_first<Cfg>() + it * persistent_step<Cfg>(),
                               (N + Cfg::kBlockN - 1) / Cfg::kBlockN, (M + Cfg::kBlockM - 1) / Cfg::kBlockM, N, K,
                               m_block, n_block);
    else if constexpr (Cfg::kPairB)
      tile_of_pair_block(N, K * InTraits<In>::kBytes, pair_rank, m_block, n_block);
    else
      tile_of_block(N, K * InTraits<In>::kBytes, m_block, n_block);
    m0 = m_block * Cfg::kBlockM;
    n0 = n_block * Cfg::kBlockN;
  };
  // A CTA-per-tile kernel's tile, computed once before the roles split; the tile loop sets m0, n0 per tile in
  // each role.
  int m0 = 0, n0 = 0;
  int m_end = M;     // rows >= m_end are outside the tile's problem (a grouped CTA: its group's bound)
  int col_base = 0;  // a grouped CTA's g * N: its B rows and column operands
  int group = 0;     // a grouped CTA's g: its block scales' table (scale_b [G, ceil(N / 128), k_blocks])
  if constexpr (kGrouped) {
    GroupTile t;
    if (!group_row_block<Cfg::kBlockM>(ga, M, static_cast<int>(blockIdx.y), t)) return;  // uniform, before barriers
    m0 = t.m0;
    n0 = static_cast<int>(blockIdx.x) * Cfg::kBlockN;
    m_end = t.m_end;
    group = t.group;
    col_base = t.group * N;
  } else if constexpr (!Cfg::kTileLoop) {
    tile_at(0, m0, n0);
  }
  const int splits = Cfg::kPairB || kGrouped ? 1 : static_cast<int>(sm90::cluster_size());
  const int rank = Cfg::kPairB ? 0 : static_cast<int>(sm90::cluster_rank());
  const int k_blocks = k_block_count<In, Cfg>(K);
  const int kb_begin = rank * k_blocks / splits;
  const int kb_count = (rank + 1) * k_blocks / splits - kb_begin;

  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      sm90::mbar_init(&full[s], 1);
      sm90::mbar_init(&empty[s], Cfg::kPair * Cfg::kConsumerThreads / 32);
    }
    if constexpr (Cfg::kTileLoop) {
      sm90::mbar_init(&empty[Cfg::kStages], Cfg::kConsumerThreads);  // the handed chunk is in
      sm90::mbar_init(&empty[Cfg::kStages + 1], Cfg::kProducerThreads - 32);  // ... and stored (the spare warps)
    }
    sm90::fence_mbar_init();
  }
  if constexpr (Cfg::kPairB)
    sm90::cluster_sync();  // the peer's copies and arrives may reach this CTA's barriers from the start
  else
    __syncthreads();

  if (warp >= Cfg::kConsumerThreads / 32) {
    // ---- producer: one lane issues the copies ------------------------------------------------------------
    if constexpr (Cfg::kSetMaxNReg) sm90::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (warp == Cfg::kConsumerThreads / 32 && lane == 0) {
      const int a_rows = a_box_rows<Cfg>(M);
      sm90::prefetch_tma_desc(&a_map);
      sm90::prefetch_tma_desc(&b_map);
      for (int it = 0, g = 0; it < my_tiles; ++it) {  // g: the CTA's K blocks, across its tiles
        if constexpr (Cfg::kTileLoop) tile_at(it, m0, n0);
        for (int i = 0; i < kb_count; ++i, ++g) {
          const int s = g % Cfg::kStages;
          sm90::mbar_wait(&empty[s], ((g / Cfg::kStages) & 1) ^ 1);
          copy_k_block<In, Cfg>(stage_a + s * Cfg::kStageBytesA, stage_b + s * Cfg::kStageBytesB, a_map,
                                b_map, &full[s], a_rows, kb_begin + i, m0, col_base + n0, pair_rank);
        }
      }
    }
    if constexpr (Cfg::kTileLoop) {
      if (warp > Cfg::kConsumerThreads / 32) {  // the spare warps: the handed chunk of each tile but the last
        const KernelSmem<Cfg> sm;  // a fresh base after setmaxnreg: nothing held across it (40 registers)
        const int w = warp - Cfg::kConsumerThreads / 32 - 1;
        for (int it = 0; it + 1 < my_tiles; ++it) {
          tile_at(it, m0, n0);
          sm90::mbar_wait(sm.parked_full(), it & 1);
          store_handed_chunk<Epi>(ep, M, N, m0, n0 + Cfg::kBlockN - 64, sm.parked(), w, lane);
          sm90::mbar_arrive(sm.parked_empty());
        }
      }
    }
    if (splits > 1) {  // the cluster barriers of the split-K reduction count every thread
      sm90::cluster_sync();
      sm90::cluster_sync();
    }
    if constexpr (Cfg::kPairB) sm90::cluster_sync();  // a pair's exit barrier, which counts every thread too
    return;
  }

  // ---- consumer warpgroups --------------------------------------------------------------------------------
  if constexpr (Cfg::kSetMaxNReg) sm90::setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int ct = tid & 127;  // thread within its consumer warpgroup
  if constexpr (Cfg::kTileLoop) {
    // The K blocks continue one ring sequence across the tiles (it * kb_count on); no split-K (splits == 1).
    // Each tile is stored through the warpgroup's staging buffer (store_tile_staged).
    // NOTE: the tile is not stored under the next tile's first MMAs: ptxas pipelines that only with 64 x 128 MMAs,
    // which cost more than it hides.
    const int wg = warp >> 2;
    float* staging = reinterpret_cast<float*>(smem + Cfg::kParkedOffset) + wg * 64 * 64;
    sm90::u64* handed = empty + Cfg::kStages;  // the handed chunk's full, empty
    const bool vec4 = Epi::vec4_aligned(ep);
    for (int it = 0; it < my_tiles; ++it) {
      tile_at(it, m0, n0);
      Acc acc[kAcc];
#pragma unroll
      for (int j = 0; j < kAcc; ++j) acc[j] = Acc(0);
      consumer_mainloop<In, Cfg>(acc, it * kb_count, kb_count, stage_a, stage_b, full, empty,
                                 sm90::warp_uniform(wg), lane);
      const bool hand_over = it + 1 < my_tiles;  // the CTA's last tile: no MMAs follow to hide a handed chunk
      sm90::mbar_wait(&handed[1], (it & 1) ^ 1);  // the spare warps have stored the previous tile's chunk
      if (vec4)
        store_tile_staged<Epi, true>(ep, M, N, m0 + 64 * wg, n0, acc, staging, ct, wg, hand_over);
      else
        store_tile_staged<Epi, false>(ep, M, N, m0 + 64 * wg, n0, acc, staging, ct, wg, hand_over);
      if (hand_over) sm90::mbar_arrive(&handed[0]);
    }
    if constexpr (Cfg::kPairB) sm90::cluster_sync();  // the peer may arrive on this CTA's barriers until then
    return;
  }
  Acc acc[kAcc];
#pragma unroll
  for (int j = 0; j < kAcc; ++j) acc[j] = Acc(0);
  // The swapped (decode) tiles load their epilogue values now, under the weight stream (the other tiles' small
  // struct is never loaded or read, and the compiler drops it: their SASS is unchanged by it).
  SwappedOperands<Epi, Cfg::kSwapAB ? kAcc : 4, Cfg::kSwapAB ? kAccPerMma : 4> swapped_ops;
  if constexpr (Cfg::kSwapAB) swapped_ops.load(ep, M, N, m0, n0, ct);
  if constexpr (Cfg::kBlockScaled) {
    // the warp's 16 activation rows: swapped, the tile's; else its 16 of its warpgroup's 64
    const int rows0 = Cfg::kSwapAB ? m0 : m0 + 16 * warp;
    const u32 ring = sm90::smem_addr(smem) + Cfg::kScaleRingOffset;
    constexpr int kRows = Cfg::kSwapAB ? kAccPerMma / 2 : 2;
    // A grouped CTA's: its group's (rows past the group's bound read the next group's scale_a, and are not stored).
    const BlockScaleArgs own = kGrouped ? group_block_scales(bs, group, N) : bs;
    const auto scales = block_scale_rows<kRows, Cfg::kSwapAB, Epi::kPairs>(own, M, rows0, n0, ct, warp, kb_begin, ring);
    consumer_mainloop<In, Cfg>(acc, 0, kb_count, stage_a, stage_b, full, empty, sm90::warp_uniform(warp >> 2), lane,
                               scales);
  } else
    consumer_mainloop<In, Cfg>(acc, 0, kb_count, stage_a, stage_b, full, empty,
                               sm90::warp_uniform(warp >> 2), lane);
  // A pair: done with the peer (its last remote arrive is behind); its wait is at the end, after the stores.
  if constexpr (Cfg::kPairB) sm90::cluster_arrive();
  // ---- epilogue -------------------------------------------------------------------------------------------
  if constexpr (Cfg::kSwapAB) {
    store_swapped<Epi, Cfg, kAcc, kAccPerMma>(ep, M, N, m0, n0, ct, splits, rank, acc, swapped_ops, smem);
  } else {
    const int wg_row0 = m0 + 64 * (warp >> 2);  // first row of the warpgroup's tile
    const int row0 = wg_row0 + acc_row(ct, 0);
    // NOTE: the row values are loaded once here for both paths below; loaded in the split-K path as well, the
    // 64 x 128 tile's fp8 paired (swiglu) kernels spill.
    float row_values[2][Epi::kRowValues];  // of rows row0 and row0 + 8
    load_row_pair<Epi>(ep, m_end, row0, row_values);
    if constexpr (OutGroupOf<Epi>::value != 0) {  // planned without split-K (out_groups.py)
      store_groups<Epi>(ep, m_end, N, row_values, row0, n0, ct, col_base, acc);
      return;
    }
    if (splits == 1) {
      // The groups' column values in column_rounds rounds (one, but for the 256-wide tiles): round r covers
      // accumulators kRoundAcc r .. kRoundAcc (r + 1) - 1, i.e. the columns from n0 + 2 kRoundAcc r on.
      constexpr int kRounds = column_rounds<Epi, kAcc>();
      constexpr int kRoundAcc = kAcc / kRounds;
      static_assert(kAcc % (4 * kRounds) == 0, "whole 8-column groups per round");
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        ColumnValues<Epi, kRoundAcc / 4> col_values;
        col_values.load(ep, N, n0 + 2 * kRoundAcc * r, ct, col_base);
#pragma unroll
        for (int i = 0; i < kRoundAcc; i += 4) {
          const int j = kRoundAcc * r + i;
          store_group<Epi>(ep, m_end, N, row_values, row0, n0 + acc_col(ct, j), col_values.v[i / 2],
                           col_values.v[i / 2 + 1], acc[j], acc[j + 1], acc[j + 2], acc[j + 3]);
        }
      }
      if constexpr (Cfg::kPairB) sm90::cluster_wait();  // the peer may arrive on this CTA's barriers until then
      return;
    }

    const u32* partial = park_partials<Cfg>(acc, smem, tid);  // split-K over the cluster
    {
      // Each CTA stores 1 / splits of the groups, loading their column operands as it goes: hoisting all of a
      // thread's loads here (as the splits == 1 path does) slows the decode shapes: their loads would all wait on
      // the reduction.
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

// The kernel's one argument (passed __grid_constant__: TMA reads the maps in place): the operands' tensor maps
// (64-byte aligned), the sizes, then the epilogue's Params. Its layout is the packing runtime/kernels.py derives
// (gemm_signature); each entry point asserts the offsets.
template <class Epi>
struct Sm90GemmArgs {
  sm90::TmaDesc a_map;  // A [M, K] row-major, box 128 B x BM, swizzle 128
  sm90::TmaDesc b_map;  // B (16,16) preshuffled
  int M, N, K;
  typename Epi::Params ep;
};

// The argument of a block-scaled entry point (generated units only): Sm90GemmArgs's fields, then the block scales.
template <class Epi>
struct Sm90GemmBlockArgs {
  sm90::TmaDesc a_map;
  sm90::TmaDesc b_map;
  int M, N, K;
  typename Epi::Params ep;
  BlockScaleArgs bs;
};

// The argument of a grouped entry point (generated units only): Sm90GemmArgs's fields, then the groups.
template <class Epi>
struct Sm90GemmGroupedArgs {
  sm90::TmaDesc a_map;  // A [M, K] (all groups' rows)
  sm90::TmaDesc b_map;  // B: the G groups' weights stacked, [G * N, K]
  int M, N, K;
  typename Epi::Params ep;
  GroupArgs groups;
};

// The argument of a grouped block-scaled entry point: Sm90GemmArgs's fields, the block scales (scale_b: the G groups'
// tables, [G, ceil(N / 128), k_blocks]), the groups.
template <class Epi>
struct Sm90GemmGroupedBlockArgs {
  sm90::TmaDesc a_map;
  sm90::TmaDesc b_map;
  int M, N, K;
  typename Epi::Params ep;
  BlockScaleArgs bs;
  GroupArgs groups;
};

// The kernel body of a grouped entry point (gemm_groups.hpp): a CTA per tile, or persistent CTAs on
// GroupedPersistent<Config>; with block scales, CTA per tile on BlockScaled<Config>.
template <class In, class Epi, class Cfg>
FG_DEVICE void sm90_gemm_grouped(const sm90::TmaDesc& a_map, const sm90::TmaDesc& b_map, int M, int N, int K,
                                 const typename Epi::Params& ep, const GroupArgs& ga) {
  if constexpr (Cfg::kPersistent)
    sm90_gemm_persistent<In, Epi, Cfg, true>(a_map, b_map, M, N, K, ep, BlockScaleArgs{}, ga);
  else
    sm90_gemm_tiles<In, Epi, Cfg, true>(a_map, b_map, M, N, K, ep, BlockScaleArgs{}, ga);
}
template <class In, class Epi, class Cfg>
FG_DEVICE void sm90_gemm_grouped(const sm90::TmaDesc& a_map, const sm90::TmaDesc& b_map, int M, int N, int K,
                                 const typename Epi::Params& ep, const BlockScaleArgs& bs, const GroupArgs& ga) {
  static_assert(Cfg::kBlockScaled && !MmaOf<In, Cfg>::kExactAccumulator, "block scales: fp8 on BlockScaled<Config>");
  sm90_gemm_tiles<In, Epi, Cfg, true>(a_map, b_map, M, N, K, ep, bs, ga);
}

// The kernel body of a block-scaled fp8 entry point: the CTA-per-tile or persistent kernel on BlockScaled<Config>.
template <class In, class Epi, class Cfg>
FG_DEVICE void sm90_gemm_block_scaled(const sm90::TmaDesc& a_map, const sm90::TmaDesc& b_map, int M, int N, int K,
                                      const typename Epi::Params& ep, const BlockScaleArgs& bs) {
  static_assert(Cfg::kBlockScaled && !MmaOf<In, Cfg>::kExactAccumulator, "block scales: fp8 on BlockScaled<Config>");
  if constexpr (Cfg::kPersistent)
    sm90_gemm_persistent<In, Epi, Cfg>(a_map, b_map, M, N, K, ep, bs);
  else
    sm90_gemm_tiles<In, Epi, Cfg>(a_map, b_map, M, N, K, ep, bs);
}

// The kernel body of every sm_90a GEMM entry point: a CTA per tile, or persistent CTAs (Cfg::kPersistent).
template <class In, class Epi, class Cfg>
FG_DEVICE void sm90_gemm(const sm90::TmaDesc& a_map,  // A [M, K] row-major, box 128 B x BM, swizzle 128
                         const sm90::TmaDesc& b_map,  // B (16,16) preshuffled, see above
                         int M, int N, int K,
                         const typename Epi::Params& ep) {  // the epilogue's operands and outputs (epilogue.hpp)
  static_assert(Cfg::kSwapAB || Cfg::kBlockN <= 192 || InTraits<In>::kBytes > 1,
                "256-wide tiles (tile_128x256 and its kin) are the 16/32-bit kinds' (matmul_fused) only: fp8 would "
                "hold a second 128-register partial tile per consumer thread, and no 8-bit kernel is built on them");
  if constexpr (Cfg::kPersistent)
    sm90_gemm_persistent<In, Epi, Cfg>(a_map, b_map, M, N, K, ep);
  else
    sm90_gemm_tiles<In, Epi, Cfg>(a_map, b_map, M, N, K, ep);
}

}  // namespace fg
#endif  // FG_NVIDIA
