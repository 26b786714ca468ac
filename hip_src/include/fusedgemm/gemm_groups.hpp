// The row groups of a grouped GEMM (pkg/fusedgemm/grouped.py: mixture-of-experts layers): group g multiplies its
// rows of A by its own B (B stacked [G * N, K]), and its column operands are the g-th N-long slice of [G, N].
//
// Three layouts, told apart by `rows` (no separate kernels):
//   contiguous (rows == 0): index = offs [G], the groups' cumulative row ends; group g owns rows
//     offs[g - 1] .. offs[g] - 1 (offs[-1] = 0).
//   masked (rows > 0): A is [G, rows, K]; index = masked_m [G]; group g owns rows g * rows .. g * rows +
//     masked_m[g] - 1, the rest of its rows are neither read into an output nor written.
//   m_indices (rows < 0, DeepGEMM's contiguous layout): index = m_indices [M], each row's group or -1 (padding);
//     every group's rows start at a multiple of kMIndicesAlign, padding rows only after them. A block (kBlockM
//     divides the alignment) takes the group of its first row and ends after the block's last row of that group:
//     padding rows are not written.
// The group sizes live on the device (no host sync, CUDA-graph replays may change them), so the grid's row
// blocks are an upper bound: a virtual row block v maps to (group, first row, row bound) here, and blocks past
// the last group's exit at once. Malformed sizes (decreasing offs, masked_m > rows) are clamped so that no row
// outside [0, M) is ever read or written; the host checks them only under its debug switch.
#pragma once
#include "arch/select.hpp"

namespace fg {

constexpr int kMIndicesAlign = 128;  // grouped.py M_INDICES_ALIGN
#if defined(FG_NVIDIA)
constexpr int kGroupLanes = 32;
#else
constexpr int kGroupLanes = 64;  // an AMD wave
#endif

// The kernel argument's group fields (8-aligned, 16 bytes; runtime/kernels.py packs them after the epilogue).
struct GroupArgs {
  const int* index;  // offs [G] (contiguous) or masked_m [G] (masked)
  int groups;        // G
  int rows;          // masked: rows per group of A and the output; contiguous: 0
};

FG_DEVICE int clamp_rows(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

struct GroupTile {
  int group;  // g
  int m0;     // the block's first row (a row of A and of the output)
  int m_end;  // the group's row bound: rows m0 .. m_end - 1 of the block are the group's (at most kBlockM of them)
};

// Virtual row block v -> its tile; false when v is past every group's row blocks (the block has nothing to do).
// Contiguous layout: each block walks the groups' sizes, kBatch loads in flight at a time: the walk waits one
// memory round trip per kBatch groups (8 for 256 experts), and a decode-size call's blocks all pay it before
// their first copy (the sizes are a few hundred bytes, in L2 after the first blocks).
template <int kBlockM>
FG_DEVICE bool group_row_block(const GroupArgs& ga, int M, int v, GroupTile& t) {
  static_assert(kMIndicesAlign % kBlockM == 0, "m_indices: a block lies inside one aligned run of rows");
  if (ga.rows < 0) {
    const int m0 = v * kBlockM;
    if (m0 >= M) return false;
    const int g = ga.index[m0];
    if (g < 0 || g >= ga.groups) return false;  // a block of padding (or an index out of range: nothing written)
    // The block's last row of group g: each lane looks at rows lane, lane + kGroupLanes, ..., then the wave's
    // maximum (every lane of the wave calls this: the shuffles need them all).
    const int lane = static_cast<int>(threadIdx.x) % kGroupLanes;
    int last = 0;
    for (int r = lane; r < kBlockM; r += kGroupLanes)
      if (m0 + r < M && ga.index[m0 + r] == g) last = r;
#pragma unroll
    for (int d = kGroupLanes / 2; d > 0; d /= 2) {
      const int other = static_cast<int>(arch::shfl_xor(static_cast<float>(last), d));  // small ints: exact
      last = other > last ? other : last;
    }
    t.group = g;
    t.m0 = m0;
    t.m_end = m0 + last + 1;
    return true;
  }
  if (ga.rows > 0) {
    const int per_group = (ga.rows + kBlockM - 1) / kBlockM;
    const int g = v / per_group;
    if (g >= ga.groups) return false;
    const int used = clamp_rows(ga.index[g], 0, ga.rows);
    const int m0 = (v - g * per_group) * kBlockM;
    if (m0 >= used) return false;
    t.group = g;
    t.m0 = g * ga.rows + m0;
    t.m_end = g * ga.rows + used;
    return true;
  }
  constexpr int kBatch = 32;
  int lo = 0, before = 0;  // the group's first row; row blocks of the groups before it
  for (int g0 = 0; g0 < ga.groups; g0 += kBatch) {
    int ends[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) ends[i] = g0 + i < ga.groups ? ga.index[g0 + i] : M;
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (g0 + i >= ga.groups) return false;
      const int hi = clamp_rows(ends[i], lo, M);
      const int blocks = (hi - lo + kBlockM - 1) / kBlockM;
      if (v < before + blocks) {
        t.group = g0 + i;
        t.m0 = lo + (v - before) * kBlockM;
        t.m_end = hi;
        return true;
      }
      before += blocks;
      lo = hi;
    }
  }
  return false;
}

// ---- the group table of a persistent grouped kernel (contiguous and masked layouts) ------------------------------
// A persistent CTA loops over units of work (row block, column tile) of all groups, so it needs every group's row
// blocks rather than one: one warp builds this table in shared memory when the CTA starts (build_group_table: the
// sizes loaded at once, then two warp scans), and a unit finds its group by a binary search
// (table_row_block). Its kGroupTableInts ints: first[0 .. G] (group g's first row block among all groups' row
// blocks, first[G] their count), then row_lo[0 .. G - 1] (its first row), then row_hi (its row bound). Sizes are
// clamped as group_row_block clamps them, so both kernels see the same blocks. The m_indices layout has no table.
constexpr int kGroupTableMax = 1024;  // groups a table holds (plan/grouped_call.py PERSISTENT_MAX_GROUPS)
constexpr int kGroupTableInts = 3 * kGroupTableMax + 1;
constexpr int kGroupTableBytes = (kGroupTableInts * 4 + 15) / 16 * 16;

FG_DEVICE int* table_row_lo(int* table) { return table + kGroupTableMax + 1; }
FG_DEVICE int* table_row_hi(int* table) { return table + 2 * kGroupTableMax + 1; }

// Every lane of one warp calls it; G <= kGroupTableMax, ga.rows >= 0. Lane l takes groups l * kPer .. l * kPer +
// kPer - 1, their sizes loaded at once (one memory round trip for the whole table). The caller synchronises before
// any read.
template <int kBlockM>
FG_DEVICE void build_group_table(const GroupArgs& ga, int M, int* table, int lane) {
  constexpr int kPer = kGroupTableMax / kGroupLanes;
  const int groups = ga.groups;
  const int g0 = lane * kPer;
  const bool masked = ga.rows > 0;
  int hi[kPer];  // the groups' row bounds; a group's first row is the previous bound (contiguous) or g * rows
#pragma unroll
  for (int i = 0; i < kPer; ++i) hi[i] = g0 + i < groups ? ga.index[g0 + i] : 0;
  int start = 0;  // contiguous: the row bound of the groups before this lane's
  if (masked) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) hi[i] = (g0 + i) * ga.rows + clamp_rows(hi[i], 0, ga.rows);
  } else {
    // group_row_block's running clamp gives row_hi[g] = min(M, max(0, offs[0], ..., offs[g])), a prefix maximum:
    // the lane's own, then the lanes' before it (a warp scan).
    int run = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      run = imax(run, hi[i]);
      hi[i] = run;
    }
    for (int d = 1; d < kGroupLanes; d *= 2) {
      const int other = arch::shfl_up(run, d);
      if (lane >= d) run = imax(run, other);
    }
    start = arch::shfl_up(run, 1);
    start = lane == 0 ? 0 : imin(M, start);
