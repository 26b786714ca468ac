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

}  // namespace fg
