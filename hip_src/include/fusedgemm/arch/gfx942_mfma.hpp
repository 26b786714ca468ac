// CDNA3 (gfx942, MI300X/MI325X) MFMA atoms. fp8 here is e4m3fnuz (the gfx942 hardware format).
//
// v_mfma_f32_16x16x32_fp8_fp8 / v_mfma_i32_16x16x32_i8: each lane supplies 8 bytes of K. Lane l loads one
// 16-byte chunk (chunk l / 16 of the 4 in a 64-byte step) of row l % 16 and feeds it as two MFMAs, low
// half then high half: one preshuffled 16-byte vector is two operand packs.
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

}  // namespace arch
}  // namespace fg
