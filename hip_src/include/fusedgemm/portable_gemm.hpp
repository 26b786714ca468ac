// portable_gemm_tile: C[M, N] = epilogue(A[M, K] . B[N, K]^T), the one portable MMA kernel template of two ops:
//   gemm_a8       8-bit A (fp8 / int8) and a PRESHUFFLED 8-bit B
//   matmul_fused  bf16 / fp16 / tf32 A and a plain row-major B [N, K] (an nn.Linear weight)
// InTraits<In> (platform.hpp) tells them apart: kBytes (element size) and kPreshuffledB. K counts elements.
//
// Layers: this template (tiling, mainloop, masking, epilogue slot calls) is arch-neutral. What an arch
// contributes is its MmaAtom (arch/*.hpp): the lane -> (row, 16-byte K chunk) map of one 16x16 tile and the
// MMA instructions that consume a lane's chunks. Everything moves as 16-byte vectors (Vec16): a chunk holds
// 16 / kBytes elements of K, and the atoms reinterpret the bytes (A and B alike), so the template never
// looks at element types.
//
// A is plain row-major [M, K] (K * kBytes bytes a row): the lane reads vector (row m, chunk c) at
// a + m * K * kBytes + 16 * c. B, by kind:
//   preshuffled (the aiter / hipBLASLt (16,16) layout, 1-byte elements so Kp = 16):
//       off(n, k) = (n / 16) * 16K + (k / 16) * 256 + (n % 16) * 16 + (k % 16)
//     so the vector (row n, chunk c) of a 16-row block sits at block_base + c * 256 + (n % 16) * 16;
//   plain: vector (row n, chunk c) at b + n * K * kBytes + 16 * c, addressed exactly as A.
//
// Ragged tiles are masked: rows >= M load zeros and store nothing; K chunks past K * kBytes / 16 load zeros.
// Preshuffled B: 16-row blocks >= N load zeros and store nothing. Plain B: each row >= N loads zeros (a
// 16-row block may straddle N) and columns >= N are never stored or passed to the epilogue.
// Requirements (checked on the host): A / B 16-byte aligned; gemm_a8: N % 16 == 0, K % 16 == 0;
// matmul_fused: N % 8 == 0, K * kBytes % 16 == 0. The epilogue (Epi, epilogue.hpp) owns the output and its
// operands.
#pragma once
#include "arch/select.hpp"
#include "block_scales.hpp"
#include "cdna_gemm.hpp"
#include "epilogue.hpp"
#include "gemm_configs.hpp"
#include "gemm_groups.hpp"

