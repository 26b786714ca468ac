// CDNA4 (gfx950, MI350X/MI355X) MFMA atoms. fp8 here is OCP e4m3fn.
//
// fp8: v_mfma_f32_16x16x128_f8f6f4 takes 32 bytes of K per lane; lane l loads chunks 2*(l/16) and
//      2*(l/16)+1 of row l % 16 in a 128-byte step (format code 0 = e4m3 for both operands).
// int8: v_mfma_i32_16x16x64_i8 takes 16 bytes per lane: exactly one preshuffled vector, chunk l / 16.
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

template <>
struct MmaAtom<Int8> : CdnaAtomBase, CdnaAccI32 {
  static constexpr int kChunksPerStep = 4;
  static constexpr int kChunksPerLane = 1;
  struct Frag {
    Vec16 v[1];
  };
  FG_DEVICE static int lane_chunk(int lane, int /*j*/) { return lane >> 4; }
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
    acc.c = __builtin_amdgcn_mfma_i32_16x16x64_i8(__builtin_bit_cast(i32x4, a), __builtin_bit_cast(i32x4, b),
                                                  acc.c, 0, 0, 0);
  }
};

}  // namespace arch
}  // namespace fg
