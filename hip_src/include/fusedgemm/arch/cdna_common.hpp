// AMD CDNA3 / CDNA4 (gfx942, gfx950): numeric helpers and the MFMA 16x16 layout shared by the MmaAtoms of
// portable_gemm_tile (portable_gemm.hpp), the one portable kernel template of gemm_a8 (fp8 / int8) and matmul_fused
// (bf16 / fp16 / tf32).
//
// MFMA 16x16 layouts (wave64): operand lane l holds row l % 16 of A (column l % 16 of B) and a run of K
// values chosen by l / 16; the result lane l holds column l % 16, rows 4 * (l / 16) + 0..3. The A and B
// operand layouts are mirror images, so loading both with the same lane -> (row, K chunk) map gives the
// right dot products whatever order of k the hardware assigns inside a register: register slot s of lane l
// meets slot s of lane l's B. The atoms only reinterpret whole elements (1, 2 or 4 bytes) in place, so every
// A element meets the B element of the same k.
#pragma once
#include "../platform.hpp"

namespace fg {
namespace arch {

typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef int i32x4 __attribute__((ext_vector_type(4)));
typedef int i32x8 __attribute__((ext_vector_type(8)));
typedef short i16x4 __attribute__((ext_vector_type(4)));  // bf16 bits (the gfx942 bf16 MFMA's operand type)
typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 f16x8 __attribute__((ext_vector_type(8)));
typedef __bf16 bf16x8 __attribute__((ext_vector_type(8)));
typedef float f32x2 __attribute__((ext_vector_type(2)));

FG_DEVICE float fast_exp2(float x) { return __builtin_amdgcn_exp2f(x); }
// 1 ulp reciprocal (v_rcp_f32): the epilogue's divisions, whose result is rounded to bf16/fp16 anyway.
FG_DEVICE float fast_rcp(float x) { return __builtin_amdgcn_rcpf(x); }

FG_DEVICE float sqrt_f32(float x) { return __builtin_amdgcn_sqrtf(x); }
FG_DEVICE float rsqrt_f32(float x) { return __builtin_amdgcn_rsqf(x); }

// The read-only path is the plain one here (the loads are scalar and hoisted out of the store loops).
FG_DEVICE u32 load_ro_u32(const void* p) { return *static_cast<const u32*>(p); }
FG_DEVICE u16 load_ro_u16(const void* p) { return *static_cast<const u16*>(p); }

FG_DEVICE float half_bits_to_float(u16 h) { return static_cast<float>(__builtin_bit_cast(_Float16, h)); }
FG_DEVICE u16 float_to_half_bits(float f) { return __builtin_bit_cast(u16, static_cast<_Float16>(f)); }

FG_DEVICE u16 float_to_bf16_bits(float f) { return float_to_bf16_bits_rne(f); }

FG_DEVICE long vec_half_as_long(const Vec16& v, int half) {
  return __builtin_bit_cast(long, (unsigned long long)v.w[2 * half] |
                                      ((unsigned long long)v.w[2 * half + 1] << 32));
}

// Bytes 8 * half .. 8 * half + 7 of a vector as an 8-byte MFMA operand (i16x4, f16x4, f32x2).
template <class T>
FG_DEVICE T vec_half_as(const Vec16& v, int half) {
  static_assert(sizeof(T) == 8, "an 8-byte operand");
  return __builtin_bit_cast(T, vec_half_as_long(v, half));
}

// v from lane ^ mask of the wave (ds_bpermute, what HIP's __shfl_xor is; the HIP headers may be absent here).
// Every lane of the wave must call it.
FG_DEVICE float shfl_xor(float v, int mask) {
  const int lane = static_cast<int>(__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)));
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, __builtin_bit_cast(int, v)));
}

// v from lane - d of the wave (lanes below d: their own); every lane of the wave must call it.
FG_DEVICE int shfl_up(int v, int d) {
  const int lane = static_cast<int>(__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)));
  return __builtin_amdgcn_ds_bpermute((lane >= d ? lane - d : lane) << 2, v);
}

struct CdnaAtomBase {
  static constexpr int kWarpSize = 64;
  static constexpr int kRowsPerLane = 1;
  static constexpr int kAccPerLane = 4;
  static constexpr int kStoreVec = 1;  // a lane's accumulators are one column, four rows
  // The lane holding column acc_col + 1 with the same rows is lane ^ kPairLaneXor (for an even column): how a
  // paired epilogue (Epi::kPairs) finds the up of its gate. tests/test_fragment_model.py checks it per atom.
  static constexpr int kPairLaneXor = 1;
  FG_DEVICE static int lane_row(int lane, int /*i*/) { return lane & 15; }
  FG_DEVICE static int acc_row(int lane, int e) { return 4 * (lane >> 4) + e; }
  FG_DEVICE static int acc_col(int lane, int /*e*/) { return lane & 15; }
};

struct CdnaAccF32 {
  struct Acc {
    f32x4 c;
  };
  FG_DEVICE static void zero(Acc& acc) { acc.c = f32x4{0.f, 0.f, 0.f, 0.f}; }
  FG_DEVICE static float get(const Acc& acc, int e) { return acc.c[e]; }
  FG_DEVICE static void add(Acc& acc, const Acc& other) { acc.c += other.c; }
  // acc += part * row_scale[e] * col_scale, element e being the lane's row e (block-scaled fp8, portable_gemm.hpp)
  FG_DEVICE static void add_scaled(Acc& acc, const Acc& part, const float (&row_scale)[4], float col_scale) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc.c[e] += part.c[e] * (row_scale[e] * col_scale);
  }
  // scale[e]: row e's product of both sides' scales.
  FG_DEVICE static void add_scaled(Acc& acc, const Acc& part, const float (&scale)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc.c[e] = __builtin_fmaf(part.c[e], scale[e], acc.c[e]);
  }
};

struct CdnaAccI32 {
  struct Acc {
    i32x4 c;
  };
  FG_DEVICE static void zero(Acc& acc) { acc.c = i32x4{0, 0, 0, 0}; }
  FG_DEVICE static float get(const Acc& acc, int e) { return static_cast<float>(acc.c[e]); }
  FG_DEVICE static void add(Acc& acc, const Acc& other) { acc.c += other.c; }  // int32: exact
};

}  // namespace arch
}  // namespace fg
