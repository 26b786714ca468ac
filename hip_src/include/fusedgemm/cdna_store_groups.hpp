// cdna_store_groups: the group-quantised output (out_group) of the CDNA LDS-staged template (cdna_gemm.hpp): each
// row's |y| reduced over the 16 lanes of a tile row, the wave's tiles, then the waves through LDS, one more barrier.
#pragma once
#include "arch/select.hpp"
#include "epilogue.hpp"
#include "out_groups.hpp"

namespace fg {

#if defined(__gfx942__) || defined(__gfx950__)

// out_group: the epilogue values y of the block's rows, quantised per row over the block's outputs (one group:
// out_groups.hpp; kBlockN GEMM columns, or kBlockN / 2 outputs of gate / up pairs). red: kWarpsN x kBlockM words of
// LDS. Every lane of the block calls it (shuffles and a barrier inside); rows >= M and columns >= N take no part in a
// group's absmax and are not written. A pair's gate (even column) and up (odd, lane ^ kPairLaneXor) meet in the even
// lane, which owns the output; odd lanes hold zeros.
template <class Atom, class Epi, class Cfg, class AccT>
FG_DEVICE void cdna_store_groups(const AccT (&acc)[Cfg::kTilesM][Cfg::kTilesN], const typename Epi::Params& ep,
                                 int M, int N, int m_block, int n_block, int m_warp, int n_warp, int warp_n,
                                 int lane, int col_base, u32* red) {
  constexpr int kPerOut = Epi::kPairs ? 2 : 1;  // GEMM columns per output
  static_assert(OutGroupOf<Epi>::value * kPerOut == Cfg::kBlockN, "out_group: one group is the block's columns");
  static_assert(!Epi::kSaves, "out_group: no saved output");
  static_assert(!Epi::kPairs || Atom::kStoreVec == 1, "pairs: one column per lane");
  using Q = typename QuantCodesOf<typename Epi::Output>::type;
  int col[Cfg::kTilesN];
  bool owner[Cfg::kTilesN];  // the lane computes an output of this tile: column < N (and, for pairs, even)
  float c[Cfg::kTilesN][kPerOut][Epi::kColValues];
#pragma unroll
  for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
    col[tn] = n_warp + 16 * tn + Atom::acc_col(lane, 0);
    owner[tn] = col[tn] < N && (kPerOut == 1 || (col[tn] & 1) == 0);
#pragma unroll
    for (int h = 0; h < kPerOut; ++h) {
      if (owner[tn]) {
        Epi::load_col(ep, col_base + col[tn] + h, c[tn][h]);
      } else {
#pragma unroll
        for (int i = 0; i < Epi::kColValues; ++i) c[tn][h][i] = 0.f;
      }
    }
  }
  float y[Cfg::kTilesM][Atom::kAccPerLane][Cfg::kTilesN];
#pragma unroll
  for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
    for (int e = 0; e < Atom::kAccPerLane; ++e) {
      const int row = m_warp + 16 * tm + Atom::acc_row(lane, e);
      float r[Epi::kRowValues];
      if (row < M) {
        Epi::load_row(ep, row, r);
      } else {
#pragma unroll
        for (int i = 0; i < Epi::kRowValues; ++i) r[i] = 0.f;
      }
      u32 key = 0;  // |y| as ordered bits (quant::abs_bits): NaN above +inf
#pragma unroll
      for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
        const float v = Atom::get(acc[tm][tn], e);
        float saved;  // (a row >= M or a column >= N is never evaluated: its aux operands are out of bounds)
        const bool in = row < M && owner[tn];
        if constexpr (Epi::kPairs) {
          const float up = arch::shfl_xor(v, Atom::kPairLaneXor);  // every lane takes part
          y[tm][e][tn] = in ? Epi::value(ep, v, up, r, c[tn][0], c[tn][1], row, col[tn] / 2, saved) : 0.f;
        } else {
          y[tm][e][tn] = in ? Epi::value(ep, v, r, c[tn][0], row, col[tn], saved) : 0.f;
        }
        if (in) key = quant::max_u32(key, quant::abs_bits(y[tm][e][tn]));
      }
      key = lanes_max<16>(key);  // the 16 lanes holding this row's columns of the tile
      if ((lane & 15) == 0) red[warp_n * Cfg::kBlockM + (row - m_block)] = key;
    }
  __syncthreads();
#pragma unroll
  for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
    for (int e = 0; e < Atom::kAccPerLane; ++e) {
      const int row = m_warp + 16 * tm + Atom::acc_row(lane, e);
      u32 key = 0;
#pragma unroll
      for (int w = 0; w < Cfg::kWarpsN; ++w) key = quant::max_u32(key, red[w * Cfg::kBlockM + (row - m_block)]);
      if (row >= M) continue;
      const float s = quant::row_scale<Q>(bits_to_float(key));
      const float inv = 1.f / s;  // IEEE division, as quantize_rows
#pragma unroll
      for (int tn = 0; tn < Cfg::kTilesN; ++tn)
        if (owner[tn]) Epi::store_code(ep, row, col[tn] / kPerOut, y[tm][e][tn], inv);
      if (warp_n == 0 && (lane & 15) == 0) Epi::store_scale(ep, row, n_block / Cfg::kBlockN, s);
    }
}

#endif  // gfx942 || gfx950

}  // namespace fg