namespace fg {

// Tile configuration: a block of kWarpsM x kWarpsN x kWarpsK warps; each warp owns kTilesM x kTilesN 16x16
// tiles. kWarpsK > 1 is split-K inside the block: warp w takes K steps w, w + kWarpsK, ... and the partial
// accumulators are summed through shared memory before the epilogue (deterministic, no atomics). That is
// how decode-size problems (few output tiles) still put enough loads in flight on every SM.
//
// kStepsInFlight: K steps whose operands a warp loads before it issues their MMAs. Memory-bound (decode)
// shapes need many 16-byte loads outstanding per SM to cover DRAM latency (Little's law).
//
// Tile: a traits struct of those named fields, generated with the config's name into gemm_configs.hpp from
// runtime/tile_configs.py.
template <class Tile>
struct PortableGemmConfig {
  static constexpr int kStepsInFlight = Tile::kStepsInFlight;
  static constexpr int kWarpsM = Tile::kWarpsM;
  static constexpr int kWarpsN = Tile::kWarpsN;
  static constexpr int kWarpsK = Tile::kWarpsK;
  static constexpr int kWarps = kWarpsM * kWarpsN * kWarpsK;
  static constexpr int kTilesM = Tile::kTilesM;
  static constexpr int kTilesN = Tile::kTilesN;
  static constexpr int kWarpTileM = 16 * kTilesM;
  static constexpr int kWarpTileN = 16 * kTilesN;
  static constexpr int kBlockM = kWarpsM * kWarpTileM;
  static constexpr int kBlockN = kWarpsN * kWarpTileN;
  static_assert(kWarps <= 16, "at most 16 warps per block");
  static_assert(kWarpsK == 1 || (kWarpsM == 1 && kWarpsN == 1),
                "split-K blocks have all warps on one output tile (so the whole block exits together)");
  static constexpr bool kBlockScaled = false;
};

// The kernel's one argument: the GEMM's operands and sizes, then the epilogue's Params. Its layout is the
// packing runtime/kernels.py derives (gemm_signature); each entry point asserts the offsets.
template <class Epi>
struct PortableGemmArgs {
  const u8* a;  // [M, K] row-major
  const u8* b;  // [N, K]: preshuffled (16,16) for the 8-bit kinds, row-major for bf16 / fp16 / tf32
  int M, N, K;
  typename Epi::Params ep;
};

// m_block: the block's first row; rows >= M are outside (a grouped GEMM passes its group's row bound).
// col_base: added to a column's index for the epilogue's column values (a grouped GEMM's g * N: its [G, N]
// operands); outputs and [M, N] operands are indexed by the column itself.
template <class In, class Epi, class Cfg>
FG_DEVICE void portable_gemm_direct_tile(const u8* __restrict__ a,  // [M, K] row-major
                                  const u8* __restrict__ b,  // [N, K] preshuffled (16,16) or row-major (kPreshuffledB)
                                  int M, int N, int K,       // K in elements of In
                                  const typename Epi::Params& ep,  // the epilogue's operands and outputs
                                  int m_block, int col_base, const BlockScaleArgs& bs = BlockScaleArgs{}) {
  using Atom = arch::MmaAtom<In>;
  constexpr bool kPreshuffledB = InTraits<In>::kPreshuffledB;
  // A run of kStoreVec columns starts at a multiple of kStoreVec: with N % 8 == 0 it is all in or all out.
  static_assert(kPreshuffledB || 8 % Atom::kStoreVec == 0, "plain B masks columns by runs of kStoreVec");
  using Frag = typename Atom::Frag;
  using Acc = typename Atom::Acc;
  constexpr int kVecsPerFrag = Atom::kRowsPerLane * Atom::kChunksPerLane;
  constexpr bool kBlockScaled = Cfg::kBlockScaled;
  static_assert(!kBlockScaled || (kPreshuffledB && InTraits<In>::kBytes == 1 && Atom::kStoreVec == 1 &&
                                  Atom::kAccPerLane == 4 && 8 % Atom::kChunksPerStep == 0),
                "block scales: 8-bit preshuffled B on the CDNA atoms (a lane's 4 accumulators share a column), "
                "steps inside one 128-byte K block");

  const int lane = static_cast<int>(threadIdx.x) % Atom::kWarpSize;
  const int warp_k = static_cast<int>(threadIdx.x) / Atom::kWarpSize / (Cfg::kWarpsM * Cfg::kWarpsN);
  const int warp = static_cast<int>(threadIdx.x) / Atom::kWarpSize % (Cfg::kWarpsM * Cfg::kWarpsN);
  const int m_warp = m_block + (warp / Cfg::kWarpsN) * Cfg::kWarpTileM;
  const int n_warp = static_cast<int>(blockIdx.x) * Cfg::kBlockN + (warp % Cfg::kWarpsN) * Cfg::kWarpTileN;
  if (m_warp >= M || n_warp >= N) return;  // no barriers in this kernel: an idle warp may leave

  const int row_bytes = K * InTraits<In>::kBytes;  // one row of A or of plain B; a multiple of 16
  const int num_chunks = row_bytes / 16;

  // Per-lane base pointers and validity, hoisted out of the K loop.
  const u8* a_ptr[Cfg::kTilesM][Atom::kRowsPerLane];
  bool a_ok[Cfg::kTilesM][Atom::kRowsPerLane];
#pragma unroll
  for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
    for (int i = 0; i < Atom::kRowsPerLane; ++i) {
      const int row = m_warp + 16 * tm + Atom::lane_row(lane, i);
      a_ok[tm][i] = row < M;
      a_ptr[tm][i] = a + static_cast<i64>(a_ok[tm][i] ? row : 0) * row_bytes;
    }
  // n_ok[tn]: the 16-column tile holds a column < N (it is computed and stored). Preshuffled B is masked by
  // whole 16-row blocks (N % 16 == 0); plain B row by row (b_row_ok), as A is.
  const u8* b_ptr[Cfg::kTilesN][Atom::kRowsPerLane];
  bool n_ok[Cfg::kTilesN];
  bool b_row_ok[Cfg::kTilesN][Atom::kRowsPerLane];
#pragma unroll
  for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
    const int n_block = n_warp / 16 + tn;
    n_ok[tn] = 16 * n_block < N;
#pragma unroll
    for (int i = 0; i < Atom::kRowsPerLane; ++i) {
      if constexpr (kPreshuffledB) {
        b_ptr[tn][i] = b + static_cast<i64>(n_ok[tn] ? n_block : 0) * 16 * K + 16 * Atom::lane_row(lane, i);
      } else {
        const int row = 16 * n_block + Atom::lane_row(lane, i);
        b_row_ok[tn][i] = row < N;
        b_ptr[tn][i] = b + static_cast<i64>(b_row_ok[tn][i] ? row : 0) * row_bytes;
      }
    }
  }

