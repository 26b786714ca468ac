// The sm_90a GEMM, persistent: one wave of CTAs looping over 128 x 128 tiles, the epilogue on the producer
// warpgroup's spare warps under the next tile's MMAs (WgmmaConfig::kPersistent; sm90_gemm.hpp dispatches).
#pragma once
#include "out_groups.hpp"
#include "sm90_gemm_mainloop.hpp"

#if defined(FG_NVIDIA)
namespace fg {

// ---- persistent kernel with epilogue warps (Cfg::kPersistent) ------------------------------------------------
// Parked tile: element (row, col) of the 128 x 128 fp32 tile at swizzled_index<128>(row, col).
FG_DEVICE int parked_index(int row, int col) { return swizzled_index<128>(row, col); }

// The epilogue warps' part of a tile: rows r = w, w + kEpilogueWarps, ... of the parked tile (w: epilogue warp),
// columns 4 lane .. 4 lane + 3, through the epilogue slot (one 4-value store per row and thread). The rows' and
// columns' values were staged in shared memory: staged[k * kBlockM + r] for row value k, then
// col_staged[k * kBlockN + c]. kRowsAtOnce rows per iteration: all their shared-memory reads are issued before
// the first row's math and store (a store through a generic pointer would otherwise order the next row's reads
// behind it), so one warp has that many rows' latencies in flight.
template <class Epi, int kEpilogueWarps, int kRowsAtOnce, bool kVec4Aligned>
FG_DEVICE void store_parked_rows(const typename Epi::Params& ep, const float* parked, const float* row_staged,
                                 const float* col_staged, int M, int m0, int col, int col_local, int w) {
  constexpr int kBlock = 128;
  const int rows = min(kBlock, M - m0);
#pragma unroll 1
  for (int r0 = w; r0 < rows; r0 += kEpilogueWarps * kRowsAtOnce) {
    float c[4][Epi::kColValues];  // shared by the iteration's rows
#pragma unroll
    for (int k = 0; k < Epi::kColValues; ++k) {
      const float4 cv = *reinterpret_cast<const float4*>(&col_staged[k * kBlock + col_local]);
      c[0][k] = cv.x;
      c[1][k] = cv.y;
      c[2][k] = cv.z;
      c[3][k] = cv.w;
    }
    // kAllIn (every tile's rows but a ragged last row block's): no clamp and no branch per row, so the rows' chains
    // (read, epilogue math, store) interleave in one block.
    auto rows_at_once = [&](auto all_in) {
      constexpr bool kAllIn = decltype(all_in)::value != 0;
      float4 v[kRowsAtOnce];
      float rv[kRowsAtOnce][Epi::kRowValues];
#pragma unroll
      for (int u = 0; u < kRowsAtOnce; ++u) {
        int r = r0 + u * kEpilogueWarps;
        if constexpr (kRowsAtOnce > 1 && !kAllIn)
          r = min(r, rows - 1);  // past the last row: a duplicate read, not stored
        v[u] = *reinterpret_cast<const float4*>(&parked[parked_index(r, col_local)]);
#pragma unroll
        for (int k = 0; k < Epi::kRowValues; ++k) rv[u][k] = row_staged[k * kBlock + r];
      }
#pragma unroll
      for (int u = 0; u < kRowsAtOnce; ++u) {
        const int r = r0 + u * kEpilogueWarps;
        if (kAllIn || u == 0 || r < rows) {
          const float acc[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
          Epi::template store<4, kVec4Aligned>(ep, m0 + r, col, acc, rv[u], c);
        }
      }
    };
    if (kRowsAtOnce > 1 && r0 + (kRowsAtOnce - 1) * kEpilogueWarps < rows)
      rows_at_once(IntConstant<1>{});
    else
      rows_at_once(IntConstant<0>{});
  }
}

// One tile's rows (every kStride-th from w) through store_parked_rows, the output's alignment tested once for them
// all where kTestOnce (two copies of the row loop), else per row.
template <class Epi, int kStride, int kRowsAtOnce, bool kTestOnce>
FG_DEVICE void store_parked_tile(const typename Epi::Params& ep, const float* parked, const float* row_staged,
                                 const float* col_staged, int M, int m0, int col, int col_local, int w) {
  if (kTestOnce && Epi::vec4_aligned(ep))
    store_parked_rows<Epi, kStride, kRowsAtOnce, true>(ep, parked, row_staged, col_staged, M, m0, col, col_local, w);
  else
    store_parked_rows<Epi, kStride, kRowsAtOnce, false>(ep, parked, row_staged, col_staged, M, m0, col, col_local, w);
}

// The group-quantised store (out_group, out_groups.hpp) of the parked tile's rows w, w + kStride, ...: a warp's 32
// lanes hold a row's 128 columns (4 each), one group, so the row's |y| max is a 5-step warp reduction and each lane
// writes its 4 codes as one 4-byte store (a row's 128 codes: one coalesced 128-byte line). Columns >= N (N % 16 == 0:
// a lane's four are all in or all out) enter the max as 0 and are not written. Every lane of the warp calls it.
template <class Epi, int kStride>
FG_DEVICE void store_parked_groups(const typename Epi::Params& ep, const float* parked, const float* row_staged,
                                   const float* col_staged, int M, int N, int m0, int n0, int lane, int w) {
  constexpr int kBlock = 128;
  static_assert(OutGroupOf<Epi>::value == kBlock, "out_group: the parked tile's 128 columns are one group");
  static_assert(!Epi::kPairs && !Epi::kSaves, "out_group: no gate / up pair, no saved output");
  using Q = typename QuantCodesOf<typename Epi::Output>::type;
  const int rows = min(kBlock, M - m0);
  const int col = n0 + 4 * lane;
  const bool col_in = col < N;
  float c[4][Epi::kColValues];
#pragma unroll
  for (int k = 0; k < Epi::kColValues; ++k) {
    const float4 cv = *reinterpret_cast<const float4*>(&col_staged[k * kBlock + 4 * lane]);
    c[0][k] = cv.x;
    c[1][k] = cv.y;
    c[2][k] = cv.z;
    c[3][k] = cv.w;
  }
#pragma unroll 1
  for (int r = w; r < rows; r += kStride) {
    const float4 v = *reinterpret_cast<const float4*>(&parked[parked_index(r, 4 * lane)]);
    float rv[Epi::kRowValues];
#pragma unroll
    for (int k = 0; k < Epi::kRowValues; ++k) rv[k] = row_staged[k * kBlock + r];
    const float acc[4] = {v.x, v.y, v.z, v.w};
    float y[4];
    u32 key = 0;  // |y| as ordered bits (quant::abs_bits): NaN above inf
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float saved;
      // (a value outside N is never evaluated: its aux operands are out of bounds)
      y[i] = col_in ? Epi::value(ep, acc[i], rv, c[i], m0 + r, col + i, saved) : 0.f;
      key = quant::max_u32(key, quant::abs_bits(y[i]));
    }
    const float s = quant::row_scale<Q>(bits_to_float(lanes_max<32>(key)));
    if (lane == 0) Epi::store_scale(ep, m0 + r, n0 / kBlock, s);
    if (col_in) Epi::template store_codes<4>(ep, m0 + r, col, y, 1.f / s);  // IEEE division, as quantize_rows
  }
}

// One wave of CTAs; CTA c computes tiles c, c + gridDim.x, ... (tile_of order). Warp roles:
//  * consumer warpgroups 0, 1: per tile, the K blocks (consumer_mainloop, K blocks counted across tiles), then
//    wait until the parked tile is free, park the accumulators as fp32, and go on with the next tile;
//  * producer warpgroup, warp 0: TMA copies of every tile's K blocks into the ring, running ahead across tiles;
//  * producer warpgroup(s), warps 1 .. kEpilogueWarps (epilogue warps: 3 with 40 registers, or 7 with 88, see
//    WgmmaConfig): per tile, the rows' scales and the columns'
//    scales and biases into shared memory (while the consumers still compute), then wait for the parked tile and
//    store it through the epilogue.
// Two barriers hand the parked tile over: parked_full (256 consumer arrivals) and parked_empty (kEpilogueThreads).
// B-multicast pairs (Cfg::kPairB, clusters of two along x): the units of work are pairs of row blocks of one column
// tile (tile_of's order over them); cluster c of gridDim.x / 2 takes units c, c + gridDim.x / 2, ..., and its CTA
// of rank r row block 2 m + r of each (the partner of an odd last row block copies B for its peer, computes on
// zero rows and stores nothing). The pair starts, and each role ends, behind a cluster barrier.

template <class Cfg>
FG_DEVICE int persistent_first() {
  return Cfg::kPairB ? static_cast<int>(blockIdx.x) / 2 : static_cast<int>(blockIdx.x);
}
template <class Cfg>
FG_DEVICE int persistent_step() {
  return Cfg::kPairB ? sm90::grid_ctas_x() / 2 : sm90::grid_ctas_x();
}
// A one-wave grid's units of work for tiles_n x tiles_m tiles: the tiles, or (pairs) a column tile's two row blocks;
// and how many of `units` a CTA takes that takes every step-th from first (persistent_first, persistent_step). The
// persistent kernel and the CTA-per-tile kernel's tile loop share them.
template <class Cfg>
FG_DEVICE int unit_count(int tiles_n, int tiles_m) {
  return tiles_n * (Cfg::kPairB ? (tiles_m + 1) / 2 : tiles_m);
}
FG_DEVICE int cta_unit_count(int units, int first, int step) { return (units - first + step - 1) / step; }
// Tiles always in groups of row blocks (tile_of's group_all: see there).
template <class In, class Cfg>
FG_DEVICE void persistent_tile(int t, int num_n, int num_m, int N, int K, int& m_block, int& n_block) {
  if constexpr (Cfg::kPairB) {
    pair_tile_of(t, num_n, (num_m + 1) / 2, N, K * InTraits<In>::kBytes, sm90::cluster_rank(), m_block, n_block,
                 true);
  } else {
    tile_of(t, num_n, num_m, N, K * InTraits<In>::kBytes, m_block, n_block, true);
  }
}

// A unit's tile: its first row and column, its row bound (rows >= m_end are not stored) and its column operands'
// offset (a grouped tile's g * N, as sm90_gemm_tiles's col_base).
struct UnitTile {
  int m0, n0, m_end, col_base;
};
// kGrouped: unit t is row block t / tiles_n of all groups' row blocks (the group table, gemm_groups.hpp) and column
// tile t % tiles_n, so the tiles of a row block run side by side (A's rows read once while they are in L2), as the
// CTA-per-tile grouped kernel's grid orders them.
template <class In, class Cfg, bool kGrouped>
FG_DEVICE UnitTile persistent_unit(int t, int tiles_n, int tiles_m, int M, int N, int K, const GroupArgs& ga) {
  if constexpr (kGrouped) {
    const int v = t / tiles_n;
    const GroupTile g = table_row_block<Cfg::kBlockM>(KernelSmem<Cfg>().group_table(), ga.groups, v);
    return UnitTile{g.m0, (t - v * tiles_n) * Cfg::kBlockN, g.m_end, g.group * N};
  } else {
    int m_block, n_block;
    persistent_tile<In, Cfg>(t, tiles_n, tiles_m, N, K, m_block, n_block);
    return UnitTile{m_block * Cfg::kBlockM, n_block * Cfg::kBlockN, M, 0};
  }
}

// The units of work: tiles_n x tiles_m tiles (unit_count), or a grouped kernel's row blocks of all groups (the group
// table's count) times tiles_n.
template <class Cfg, bool kGrouped>
FG_DEVICE int persistent_units(int tiles_n, int tiles_m, const GroupArgs& ga) {
  if constexpr (kGrouped)
    return KernelSmem<Cfg>().group_table()[ga.groups] * tiles_n;
  else
    return unit_count<Cfg>(tiles_n, tiles_m);
}

// bs: the block scales (Cfg::kBlockScaled only; BlockScaled<Config> in sm90_gemm_common.hpp).
// kGrouped: a grouped GEMM (gemm_groups.hpp, `ga`; contiguous or masked layout) on GroupedPersistent<Config>: the
// units are every group's row blocks times the column tiles, B's maps span the G groups' stacked weights.
template <class In, class Epi, class Cfg, bool kGrouped = false>
FG_DEVICE void sm90_gemm_persistent(const sm90::TmaDesc& a_map, const sm90::TmaDesc& b_map, int M, int N, int K,
                                    const typename Epi::Params& ep, const BlockScaleArgs& bs = BlockScaleArgs{},
                                    const GroupArgs& ga = GroupArgs{}) {
  static_assert(Epi::kRowValues * Cfg::kBlockM + Epi::kColValues * Cfg::kBlockN <= Cfg::kStagedFloats,
                "the epilogue hoists more row/column values than the persistent config stages");
  // A group-quantised output (out_group) is stored per parked row by one warp (store_parked_groups).
  static_assert(OutGroupOf<Epi>::value == 0 || OutGroupOf<Epi>::value == Cfg::kBlockN,
                "out_group: the persistent tile's columns are one group");
  constexpr bool kGroups = OutGroupOf<Epi>::value != 0;
  static_assert(!kGrouped || !(Cfg::kPairB || Cfg::kBlockScaled || kGroups),
                "persistent grouped kernels: no B-multicast pairs, block scales or group-quantised outputs yet");
  using Mma = MmaOf<In, Cfg>;
  using Acc = typename Mma::Acc;
  constexpr int kAcc = Cfg::kAccPerThread;
  constexpr int kConsumerWarps = Cfg::kConsumerThreads / 32;
  // A CTA's last tile: no MMAs follow to hide its epilogue, so the consumer warps, done, store rows beside the
  // epilogue warps (rows dealt over all kAllWarps; barrier 3 hands them the staged row and column values).
  constexpr bool kLastTileHelp = !Cfg::kPairB;
  constexpr int kAllWarps = Cfg::kEpilogueWarps + kConsumerWarps;
  constexpr int kLastTileThreads = Cfg::kEpilogueThreads + Cfg::kConsumerThreads;

  if (sm90::dynamic_smem_bytes() < Cfg::kSmemBytes) __trap();  // host / device layouts disagree: fail loudly
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;
  // NOTE: each role derives its shared-memory addresses and tile counts after its setmaxnreg (KernelSmem,
  // from an opaque base): a value computed before the split and live across setmaxnreg.dec 40 would be
  // spilled to local memory.
  if (tid == 0) {
    const KernelSmem<Cfg> sm;
    for (int s = 0; s < Cfg::kStages; ++s) {
      sm90::mbar_init(&sm.full()[s], 1);
      sm90::mbar_init(&sm.empty()[s], Cfg::kPair * kConsumerWarps);
    }
    sm90::mbar_init(sm.parked_full(), Cfg::kConsumerThreads);
    sm90::mbar_init(sm.parked_empty(), Cfg::kEpilogueThreads);
    sm90::fence_mbar_init();
  }
  if constexpr (kGrouped) {
    if (ga.rows < 0) __trap();  // the m_indices layout has no group table (the host never plans it here)
    if (warp == 0) build_group_table<Cfg::kBlockM>(ga, M, KernelSmem<Cfg>().group_table(), lane);
  }
  if constexpr (Cfg::kPairB)
    sm90::cluster_sync();  // the peer's copies and arrives may reach this CTA's barriers from the start
  else
    __syncthreads();
  // Per role, after its setmaxnreg (see above): tiles along N and M, units of work (tiles, or pairs of row
  // blocks of a column tile), K blocks per tile.
  auto counts = [&](int& num_n, int& num_m, int& num_tiles, int& kb_count) {
    num_n = (N + Cfg::kBlockN - 1) / Cfg::kBlockN;
    num_m = (M + Cfg::kBlockM - 1) / Cfg::kBlockM;
    num_tiles = persistent_units<Cfg, kGrouped>(num_n, num_m, ga);
    kb_count = k_block_count<In, Cfg>(K);
  };

  if (warp >= kConsumerWarps) {
    sm90::setmaxnreg_dec<Cfg::kProducerRegs>();
    const KernelSmem<Cfg> sm;
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
        const int pair_rank = Cfg::kPairB ? static_cast<int>(sm90::cluster_rank()) : 0;
        for (int t = persistent_first<Cfg>(), g = 0; t < num_tiles; t += persistent_step<Cfg>()) {
          const UnitTile u = persistent_unit<In, Cfg, kGrouped>(t, num_n, num_m, M, N, K, ga);
          for (int i = 0; i < kb_count; ++i, ++g) {
            const int s = g % Cfg::kStages;
            sm90::mbar_wait(&empty[s], ((g / Cfg::kStages) & 1) ^ 1);
            copy_k_block<In, Cfg>(stage_a + s * Cfg::kStageBytesA, stage_b + s * Cfg::kStageBytesB, a_map,
                                  b_map, &full[s], a_rows, i, u.m0, u.col_base + u.n0, pair_rank);
          }
        }
      }
      if constexpr (Cfg::kPairB) sm90::cluster_sync();  // every thread of the pair, once, at its end
      return;
    }
    const int e = 32 * w + lane;  // epilogue thread 0 .. kEpilogueThreads - 1
    for (int t = persistent_first<Cfg>(), it = 0;; t += persistent_step<Cfg>(), ++it) {
      // The tile counts are recounted per tile from opaque copies of M and N, and parked_empty is addressed from
      // a fresh base below: held across the loop, they take registers from the 40-register epilogue warps (two
      // rows in flight spill; with one row this form beats the counts held; WgmmaConfig).
      int m_opaque = M, n_opaque = N;
      asm volatile("" : "+r"(m_opaque), "+r"(n_opaque));
      const int tiles_n = (n_opaque + Cfg::kBlockN - 1) / Cfg::kBlockN;
      const int tiles_m = (m_opaque + Cfg::kBlockM - 1) / Cfg::kBlockM;
      const int tiles = persistent_units<Cfg, kGrouped>(tiles_n, tiles_m, ga);
      if (t >= tiles) break;
      const bool last = kLastTileHelp && t + persistent_step<Cfg>() >= tiles;
      const UnitTile u = persistent_unit<In, Cfg, kGrouped>(t, tiles_n, tiles_m, M, N, K, ga);
      const int m0 = u.m0, m_end = u.m_end;  // (m_end: M, or a grouped tile's group bound)
      const int col = u.n0 + 4 * lane;
      const int n0 = u.n0;
      // Addresses come from a fresh KernelSmem per tile: held across the loop, 40 registers do not suffice.
      const KernelSmem<Cfg> tsm;
      float* row_staged = tsm.row_staged();
      float* col_staged = tsm.template col_staged<Epi>();
      // This thread's rows e, e + kEpilogueThreads (while < 128) and columns likewise, each set's loads all in
      // flight at once (through the read-only path): the staging must stay far shorter than a tile's MMAs.
      constexpr int kSlots = (Cfg::kBlockM + Cfg::kEpilogueThreads - 1) / Cfg::kEpilogueThreads;
      static_assert(Cfg::kBlockN == Cfg::kBlockM, "one slot count for rows and columns");
      int rows[kSlots], cols[kSlots];
      bool row_in[kSlots], col_in[kSlots];
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int i = e + s * Cfg::kEpilogueThreads;
        rows[s] = m0 + i;
        cols[s] = u.col_base + n0 + i;
        row_in[s] = i < Cfg::kBlockM && m0 + i < m_end;
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
      if (last) sm90::named_barrier_arrive(3, kLastTileThreads);  // ... for the consumers too
      sm90::mbar_wait(tsm.parked_full(), it & 1);
      if constexpr (kGroups) {  // every lane: the group max is a warp reduction
        if (last)
          store_parked_groups<Epi, kAllWarps>(ep, tsm.parked(), row_staged, col_staged, M, N, m0, n0, lane, w);
        else
          store_parked_groups<Epi, Cfg::kEpilogueWarps>(ep, tsm.parked(), row_staged, col_staged, M, N, m0, n0,
                                                        lane, w);
      } else if (col < N) {  // N % 16 == 0: the thread's four columns are all in or all out
        // Seven epilogue warps with 88 registers: two copies of the row loop, the output's alignment tested here, not
        // per row (epilogue.hpp). With 40 (three warps, or seven beside two chains): one loop testing each row's
        // address: two copies of the loop do not fit their registers.
        constexpr bool kTestHoisted = Cfg::kProducerRegs >= 88;
        if (last)  // every kAllWarps-th row from w on; the consumer warps take the others
          store_parked_tile<Epi, kAllWarps, 1, false>(ep, tsm.parked(), row_staged, col_staged, m_end, m0, col,
                                                      4 * lane, w);
        else
          store_parked_tile<Epi, Cfg::kEpilogueWarps, Cfg::kEpilogueRowsAtOnce, kTestHoisted>(
              ep, tsm.parked(), row_staged, col_staged, m_end, m0, col, 4 * lane, w);
      }
      sm90::mbar_arrive(KernelSmem<Cfg>().parked_empty());  // a fresh base (above)
      sm90::named_barrier_sync(2, Cfg::kEpilogueThreads);  // everyone is done with the staged values
    }
    if constexpr (Cfg::kPairB) sm90::cluster_sync();
    return;
  }

  sm90::setmaxnreg_inc<Cfg::kConsumerRegs>();
  const KernelSmem<Cfg> sm;
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
  const int step = persistent_step<Cfg>();
  const int my_tiles = cta_unit_count(num_tiles, persistent_first<Cfg>(), step);
  for (int it = 0; it < my_tiles; ++it) {
    Acc acc[kAcc];
#pragma unroll
    for (int j = 0; j < kAcc; ++j) acc[j] = Acc(0);
    if constexpr (Cfg::kBlockScaled) {  // the tile's block scales (recomputed per tile: nothing else stays live)
      const UnitTile u = persistent_unit<In, Cfg, kGrouped>(persistent_first<Cfg>() + it * step, num_n, num_m, M, N,
                                                             K, ga);
      consumer_mainloop<In, Cfg>(acc, it * kb_count, kb_count, stage_a, stage_b, full, empty,
                                 sm90::warp_uniform(warp >> 2), lane,
                                 block_scale_rows<2, false, Epi::kPairs>(
                                     bs, M, u.m0 + 16 * warp, u.n0, tid & 127, warp, 0,
                                     sm90::smem_addr(stage_a) + Cfg::kScaleRingOffset));
    } else {
      consumer_mainloop<In, Cfg>(acc, it * kb_count, kb_count, stage_a, stage_b, full, empty,
                                 sm90::warp_uniform(warp >> 2), lane);
    }
    sm90::mbar_wait(parked_empty, (it & 1) ^ 1);  // the epilogue warps are done with the previous tile
    const int ct = tid & 127;  // thread within its consumer warpgroup
#pragma unroll
    for (int j = 0; j < kAcc; j += 2)
      *reinterpret_cast<float2*>(&parked[parked_index(64 * (warp >> 2) + acc_row(ct, j), acc_col(ct, j))]) =
          make_float2(static_cast<float>(acc[j]), static_cast<float>(acc[j + 1]));
    sm90::mbar_arrive(parked_full);
  }
  if constexpr (kLastTileHelp) {
    if (my_tiles > 0) {  // the last tile's rows E + w, E + w + kAllWarps, ... (E: the epilogue warps' count)
      sm90::named_barrier_sync(3, kLastTileThreads);  // staged values in, and every consumer has parked
      // (the step read afresh: held across the main loop, it is spilled in some builds)
      const UnitTile u = persistent_unit<In, Cfg, kGrouped>(
          persistent_first<Cfg>() + (my_tiles - 1) * persistent_step<Cfg>(), num_n, num_m, M, N, K, ga);
      const int col = u.n0 + 4 * lane;
      float* row_staged = sm.row_staged();
      float* col_staged = sm.template col_staged<Epi>();
      if constexpr (kGroups)
        store_parked_groups<Epi, kAllWarps>(ep, parked, row_staged, col_staged, M, N, u.m0, u.n0, lane,
                                            Cfg::kEpilogueWarps + warp);
      else if (col < N)
        store_parked_tile<Epi, kAllWarps, 1, true>(ep, parked, row_staged, col_staged, u.m_end, u.m0, col, 4 * lane,
                                                   Cfg::kEpilogueWarps + warp);
    }
  }
  if constexpr (Cfg::kPairB) sm90::cluster_sync();
}

}  // namespace fg
#endif  // FG_NVIDIA
