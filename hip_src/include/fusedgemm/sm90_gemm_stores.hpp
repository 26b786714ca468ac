// The CTA-per-tile kernel's (sm90_gemm.hpp) store paths through the epilogue slot: the unswapped tiles' column
// and row values and pair stores in the wgmma fragment layout, the split-K reduction over a cluster, and the
// swapped (decode) tiles' epilogue with its values loaded before the main loop. (The persistent kernel stores
// through its epilogue warps: sm90_gemm_persistent.hpp.)
#pragma once
#include "out_groups.hpp"
#include "sm90_gemm_common.hpp"

#if defined(FG_NVIDIA)
namespace fg {

// The column values (Epi::load_col) of a consumer thread's accumulator columns: for each of its kGroups 8-column
// groups g, columns n0 + acc_col(t, 4 g) and the one after (zeros past N). All are loaded before the first store,
// so the epilogue waits for one round of loads instead of one per group (per-group loads stall the consumers with
// the tensor core idle behind them).
template <class Epi, int kGroups>
struct ColumnValues {
  float v[2 * kGroups][Epi::kColValues];

  // col_base: added to the columns' indices (a grouped GEMM's g * N; its column operands are [G, N]).
  FG_DEVICE void load(const typename Epi::Params& ep, int N, int n0, int t, int col_base = 0) {
    int cols[2 * kGroups];
    bool in[2 * kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        cols[2 * g + e] = col_base + n0 + acc_col(t, 4 * g) + e;
        in[2 * g + e] = n0 + acc_col(t, 4 * g) < N;  // N % 16 == 0: a column pair is all in or all out
      }
    }
    Epi::template load_cols<2 * kGroups>(ep, cols, in, v);
  }
};

// In how many rounds the unswapped epilogue loads the ColumnValues of kAcc accumulators (kAcc / 4 groups), each
// round's loads after the previous round's stores: one, except for the 256-wide tiles, where 128 accumulators
// and 64 columns x kColValues values do not fit the consumers' 232 registers (one bias operand: a 224-byte stack
// frame, 228 bytes of spill stores). There each round holds at most 32 values, and the accumulators stored in
// one round are dead in the next (two rounds for one column value: a second wait for loads per tile).
template <class Epi, int kAcc>
__host__ __device__ constexpr int column_rounds() {
  if (kAcc <= 96) return 1;
  int rounds = 1;
  while (rounds < kAcc / 4 && (kAcc / 2) * Epi::kColValues / rounds > 32) rounds *= 2;
  return rounds;
}

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

// The group-quantised store (out_group: out_groups.hpp) of a warpgroup's 64 x kBlockN tile, whose kBlockN columns
// are one group: rows row0 and row0 + 8 (values r) of consumer thread t, columns n0 + acc_col(t, j). A row of the
// wgmma D fragment lives in the 4 threads t ^ {1, 2, 3} of one warp (acc_row reads t >> 2 only), so its |y| max over
// the group is the thread's own values and two shuffles: no shared memory, no barrier. Rows >= M and columns >= N
// take no part and are not written. Every thread of the warpgroup calls it (shuffles inside).
template <class Epi, int kAcc, class Acc>
FG_DEVICE void store_groups(const typename Epi::Params& ep, int M, int N, const float (&r)[2][Epi::kRowValues],
                            int row0, int n0, int t, int col_base, const Acc (&acc)[kAcc]) {
  static_assert(!Epi::kPairs, "out_group of a gate / up pair: 128 outputs are 256 GEMM columns, wider than the tile");
  static_assert(!Epi::kSaves, "out_group: no saved output");
  static_assert(2 * kAcc == OutGroupOf<Epi>::value, "out_group: the tile's columns (4 threads x kAcc / 2) are a group");
  using Q = typename QuantCodesOf<typename Epi::Output>::type;
  ColumnValues<Epi, kAcc / 4> cv;
  cv.load(ep, N, n0, t, col_base);
  const bool row_in[2] = {row0 < M, row0 + 8 < M};
  float y[kAcc];  // element j: row row0 + 8 ((j >> 1) & 1), column n0 + acc_col(t, j)
  u32 key[2] = {0, 0};  // |y| of the thread's columns of each row, as ordered bits (quant::abs_bits): NaN above inf
#pragma unroll
  for (int j = 0; j < kAcc; ++j) {
    const int h = (j >> 1) & 1, e = j & 1;
    const int col = n0 + acc_col(t, j);
    const bool in = row_in[h] && col < N;  // (a value outside is never evaluated: its aux operands are out of bounds)
    float saved;
    y[j] = in ? Epi::value(ep, static_cast<float>(acc[j]), r[h], cv.v[2 * (j / 4) + e], row0 + 8 * h, col, saved)
              : 0.f;
    key[h] = quant::max_u32(key[h], quant::abs_bits(y[j]));
  }
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float s = quant::row_scale<Q>(bits_to_float(lanes_max<4>(key[h])));
    inv[h] = 1.f / s;  // IEEE division, as quantize_rows
    if (row_in[h] && (t & 3) == 0) Epi::store_scale(ep, row0 + 8 * h, n0 / OutGroupOf<Epi>::value, s);
  }