  Acc acc[Cfg::kTilesM][Cfg::kTilesN];
#pragma unroll
  for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
    for (int tn = 0; tn < Cfg::kTilesN; ++tn) Atom::zero(acc[tm][tn]);

  constexpr int kStride = Cfg::kWarpsK * Atom::kChunksPerStep;  // chunks between a warp's consecutive steps
  for (int c0 = warp_k * Atom::kChunksPerStep; c0 < num_chunks; c0 += Cfg::kStepsInFlight * kStride) {
    Frag fa[Cfg::kStepsInFlight][Cfg::kTilesM];
    Frag fb[Cfg::kStepsInFlight][Cfg::kTilesN];
#pragma unroll
    for (int s = 0; s < Cfg::kStepsInFlight; ++s) {
#pragma unroll
      for (int j = 0; j < Atom::kChunksPerLane; ++j) {
        const int chunk = c0 + s * kStride + Atom::lane_chunk(lane, j);
        const bool chunk_ok = chunk < num_chunks;
#pragma unroll
        for (int i = 0; i < Atom::kRowsPerLane; ++i) {
          const int v = i * Atom::kChunksPerLane + j;
#pragma unroll
          for (int tm = 0; tm < Cfg::kTilesM; ++tm)
            fa[s][tm].v[v] = (chunk_ok && a_ok[tm][i]) ? load_vec16(a_ptr[tm][i] + 16 * chunk) : zero_vec16();
#pragma unroll
          for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
            if constexpr (kPreshuffledB)
              fb[s][tn].v[v] = (chunk_ok && n_ok[tn]) ? load_vec16(b_ptr[tn][i] + 256 * chunk) : zero_vec16();
            else
              fb[s][tn].v[v] = (chunk_ok && b_row_ok[tn][i]) ? load_vec16(b_ptr[tn][i] + 16 * chunk) : zero_vec16();
          }
        }
      }
    }
    // Block scales of the steps just loaded: rows of the lane's accumulators, its column's 128-row block.
    constexpr int kScaleSteps = kBlockScaled ? Cfg::kStepsInFlight : 1;
    float sa[kScaleSteps][Cfg::kTilesM][4];
    float sb[kScaleSteps][Cfg::kTilesN];
    if constexpr (kBlockScaled) {
#pragma unroll
      for (int s = 0; s < Cfg::kStepsInFlight; ++s) {
        const int kb = (c0 + s * kStride) / 8;  // 8 chunks of 16 one-byte values: a 128-value K block
        const bool kb_ok = kb < bs.k_blocks;
#pragma unroll
        for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = m_warp + 16 * tm + Atom::acc_row(lane, e);
            sa[s][tm][e] = (bs.a != nullptr && kb_ok && row < M) ? bs.a[static_cast<i64>(row) * bs.k_blocks + kb] : 1.f;
          }
#pragma unroll
        for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
          const int col = n_warp + 16 * tn + Atom::acc_col(lane, 0);
          sb[s][tn] =
              (bs.b != nullptr && kb_ok && col < N) ? bs.b[scale_b_row<Epi::kPairs>(col) * bs.k_blocks + kb] : 1.f;
        }
      }
    }
