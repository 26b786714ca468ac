// The block scales of a block-scaled fp8 GEMM call (gemm_a8's DeepSeek-style scales; pkg/fusedgemm/blockscale.py):
// the kernel argument's last field (Sm90GemmBlockArgs, PortableGemmBlockArgs; runtime/kernels.py packs bs_a, bs_b,
// bs_k_blocks). y[m, n] = epilogue(sum_kb sa[m, kb] * sb[n / 128, kb] * (A[m, K block kb] . B[n, K block kb])).
#pragma once
#include "platform.hpp"

namespace fg {

struct BlockScaleArgs {
  const float* a;  // [M, k_blocks] or null (a scale of 1: that side's scale, if any, is the epilogue's)
  const float* b;  // [ceil(N / 128), k_blocks] or null
  int k_blocks;    // the row stride of both (ceil(K / 128))
};

// Block-scaled fp8 on AMD's templates (portable_gemm.hpp's register-direct one, cdna_gemm.hpp's LDS-pipelined one):
// the config with kBlockScaled set. The register-direct template adds each MFMA step's partial tile into the
// accumulators times sa[row, kb] * sb[col / 128, kb] (a step's K chunks lie in one 128-value K block); the CDNA one
// each K block's (one K block is one scale block), the scales loaded before the block's MFMAs.
template <class Cfg>
struct PortableBlockScaled : Cfg {
  static constexpr bool kBlockScaled = true;
};

// The row of scale_b's table that GEMM column `col` reads: its 128-row block, or, for a gate / up pair's
// interleaved weight (a paired epilogue: gate j is column 2j, up j column 2j + 1), the pair-ordered table's: rows
// 2q and 2q + 1 hold the gate's and the up's 128-row block q, so column col reads 2 (col / 256) + (col & 1) (the
// table of a checkpoint's gate and up blocks, interleaved by row; N a multiple of 256, as the host checks).
template <bool kPairs>
FG_DEVICE int scale_b_row(int col) {
  return kPairs ? ((col >> 8) << 1) | (col & 1) : col / 128;
}

// Group g's block scales in a grouped GEMM (gemm_groups.hpp): scale_a is by the rows' own index, scale_b the g-th of
// the G groups' tables, [G, ceil(N / 128), k_blocks].
FG_DEVICE BlockScaleArgs group_block_scales(const BlockScaleArgs& bs, int g, int N) {
  BlockScaleArgs own = bs;
  if (bs.b != nullptr) own.b = bs.b + static_cast<i64>(g) * ((N + 127) / 128) * bs.k_blocks;
  return own;
}

}  // namespace fg