#pragma unroll
  for (int j = 0; j < kAcc; j += 2) {  // a column pair of one row: one 2-byte store
    const int h = (j >> 1) & 1;
    const int col = n0 + acc_col(t, j);
    if (row_in[h] && col < N) {  // N % 16 == 0: a column pair is all in or all out
      const float v[2] = {y[j], y[j + 1]};
      Epi::template store_codes<2>(ep, row0 + 8 * h, col, v, inv[h]);
    }
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
// CTA storing 1 / splits of the elements: its share, j0 <= j < j0 + kShare (j0 = rank * kShare).
//
// A thread's elements span few rows and columns: acc_col reads bits 0 and 2.. of e = j % kAccPerMma (kAccPerMma / 2
// rows), acc_row bit 1 of e and h (2 kAcc / kAccPerMma columns). SwappedOperands holds the epilogue's values of
// those rows and columns, loaded in one batch before the main loop so that their latency hides under the weight
// stream. Loaded in the store loop (as they still are where kEarly is false), each element waited for its own
// DRAM round trip after the last K block, one element after another: at decode sizes that is a fifth of the kernel.
// kEarly: the values fit beside the main loop's registers.
constexpr int kMaxEarlyValues = 32;  // floats per thread
template <class Epi, int kAcc, int kAccPerMma>
struct SwappedOperands {
  static_assert(kAccPerMma % 4 == 0 && kAcc % kAccPerMma == 0, "whole m64 wgmma D fragments");
  static constexpr int kRows = kAccPerMma / 2;
  static constexpr int kCols = 2 * kAcc / kAccPerMma;
  static constexpr int kColSets = Epi::kPairs ? 2 : 1;  // a paired epilogue's weight rows n and n + 1
  static constexpr bool kEarly =
      kRows * Epi::kRowValues + kColSets * kCols * Epi::kColValues <= kMaxEarlyValues;
  float r[kEarly ? kRows : 1][Epi::kRowValues];
  float c[kColSets][kEarly ? kCols : 1][Epi::kColValues];

  FG_DEVICE static constexpr int row_slot(int j) { return (j & 1) | ((j % kAccPerMma) >> 2 << 1); }
  FG_DEVICE static constexpr int col_slot(int j) { return 2 * (j / kAccPerMma) + ((j >> 1) & 1); }
  FG_DEVICE static void position(int m0, int n0, int t, int j, int& m, int& n) {
    const int h = j / kAccPerMma, e = j % kAccPerMma;
    m = m0 + acc_col(t, e);
    n = n0 + 64 * h + acc_row(t, e);
  }

  FG_DEVICE void load(const typename Epi::Params& ep, int M, int N, int m0, int n0, int t) {
    if constexpr (kEarly) {
      int ms[kRows], ns[kColSets][kCols];
      bool m_in[kRows], n_in[kColSets][kCols];
#pragma unroll
      for (int j = 0; j < kAcc; ++j) {  // every element: each slot is written (identically) by several
        int m, n;
        position(m0, n0, t, j, m, n);
        ms[row_slot(j)] = m, m_in[row_slot(j)] = m < M;
#pragma unroll
        for (int p = 0; p < kColSets; ++p) {
          // A pair's odd row (t & 4: its values are never used) may be N - 1: row N is not read.
          ns[p][col_slot(j)] = n + p;
          n_in[p][col_slot(j)] = n + p < N;
        }
      }
      Epi::template load_rows<kRows>(ep, ms, m_in, r);
#pragma unroll
      for (int p = 0; p < kColSets; ++p) Epi::template load_cols<kCols>(ep, ns[p], n_in[p], c[p]);
    }
  }
};

// out = a[idx] by selects over compile-time indices (a run-time index into a register array would put the array
// in local memory); folds to a plain copy where idx is a compile-time constant.
template <int kN, int kV>
FG_DEVICE void pick_values(const float (&a)[kN][kV], int idx, float (&out)[kV]) {
#pragma unroll
  for (int x = 0; x < kV; ++x) out[x] = a[0][x];
#pragma unroll
  for (int k = 1; k < kN; ++k)
    if (idx == k)
#pragma unroll
      for (int x = 0; x < kV; ++x) out[x] = a[k][x];
}

template <class Epi, class Cfg, int kAcc, int kAccPerMma, class Acc>
FG_DEVICE void store_swapped(const typename Epi::Params& ep, int M, int N, int m0, int n0, int t, int splits, int rank,
                             const Acc (&acc)[kAcc], const SwappedOperands<Epi, kAcc, kAccPerMma>& ops, u8* smem) {
  using Ops = SwappedOperands<Epi, kAcc, kAccPerMma>;
  // Element j's epilogue values: picked from the early batch, or (kEarly false) loaded now, one by one.
  auto values = [&](int j, int m, int n, float (&r)[Epi::kRowValues], float (&c)[Ops::kColSets][Epi::kColValues]) {
    if constexpr (Ops::kEarly) {
      pick_values(ops.r, Ops::row_slot(j), r);
#pragma unroll
      for (int p = 0; p < Ops::kColSets; ++p) pick_values(ops.c[p], Ops::col_slot(j), c[p]);
    } else {
      Epi::load_row(ep, m, r);
#pragma unroll
      for (int p = 0; p < Ops::kColSets; ++p) Epi::load_col(ep, n + p, c[p]);
    }
  };
  // Element j with value v. A paired epilogue takes weight-row pairs (gate 2j, up 2j + 1). Weight row n + 1 is
  // acc_row + 1: thread t ^ 4 of the same warp, same element, same activation row (acc_col reads t & 3 only). Every
  // thread exchanges first (a full-warp shuffle, before any bound check); the even row's thread (t & 4 == 0: n0 and
  // the other terms of acc_row are even) stores the pair.
  // NOTE: the early values are picked before the bound checks: picked after them, the swapped tile takes 70
  // registers, not 56.
  auto store_one = [&](int j, Acc v) {
    int m, n;
    Ops::position(m0, n0, t, j, m, n);
    float r[Epi::kRowValues], c[Ops::kColSets][Epi::kColValues];
    if constexpr (Ops::kEarly) values(j, m, n, r, c);
    constexpr int kV = Epi::kPairs ? 2 : 1;  // GEMM columns per store: a pair's two, or one
    float a[kV] = {static_cast<float>(v)};
    if constexpr (Epi::kPairs) {
      a[1] = arch::shfl_xor(a[0], 4);
      if (t & 4) return;
    }
    if (m >= M || n >= N) return;
    if constexpr (!Ops::kEarly) values(j, m, n, r, c);
    Epi::template store<kV>(ep, m, n, a, r, c);
  };
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) store_one(j, acc[j]);
    return;
  }
  // The share's sums over the cluster first (all their shared-memory reads in flight), then the stores; the split
  // count a compile-time one, so that the share's loops unroll over registers. (Unrolled over all kAcc elements,
  // each under a test of the share, they make ~3x the SASS and a much longer epilogue.)
  const u32* partial = park_partials<Cfg>(acc, smem, t);
  auto reduce_and_store = [&](auto split_count) {
    constexpr int kSplits = decltype(split_count)::value;
    constexpr int kShare = kAcc / kSplits;
    const int j0 = rank * kShare;
    Acc v[kShare][1];
#pragma unroll
    for (int i = 0; i < kShare; ++i) cluster_sum<Cfg>(partial, j0 + i, t, kSplits, v[i]);  // inlined: kSplits loads
#pragma unroll
    for (int i = 0; i < kShare; ++i) store_one(j0 + i, v[i][0]);
  };
  static_assert(kAcc % 8 == 0, "split-K up to 8 gives every CTA whole elements");
  if (splits == 2)
    reduce_and_store(IntConstant<2>{});
  else if (splits == 4)
    reduce_and_store(IntConstant<4>{});
  else
    reduce_and_store(IntConstant<8>{});  // the cluster limit (SPLITS in plan/__init__.py)
  sm90::cluster_sync();  // keep this CTA's partial tile alive until every CTA has read it
}

}  // namespace fg
#endif  // FG_NVIDIA