#pragma unroll
    for (int s = 0; s < Cfg::kStepsInFlight; ++s)
#pragma unroll
      for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
        for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
          if constexpr (kBlockScaled) {
            Acc part;
            Atom::zero(part);
            Atom::mma(part, fa[s][tm], fb[s][tn]);
            Atom::add_scaled(acc[tm][tn], part, sa[s][tm], sb[s][tn]);
          } else {
            Atom::mma(acc[tm][tn], fa[s][tm], fb[s][tn]);
          }
        }
  }
  static_assert(kVecsPerFrag == sizeof(Frag) / sizeof(Vec16), "fragment holds rows x chunks vectors");

  // Epilogue: each run of kStoreVec accumulators (one row, adjacent columns) goes through the epilogue slot.
  auto store_tile = [&](const Acc& tile, int tm, int tn) {
    if constexpr (Epi::kPairs && Atom::kStoreVec == 1) {
      // A paired epilogue takes column pairs (gate 2j, up 2j + 1), but a lane holds one column: its partner
      // column (same rows) is in lane ^ kPairLaneXor. Every lane exchanges its values first (the shuffle needs
      // the whole wave, so before any bound check); the even column's lane stores the pairs.
      float mine[Atom::kAccPerLane], other[Atom::kAccPerLane];
#pragma unroll
      for (int e = 0; e < Atom::kAccPerLane; ++e) {
        mine[e] = Atom::get(tile, e);
        other[e] = arch::shfl_xor(mine[e], Atom::kPairLaneXor);
      }
      const int col = n_warp + 16 * tn + Atom::acc_col(lane, 0);
      if (col & 1) return;
      if constexpr (!kPreshuffledB) {
        if (col >= N) return;  // N is even: col + 1 < N too
      }
      float c[2][Epi::kColValues];
      Epi::load_col(ep, col_base + col, c[0]);
      Epi::load_col(ep, col_base + col + 1, c[1]);
#pragma unroll
      for (int e = 0; e < Atom::kAccPerLane; ++e) {
        const int row = m_warp + 16 * tm + Atom::acc_row(lane, e);
        if (row >= M) continue;
        float r[Epi::kRowValues];
        Epi::load_row(ep, row, r);
        const float v[2] = {mine[e], other[e]};
        Epi::template store<2>(ep, row, col, v, r, c);
      }
    } else {
#pragma unroll
      for (int e = 0; e < Atom::kAccPerLane; e += Atom::kStoreVec) {
        const int row = m_warp + 16 * tm + Atom::acc_row(lane, e);
        if (row >= M) continue;
        const int col = n_warp + 16 * tn + Atom::acc_col(lane, e);
        if constexpr (!kPreshuffledB) {
          if (col >= N) continue;  // a tile straddling N (N % 16 == 8)
        }
        float r[Epi::kRowValues];
        Epi::load_row(ep, row, r);
        float c[Atom::kStoreVec][Epi::kColValues];
        float v[Atom::kStoreVec];
#pragma unroll
        for (int s = 0; s < Atom::kStoreVec; ++s) {
          Epi::load_col(ep, col_base + col + s, c[s]);
          v[s] = Atom::get(tile, e + s);
        }
        Epi::template store<Atom::kStoreVec>(ep, row, col, v, r, c);
      }
    }
  };

  if constexpr (Cfg::kWarpsK == 1) {
#pragma unroll
    for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
      for (int tn = 0; tn < Cfg::kTilesN; ++tn)
        if (n_ok[tn]) store_tile(acc[tm][tn], tm, tn);
  } else {
    // Split-K: every warp parks its partial tiles in shared memory; tile t is then summed and stored by
    // warp t % kWarpsK (same lane layout in every warp, so lane l sums slot l of each warp).
    __shared__ Acc partial[Cfg::kWarpsK][Cfg::kTilesM][Cfg::kTilesN][Atom::kWarpSize];
#pragma unroll
    for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
      for (int tn = 0; tn < Cfg::kTilesN; ++tn) partial[warp_k][tm][tn][lane] = acc[tm][tn];
    __syncthreads();
#pragma unroll
    for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
      for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
        if ((tm * Cfg::kTilesN + tn) % Cfg::kWarpsK != warp_k || !n_ok[tn]) continue;
        Acc sum = partial[0][tm][tn][lane];
#pragma unroll
        for (int w = 1; w < Cfg::kWarpsK; ++w) Atom::add(sum, partial[w][tm][tn][lane]);
        store_tile(sum, tm, tn);
      }
  }
}

