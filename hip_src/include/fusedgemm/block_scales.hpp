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

}  // namespace fg