#pragma unroll
    for (int i = 0; i < kPer; ++i) hi[i] = imin(M, imax(hi[i], start));
  }
  auto row_lo = [&](int i) { return masked ? (g0 + i) * ga.rows : i == 0 ? start : hi[i - 1]; };
  int blocks = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) blocks += g0 + i < groups ? (hi[i] - row_lo(i) + kBlockM - 1) / kBlockM : 0;
  int upto = blocks;  // row blocks of this lane's groups and the lanes' before
  for (int d = 1; d < kGroupLanes; d *= 2) {
    const int other = arch::shfl_up(upto, d);
    if (lane >= d) upto += other;
  }
  int at = upto - blocks;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (g0 + i < groups) {
      table[g0 + i] = at;
      table_row_lo(table)[g0 + i] = row_lo(i);
      table_row_hi(table)[g0 + i] = hi[i];
      at += (hi[i] - row_lo(i) + kBlockM - 1) / kBlockM;
    }
  }
  if (lane == kGroupLanes - 1) table[groups] = upto;
}

// Row block v (0 <= v < first[G]) -> its tile: the last group g with first[g] <= v, the one holding v (an empty
// group shares its first with the next group).
template <int kBlockM>
FG_DEVICE GroupTile table_row_block(int* table, int groups, int v) {
  int a = 0, b = groups - 1;
  while (a < b) {
    const int mid = (a + b + 1) / 2;
    if (table[mid] <= v)
      a = mid;
    else
      b = mid - 1;
  }
  GroupTile t;
  t.group = a;
  t.m0 = table_row_lo(table)[a] + (v - table[a]) * kBlockM;
  t.m_end = table_row_hi(table)[a];
  return t;
}

}  // namespace fg