// The entry of every kernel of this family (the ahead-of-time units and the generated ones call it): a
// CdnaLdsGemmConfig runs the LDS-staged, pipelined CDNA template (cdna_gemm.hpp, gfx942 / gfx950 only), every
// other config the register-direct one above.
template <class In, class Epi, class Cfg>
FG_DEVICE void portable_gemm_block(const u8* __restrict__ a, const u8* __restrict__ b, int M, int N, int K,
                                   const typename Epi::Params& ep, int m_block, int col_base) {
#if defined(__gfx942__) || defined(__gfx950__)
  if constexpr (IsCdnaLdsGemmConfig<Cfg>::value) {
    cdna_gemm_tile<In, Epi, Cfg>(a, b, M, N, K, ep, m_block, static_cast<int>(blockIdx.x) * Cfg::kBlockN, col_base);
  } else
#endif
  {
    portable_gemm_direct_tile<In, Epi, Cfg>(a, b, M, N, K, ep, m_block, col_base);
  }
}

template <class In, class Epi, class Cfg>
FG_DEVICE void portable_gemm_tile(const u8* __restrict__ a, const u8* __restrict__ b, int M, int N, int K,
                                  const typename Epi::Params& ep) {
#if defined(__gfx942__) || defined(__gfx950__)
  if constexpr (IsCdnaLdsGemmConfig<Cfg>::value) {
    int m_block, n_block;
    cdna_workgroup_tile<Cfg>(M, N, m_block, n_block);
    cdna_gemm_tile<In, Epi, Cfg>(a, b, M, N, K, ep, m_block, n_block, 0);
  } else
#endif
  {
    portable_gemm_block<In, Epi, Cfg>(a, b, M, N, K, ep, static_cast<int>(blockIdx.y) * Cfg::kBlockM, 0);
  }
}

// A grouped GEMM's block (gemm_groups.hpp): grid y counts virtual row blocks; B is the G groups' [N, K] weights
// stacked (group g's at g * N rows: N * K elements further), its column operands [G, N].
template <class In, class Epi, class Cfg>
FG_DEVICE void portable_gemm_grouped_tile(const u8* __restrict__ a, const u8* __restrict__ b, int M, int N, int K,
                                          const typename Epi::Params& ep, const GroupArgs& ga) {
  GroupTile t;
  if (!group_row_block<Cfg::kBlockM>(ga, M, static_cast<int>(blockIdx.y), t)) return;  // uniform: before any barrier
  const u8* b_group = b + static_cast<i64>(t.group) * N * K * InTraits<In>::kBytes;
  portable_gemm_block<In, Epi, Cfg>(a, b_group, t.m_end, N, K, ep, t.m0, t.group * N);
}

