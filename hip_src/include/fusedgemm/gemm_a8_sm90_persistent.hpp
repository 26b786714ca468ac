// gemm_a8 on sm_90a, persistent: one wave of CTAs looping over 128 x 128 tiles, the epilogue on the producer
// warpgroup's spare warps under the next tile's MMAs (WgmmaConfig::kPersistent; gemm_a8_sm90.hpp dispatches).
#pragma once
#include "gemm_a8_sm90_mainloop.hpp"
#include "gemm_a8_sm90_stream_k.hpp"

#if defined(FG_NVIDIA)
namespace fg {

// ---- persistent kernel with epilogue warps (Cfg::kPersistent) ------------------------------------------------
// Parked tile: element (row, col) of the 128 x 128 fp32 tile at word row * 128 + (col ^ ((row & 3) << 3)). The
// XOR puts the four rows that a consumer half-warp writes (one 8-word group each) on different banks, and keeps
// an epilogue thread's four columns 4c..4c+3 together (one conflict-free 16-byte read).
FG_DEVICE int parked_index(int row, int col) { return row * 128 + (col ^ ((row & 3) << 3)); }

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
    float4 v[kRowsAtOnce];
    float rv[kRowsAtOnce][Epi::kRowValues];
#pragma unroll
    for (int u = 0; u < kRowsAtOnce; ++u) {
      int r = r0;
#if !defined(FG_PROBE_ROW_CLAMP)  // ci/probe_sm90.py's A/B variant: the clamp at one row too (a no-op there)
      if constexpr (kRowsAtOnce > 1)
#endif
        r = min(r0 + u * kEpilogueWarps, rows - 1);  // past the last row: a duplicate read, not stored
      v[u] = *reinterpret_cast<const float4*>(&parked[parked_index(r, col_local)]);
#pragma unroll
      for (int k = 0; k < Epi::kRowValues; ++k) rv[u][k] = row_staged[k * kBlock + r];
    }
#pragma unroll
    for (int u = 0; u < kRowsAtOnce; ++u) {
      const int r = r0 + u * kEpilogueWarps;
      if (u == 0 || r < rows) {
        const float acc[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
        Epi::template store<4, kVec4Aligned>(ep, m0 + r, col, acc, rv[u], c);
      }
    }
  }
}

// Stream-K's partial piece: the parked tile into the CTA's slot, row-major (a warp's row is 512 contiguous bytes),
// every row (rows past M carry zeros or stale values that only ever reach rows past M). Epilogue warp w of kWarps.
template <class Cfg>
FG_DEVICE void stream_k_store_slot(const float* parked, float* slot, int w, int lane) {
#pragma unroll 4
  for (int r = w; r < Cfg::kBlockM; r += Cfg::kEpilogueWarps)
    *reinterpret_cast<float4*>(&slot[r * 128 + 4 * lane]) =
        *reinterpret_cast<const float4*>(&parked[parked_index(r, 4 * lane)]);
}

