// CDNA4 (gfx950, MI350X/MI355X) MFMA atoms of portable_gemm_tile (portable_gemm.hpp): gemm_a8's fp8 / int8 and
// matmul_fused's bf16 / fp16 / tf32. fp8 here is OCP e4m3fn.
//
// fp8:  v_mfma_f32_16x16x128_f8f6f4 takes 32 bytes of K per lane; lane l loads chunks 2*(l/16) and
//       2*(l/16)+1 of row l % 16 in a 128-byte step (format code 0 = e4m3 for both operands).
// The rest take one 16-byte chunk per lane, chunk l / 16 of the 4 in a 64-byte step:
//   int8  v_mfma_i32_16x16x64_i8   16 x int8: one MFMA per chunk
//   bf16  v_mfma_f32_16x16x32_bf16  8 x bf16: one MFMA per chunk
//   fp16  v_mfma_f32_16x16x32_f16   8 x fp16: one MFMA per chunk
//   tf32  v_mfma_f32_16x16x4_f32    1 x fp32: four MFMAs per chunk, one 4-byte word each. gfx950 has no
//         xf32 MFMA (CDNA4 dropped it), so Tf32 runs EXACT fp32 products here: more accurate than TF32 and
//         slower (the fp32 MFMA rate, not a reduced-precision one).
#pragma once
#include "cdna_common.hpp"

namespace fg {
namespace arch {

template <class In>
struct MmaAtom;

template <>
struct MmaAtom<Fp8E4M3> : CdnaAtomBase, CdnaAccF32 {
  static constexpr int kChunksPerStep = 8;
  static constexpr int kChunksPerLane = 2;
  struct Frag {
    Vec16 v[2];
  };
  FG_DEVICE static int lane_chunk(int lane, int j) { return 2 * (lane >> 4) + j; }
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
    constexpr int kFmtE4M3 = 0;
    acc.c = __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(
        __builtin_bit_cast(i32x8, a), __builtin_bit_cast(i32x8, b), acc.c, kFmtE4M3, kFmtE4M3,
        /*opsel_a=*/0, /*scale_a=*/0, /*opsel_b=*/0, /*scale_b=*/0);
  }
};

// One 16-byte chunk per lane: chunk l / 16 of the 4 in a step.
struct Gfx950ChunkAtomBase : CdnaAtomBase {
  static constexpr int kChunksPerStep = 4;
  static constexpr int kChunksPerLane = 1;
  struct Frag {
    Vec16 v[1];
  };
  FG_DEVICE static int lane_chunk(int lane, int /*j*/) { return lane >> 4; }
};

template <>
struct MmaAtom<Int8> : Gfx950ChunkAtomBase, CdnaAccI32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
    acc.c = __builtin_amdgcn_mfma_i32_16x16x64_i8(__builtin_bit_cast(i32x4, a), __builtin_bit_cast(i32x4, b),
                                                  acc.c, 0, 0, 0);
  }
};

template <>
struct MmaAtom<Bf16> : Gfx950ChunkAtomBase, CdnaAccF32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
    acc.c = __builtin_amdgcn_mfma_f32_16x16x32_bf16(__builtin_bit_cast(bf16x8, a), __builtin_bit_cast(bf16x8, b),
                                                    acc.c, 0, 0, 0);
  }
};

template <>
struct MmaAtom<Fp16> : Gfx950ChunkAtomBase, CdnaAccF32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
    acc.c = __builtin_amdgcn_mfma_f32_16x16x32_f16(__builtin_bit_cast(f16x8, a), __builtin_bit_cast(f16x8, b),
                                                   acc.c, 0, 0, 0);
  }
};

// Tf32 on gfx950 is exact fp32 (no xf32 here): word q of the lane's chunk is the operand of MFMA q.
template <>
struct MmaAtom<Tf32> : Gfx950ChunkAtomBase, CdnaAccF32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      acc.c = __builtin_amdgcn_mfma_f32_16x16x4f32(bits_to_float(a.v[0].w[q]), bits_to_float(b.v[0].w[q]), acc.c,
                                                   0, 0, 0);
  }
};

}  // namespace arch
}  // namespace fg