// The kernel body of a block-scaled fp8 entry point (generated units only) on AMD: PortableBlockScaled<Config> of a
// register-direct or an LDS-pipelined CDNA config (block_scales.hpp).
template <class In, class Epi, class Cfg>
FG_DEVICE void portable_gemm_block_scaled(const u8* __restrict__ a, const u8* __restrict__ b, int M, int N, int K,
                                          const typename Epi::Params& ep, const BlockScaleArgs& bs) {
  static_assert(Cfg::kBlockScaled, "PortableBlockScaled<a portable or CDNA config>");
#if defined(__gfx942__) || defined(__gfx950__)
  if constexpr (IsCdnaLdsGemmConfig<Cfg>::value) {
    int m_block, n_block;
    cdna_workgroup_tile<Cfg>(M, N, m_block, n_block);
    cdna_gemm_tile<In, Epi, Cfg>(a, b, M, N, K, ep, m_block, n_block, 0, bs);
  } else
#endif
  {
    portable_gemm_direct_tile<In, Epi, Cfg>(a, b, M, N, K, ep, static_cast<int>(blockIdx.y) * Cfg::kBlockM, 0, bs);
  }
}

// The argument of a block-scaled entry point: PortableGemmArgs's fields, then the block scales.
template <class Epi>
struct PortableGemmBlockArgs {
  const u8* a;
  const u8* b;
  int M, N, K;
  typename Epi::Params ep;
  BlockScaleArgs bs;
};

// A grouped GEMM's block with block-scaled fp8 (AMD): scale_a [M, k_blocks] by the rows' own index, scale_b the G
// groups' [ceil(N / 128), k_blocks] tables stacked, group g's g * ceil(N / 128) rows on.
template <class In, class Epi, class Cfg>
FG_DEVICE void portable_gemm_grouped_block_scaled(const u8* __restrict__ a, const u8* __restrict__ b, int M, int N,
                                                  int K, const typename Epi::Params& ep, const BlockScaleArgs& bs,
                                                  const GroupArgs& ga) {
  static_assert(Cfg::kBlockScaled, "PortableBlockScaled<a portable or CDNA config>");
  GroupTile t;
  if (!group_row_block<Cfg::kBlockM>(ga, M, static_cast<int>(blockIdx.y), t)) return;  // uniform: before any barrier
  const u8* b_group = b + static_cast<i64>(t.group) * N * K;
  const BlockScaleArgs bs_group = group_block_scales(bs, t.group, N);
#if defined(__gfx942__) || defined(__gfx950__)
  if constexpr (IsCdnaLdsGemmConfig<Cfg>::value) {
    const int n_block = static_cast<int>(blockIdx.x) * Cfg::kBlockN;
    cdna_gemm_tile<In, Epi, Cfg, true>(a, b_group, t.m_end, N, K, ep, t.m0, n_block, t.group * N, bs_group);
  } else
#endif
  {
    portable_gemm_direct_tile<In, Epi, Cfg>(a, b_group, t.m_end, N, K, ep, t.m0, t.group * N, bs_group);
  }
}

// The argument of a grouped block-scaled entry point: PortableGemmArgs's fields, the block scales, the groups.
template <class Epi>
struct PortableGemmGroupedBlockArgs {
  const u8* a;
  const u8* b;
  int M, N, K;
  typename Epi::Params ep;
  BlockScaleArgs bs;
  GroupArgs groups;
};

// The argument of a grouped entry point (generated units only): PortableGemmArgs's fields, then the groups.
template <class Epi>
struct PortableGemmGroupedArgs {
  const u8* a;
  const u8* b;
  int M, N, K;
  typename Epi::Params ep;
  GroupArgs groups;
};

}  // namespace fg