// Stream-K's first piece: the `peers` later pieces' slots (contiguous from `slots`) added into the parked tile, in
// slot order (deterministic). Epilogue warp w; each element is this thread's alone.
template <class Cfg>
FG_DEVICE void stream_k_add_slots(float* parked, const float* slots, int peers, int w, int lane) {
#pragma unroll 4  // four rows' loads in flight (latency bound otherwise: ~10k cycles a tile on an H100)
  for (int r = w; r < Cfg::kBlockM; r += Cfg::kEpilogueWarps) {
    float4* dst = reinterpret_cast<float4*>(&parked[parked_index(r, 4 * lane)]);
    float4 v = *dst;
    for (int p = 0; p < peers; ++p) {
      const uint4 x = sm90::ld_global_cg_v4(
          reinterpret_cast<const uint4*>(slots + static_cast<i64>(p) * (kStreamKSlotBytes / 4) + r * 128 + 4 * lane));
      v.x += __builtin_bit_cast(float, x.x);
      v.y += __builtin_bit_cast(float, x.y);
      v.z += __builtin_bit_cast(float, x.z);
      v.w += __builtin_bit_cast(float, x.w);
    }
    *dst = v;
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

// One wave of CTAs; CTA c computes tiles c, c + gridDim.x, ... (tile_of order), then with stream-K (sk_tiles > 0,
// not in pairs) its range of the last tiles' K blocks (gemm_a8_sm90_stream_k.hpp). Warp roles:
//  * consumer warpgroups 0, 1: per unit (a tile, or a piece of one), the K blocks (consumer_mainloop, K blocks
//    counted across units), then wait until the parked tile is free, park the accumulators as fp32, and go on;
//  * producer warpgroup, warp 0: TMA copies of every tile's K blocks into the ring, running ahead across tiles;
//  * producer warpgroup(s), warps 1 .. kEpilogueWarps (epilogue warps: 3 with 40 registers, or 7 with 88, see
//    WgmmaConfig): per tile, the rows' scales and the columns'
//    scales and biases into shared memory (while the consumers still compute), then wait for the parked tile and
//    store it through the epilogue (a stream-K first piece: plus the later pieces from the workspace; a partial
//    piece: into the workspace instead).
// Two barriers hand the parked tile over: parked_full (256 consumer arrivals) and parked_empty (kEpilogueThreads).
// B-multicast pairs (Cfg::kPairB, clusters of two along x): the units of work are pairs of row blocks of one column
// tile (tile_of's order over them); cluster c of gridDim.x / 2 takes units c, c + gridDim.x / 2, ..., and its CTA
// of rank r row block 2 m + r of each (the partner of an odd last row block copies B for its peer, computes on
// zero rows and stores nothing). The pair starts, and each role ends, behind a cluster barrier.
// Timeline probe of the persistent kernel (ci/probe_sm90.py --stamps; only with FG_PROBE_STAMPS): the SM clock at
// each hand-over point of a CTA's first kStampTiles tiles, into fg_probe_stamps[(CTA * kStampTiles + tile) * 8 +
// slot]: consumer warpgroup 0's thread 0: 0 main loop start, 1 its end, 2 parked tile free, 3 parked; warpgroup
// 1's thread 0: 4 main loop end, 5 parked; epilogue thread 0: 6 parked tile full, 7 its rows stored (stream-K's
// units count as tiles; a partial piece has no 6 and 7).
constexpr int kStampTiles = 64;
#if defined(FG_PROBE_STAMPS)
FG_DEVICE void persistent_stamp(int slot, int it) {
  if (it < kStampTiles)
    fg_probe_stamps[(static_cast<int>(blockIdx.x) * kStampTiles + it) * 8 + slot] = clock64();
}
#define FG_PERSISTENT_STAMP(COND, SLOT, IT) \
  do {                                      \
    if (COND) persistent_stamp(SLOT, IT);   \
  } while (0)
#else
#define FG_PERSISTENT_STAMP(COND, SLOT, IT) \
  do {                                      \
  } while (0)
#endif

// The units of work (stream_k_unit) are those of CTA persistent_first() of
// persistent_step(): with kPairB a cluster of the clusters, and sk_tiles is 0 there.
template <class Cfg>
FG_DEVICE int persistent_first() {
  return Cfg::kPairB ? static_cast<int>(blockIdx.x) / 2 : static_cast<int>(blockIdx.x);
}
template <class Cfg>
FG_DEVICE int persistent_step() {
  return Cfg::kPairB ? sm90::grid_ctas_x() / 2 : sm90::grid_ctas_x();
}
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

template <class In, class Epi, class Cfg, int kProbe>
FG_DEVICE void gemm_a8_wgmma_persistent(const sm90::TmaDesc& a_map, const sm90::TmaDesc& b_map, int M, int N, int K,
                                        int sk_tiles, int sk_ctas, u8* sk_ws, const typename Epi::Params& ep) {
  static_assert(Epi::kRowValues * Cfg::kBlockM + Epi::kColValues * Cfg::kBlockN <= Cfg::kStagedFloats,
                "the epilogue hoists more row/column values than the persistent config stages");
  using Mma = MmaOf<In, Cfg>;
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
      sm90::mbar_init(&sm.empty()[s], Cfg::kPair * kConsumerWarps);
    }
    sm90::mbar_init(sm.parked_full(), Cfg::kConsumerThreads);
    sm90::mbar_init(sm.parked_empty(), Cfg::kEpilogueThreads);
    sm90::fence_mbar_init();
  }
  if constexpr (Cfg::kPairB)
    sm90::cluster_sync();  // the peer's copies and arrives may reach this CTA's barriers from the start
  else
    __syncthreads();
  // Stream-K runs on single CTAs with seven epilogue warps (s128n128): its partial and first-piece paths on three
  // 40-register epilogue warps (p128n128) spilled their loop counter, whatever was recomputed per tile.
  constexpr bool kStreamK = !Cfg::kPairB && Cfg::kEpilogueWarps == 7;
  if constexpr (!kStreamK) sk_tiles = sk_ctas = 0;
  // Per role, after its setmaxnreg (see above): tiles along N and M, units of work (tiles, or pairs of row
  // blocks of a column tile), K blocks per tile.
  auto counts = [&](int& num_n, int& num_m, int& num_tiles, int& kb_count) {
    num_n = (N + Cfg::kBlockN - 1) / Cfg::kBlockN;
    num_m = (M + Cfg::kBlockM - 1) / Cfg::kBlockM;
    num_tiles = num_n * (Cfg::kPairB ? (num_m + 1) / 2 : num_m);
    kb_count = k_block_count<In, Cfg>(K);
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
        const int pair_rank = Cfg::kPairB ? static_cast<int>(sm90::cluster_rank()) : 0;
        const int c = persistent_first<Cfg>(), ctas = persistent_step<Cfg>();
        int g = 0;  // K blocks copied so far: the ring's stage and phase
        auto copy_unit = [&](const StreamKUnit& u) {
          int m_block, n_block;
          persistent_tile<In, Cfg>(u.tile, num_n, num_m, N, K, m_block, n_block);
          for (int i = u.k0; i < u.k0 + u.count; ++i, ++g) {
            const int s = g % Cfg::kStages;
            sm90::mbar_wait(&empty[s], ((g / Cfg::kStages) & 1) ^ 1);
            if constexpr (probe_no_copy(kProbe)) {
              sm90::mbar_arrive(&full[s]);
              continue;
            }
            copy_k_block<In, Cfg, kProbe>(stage_a + s * Cfg::kStageBytesA, stage_b + s * Cfg::kStageBytesB, a_map,
                                          b_map, &full[s], a_rows, i, m_block * Cfg::kBlockM, n_block * Cfg::kBlockN,
                                          pair_rank);
          }
        };
        StreamKUnit u;
        for (int q = 0; stream_k_unit(q, c, ctas, num_tiles, sk_tiles, sk_ctas, kb_count, u); ++q) copy_unit(u);
      }
      if constexpr (Cfg::kPairB) sm90::cluster_sync();  // every thread of the pair, once, at its end
      return;
    }
    for (int it = 0;; ++it) {
      // This thread's warp and lane, re-read per tile (held across the loop, they cost the 40-register warps one
      // register too many with stream-K's paths). e_t: epilogue thread 0 .. kEpilogueThreads - 1.
      int t_o = static_cast<int>(threadIdx.x);
      asm volatile("" : "+r"(t_o));
      const int lane_t = t_o & 31, w_t = (t_o >> 5) - kConsumerWarps - 1, e_t = 32 * w_t + lane_t;
      // The tile counts are recounted per tile from opaque copies of M and N, and parked_empty is addressed from
      // a fresh base below: held across the loop, they take registers from the 40-register epilogue warps (two
      // rows in flight spilled; with one row this form is 4-14% faster than the counts held; WgmmaConfig).
      // Likewise every input of the unit's arithmetic (hoisted out of the loop, its invariants spilled).
      int m_opaque = M, n_opaque = N, k_opaque = K, sk_opaque = sk_tiles, c_opaque = persistent_first<Cfg>();
      asm volatile("" : "+r"(m_opaque), "+r"(n_opaque), "+r"(k_opaque), "+r"(c_opaque));
      if constexpr (kStreamK) asm volatile("" : "+r"(sk_opaque));  // else 0, known: no stream-K paths
      const int tiles_n = (n_opaque + Cfg::kBlockN - 1) / Cfg::kBlockN;
      const int tiles_m = (m_opaque + Cfg::kBlockM - 1) / Cfg::kBlockM;
      int tile;  // the unit's tile, or -1 for a stream-K partial piece (one register: these warps have 40)
      {
        StreamKUnit u;
        if (!stream_k_unit(it, c_opaque, persistent_step<Cfg>(), tiles_n * (Cfg::kPairB ? (tiles_m + 1) / 2 : tiles_m),
                           sk_opaque, sk_ctas, k_block_count<In, Cfg>(k_opaque), u))
          break;
        tile = u.kind == kPartialPiece ? -1 : u.tile;
      }
      if (kStreamK && tile < 0) {  // stream-K: the parked piece into this CTA's slot, then its flag
        sm90::mbar_wait(PersistentSmem<Cfg>().parked_full(), it & 1);
        u8* ws = sk_ws;  // opaque, as above
        asm volatile("" : "+l"(ws));
        stream_k_store_slot<Cfg>(PersistentSmem<Cfg>().parked(), stream_k_slot(ws, c_opaque), w_t, lane_t);
        sm90::named_barrier_sync(2, Cfg::kEpilogueThreads);
        if (e_t == 0) sm90::flag_release_gpu(&stream_k_flags(ws)[c_opaque], 1u);
        sm90::mbar_arrive(PersistentSmem<Cfg>().parked_empty());
        continue;
      }
      int m_block, n_block;
      persistent_tile<In, Cfg>(tile, tiles_n, tiles_m, N, K, m_block, n_block);
      const int m0 = m_block * Cfg::kBlockM;
      const int col = n_block * Cfg::kBlockN + 4 * lane_t;
      const int n0 = n_block * Cfg::kBlockN;
      // Addresses come from a fresh PersistentSmem per tile: held across the loop, 40 registers do not suffice.
      const PersistentSmem<Cfg> tsm;
      float* row_staged = tsm.row_staged();
      float* col_staged = tsm.template col_staged<Epi>();
      // This thread's rows e_t, e_t + kEpilogueThreads (while < 128) and columns likewise, each set's loads all in
      // flight at once (through the read-only path): the staging must stay far shorter than a tile's MMAs.
      constexpr int kSlots = (Cfg::kBlockM + Cfg::kEpilogueThreads - 1) / Cfg::kEpilogueThreads;
      static_assert(Cfg::kBlockN == Cfg::kBlockM, "one slot count for rows and columns");
      int rows[kSlots], cols[kSlots];
      bool row_in[kSlots], col_in[kSlots];
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int i = e_t + s * Cfg::kEpilogueThreads;
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
        const int i = e_t + s * Cfg::kEpilogueThreads;
        if (i < Cfg::kBlockM) {  // zeros past M / N (load_rows / load_cols write 0 where not in)
#pragma unroll
          for (int k = 0; k < Epi::kRowValues; ++k) row_staged[k * Cfg::kBlockM + i] = rv[s][k];
#pragma unroll
          for (int k = 0; k < Epi::kColValues; ++k) col_staged[k * Cfg::kBlockN + i] = cv[s][k];
        }
      }
      sm90::named_barrier_sync(2, Cfg::kEpilogueThreads);  // the rows' and columns' operands are in
      sm90::mbar_wait(tsm.parked_full(), it & 1);
      FG_PERSISTENT_STAMP(e_t == 0, 6, it);
      if (kStreamK && sk_tiles > 0) {  // a stream-K first piece: the later pieces added into the parked tile, in order
        // The unit again, from opaque counts (nothing of it is held across the staging above: 40 registers).
        int m_o = M, n_o = N, k_o = K, c = persistent_first<Cfg>();
        u8* ws = sk_ws;
        asm volatile("" : "+r"(m_o), "+r"(n_o), "+r"(k_o), "+r"(c), "+l"(ws));
        const int t_all = ((n_o + Cfg::kBlockN - 1) / Cfg::kBlockN) * ((m_o + Cfg::kBlockM - 1) / Cfg::kBlockM);
        const int kb = k_block_count<In, Cfg>(k_o);
        const int s = stream_k_first_piece(it, c, persistent_step<Cfg>(), t_all, sk_tiles, sk_ctas, kb);
        if (s >= 0) {
          const int peers = stream_k_peers(c, sk_ctas, sk_tiles, kb, s);
          if (e_t == 0) stream_k_wait_flags(ws, c, peers);  // and reset them
          sm90::named_barrier_sync(2, Cfg::kEpilogueThreads);
          stream_k_add_slots<Cfg>(PersistentSmem<Cfg>().parked(), stream_k_slot(ws, c + 1), peers, w_t, lane_t);
          sm90::named_barrier_sync(2, Cfg::kEpilogueThreads);
        }
      }
      if (col < N) {  // N % 16 == 0: the thread's four columns are all in or all out
        // Seven epilogue warps (88 registers): two copies of the row loop, the output's alignment tested here, not
        // per row (epilogue.hpp). Three (40 registers): one loop testing each row's address, which was faster there
        // (probe, H100, SiLU, rep by rep: p128n128 N 5120 K 768 M 16384 270 against 292 us with two copies, moe_dn
        // M = 8192 272 against 283; s128n128 N 5120 K 768 184 against 194 the other way round).
#if defined(FG_PROBE_STORE_TEST_PER_ROW)  // ci/probe_sm90.py's A/B variant: every config tests per row
        constexpr bool kTestHoisted = false;
#elif defined(FG_PROBE_STORE_TEST_HOISTED)  // ... every config tests once
        constexpr bool kTestHoisted = true;
#else
        constexpr bool kTestHoisted = Cfg::kEpilogueWarps == 7;
#endif
        if (kTestHoisted && Epi::vec4_aligned(ep))
          store_parked_rows<Epi, Cfg::kEpilogueWarps, Cfg::kEpilogueRowsAtOnce, true>(
              ep, tsm.parked(), row_staged, col_staged, M, m0, col, 4 * lane_t, w_t);
        else
          store_parked_rows<Epi, Cfg::kEpilogueWarps, Cfg::kEpilogueRowsAtOnce, false>(
              ep, tsm.parked(), row_staged, col_staged, M, m0, col, 4 * lane_t, w_t);
      }
      sm90::mbar_arrive(PersistentSmem<Cfg>().parked_empty());  // a fresh base (above)
      FG_PERSISTENT_STAMP(e_t == 0, 7, it);
      sm90::named_barrier_sync(2, Cfg::kEpilogueThreads);  // everyone is done with the staged values
    }
    if constexpr (Cfg::kPairB) sm90::cluster_sync();
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
  const int c = persistent_first<Cfg>(), ctas = persistent_step<Cfg>();
  StreamKUnit u;
  // NOTE: the fp8 two-chain main loop needs 192 accumulators of the 232 registers; little else may stay live
  // across it (the unit's index only), or ptxas spills inside the loop.
  for (int it = 0; stream_k_unit(it, c, ctas, num_tiles, sk_tiles, sk_ctas, kb_count, u); ++it) {
    Acc acc[kAcc];
#pragma unroll
    for (int j = 0; j < kAcc; ++j) acc[j] = Acc(0);
    FG_PERSISTENT_STAMP(tid == 0, 0, it);
    consumer_mainloop<In, Cfg, kProbe>(acc, u.g0, u.count, stage_a, stage_b, full, empty,
                                      sm90::warp_uniform(warp >> 2), lane);
    FG_PERSISTENT_STAMP(tid == 0 || tid == 128, tid == 0 ? 1 : 4, it);
    sm90::mbar_wait(parked_empty, (it & 1) ^ 1);  // the epilogue warps are done with the previous tile
    FG_PERSISTENT_STAMP(tid == 0, 2, it);
    const int ct = tid & 127;  // thread within its consumer warpgroup
#pragma unroll
    for (int j = 0; j < kAcc; j += 2)
      *reinterpret_cast<float2*>(&parked[parked_index(64 * (warp >> 2) + acc_row(ct, j), acc_col(ct, j))]) =
          make_float2(static_cast<float>(acc[j]), static_cast<float>(acc[j + 1]));
    sm90::mbar_arrive(parked_full);
    FG_PERSISTENT_STAMP(tid == 0 || tid == 128, tid == 0 ? 3 : 5, it);
  }
  if constexpr (Cfg::kPairB) sm90::cluster_sync();
}

}  // namespace fg
#endif  // FG_NVIDIA
