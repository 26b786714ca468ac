// CDNA3 (gfx942, MI300X/MI325X) MFMA atoms of portable_gemm_tile (portable_gemm.hpp): gemm_a8's fp8 / int8 and
// matmul_fused's bf16 / fp16 / tf32. fp8 here is e4m3fnuz (the gfx942 hardware format).
//
// Every atom here takes 8 bytes of K per lane per MFMA: lane l loads one 16-byte chunk (chunk l / 16 of the
// 4 in a 64-byte step) of row l % 16 and feeds it as two MFMAs, low half then high half:
//   fp8   v_mfma_f32_16x16x32_fp8_fp8   8 x e4m3fnuz per lane
//   int8  v_mfma_i32_16x16x32_i8        8 x int8
//   bf16  v_mfma_f32_16x16x16_bf16      4 x bf16 (the "_1k" bf16 instruction)
//   fp16  v_mfma_f32_16x16x16_f16       4 x fp16
//   tf32  v_mfma_f32_16x16x8_xf32       2 x fp32, read as xf32 (TF32: 10 mantissa bits), fp32 accumulate
#pragma once
#include "cdna_common.hpp"

namespace fg {
namespace arch {

struct Gfx942AtomBase : CdnaAtomBase {
  static constexpr int kChunksPerStep = 4;
  static constexpr int kChunksPerLane = 1;
  struct Frag {
    Vec16 v[1];
  };
  FG_DEVICE static int lane_chunk(int lane, int /*j*/) { return lane >> 4; }
};

template <class In>
struct MmaAtom;

template <>
struct MmaAtom<Fp8E4M3> : Gfx942AtomBase, CdnaAccF32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      acc.c = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(vec_half_as_long(a.v[0], half),
                                                         vec_half_as_long(b.v[0], half), acc.c, 0, 0, 0);
  }
};

template <>
struct MmaAtom<Int8> : Gfx942AtomBase, CdnaAccI32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      acc.c = __builtin_amdgcn_mfma_i32_16x16x32_i8(vec_half_as_long(a.v[0], half),
                                                    vec_half_as_long(b.v[0], half), acc.c, 0, 0, 0);
  }
};

template <>
struct MmaAtom<Bf16> : Gfx942AtomBase, CdnaAccF32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      acc.c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(vec_half_as<i16x4>(a.v[0], half),
                                                        vec_half_as<i16x4>(b.v[0], half), acc.c, 0, 0, 0);
  }
};

template <>
struct MmaAtom<Fp16> : Gfx942AtomBase, CdnaAccF32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      acc.c = __builtin_amdgcn_mfma_f32_16x16x16f16(vec_half_as<f16x4>(a.v[0], half),
                                                    vec_half_as<f16x4>(b.v[0], half), acc.c, 0, 0, 0);
  }
};

// Tf32 is the hardware's xf32 here: fp32 operands with their mantissas cut to TF32 inside the MFMA.
template <>
struct MmaAtom<Tf32> : Gfx942AtomBase, CdnaAccF32 {
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      acc.c = __builtin_amdgcn_mfma_f32_16x16x8_xf32(vec_half_as<f32x2>(a.v[0], half),
                                                     vec_half_as<f32x2>(b.v[0], half), acc.c, 0, 0, 0);
  }
};

}  // namespace arch
}  // namespace fg
