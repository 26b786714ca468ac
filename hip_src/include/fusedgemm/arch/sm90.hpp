// NVIDIA Hopper (sm_90a): numeric helpers and the warp-level 8-bit MMA atom.
//
// Atom: one warp computes a 16x16 fp32 (int32 for int8) tile from a 16-row x 64-byte slab of A and of the
// preshuffled B. Each thread owns two 16-byte vectors of each operand: rows g and g+8 (g = lane / 4) of
// the 16-row block, K chunk t = lane % 4. This matches mma.sync m16n8k32's fragments once the k order is
// permuted identically for A and B (a dot product does not care about the order of k):
//   logical k  t*4 + i      (regs a0/a1, b0)  <-  bytes 8*h + i      of chunk t   (h = which half, 0 or 1)
//   logical k  16 + t*4 + i (regs a2/a3, b1)  <-  bytes 8*h + 4 + i  of chunk t
// so one 16-byte load of the preshuffled layout is exactly two MMA operand packs.
// NOTE: sm_90 executes fp8 mma.sync as f16 HMMA (e4m3 converts to f16 exactly), accumulating in fp32.
#pragma once
#include "../platform.hpp"

namespace fg {
namespace arch {

FG_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1 ulp reciprocal (MUFU.RCP): the epilogue's divisions, whose result is rounded to bf16/fp16 anyway.
FG_DEVICE float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

FG_DEVICE float sqrt_f32(float x) {
  float y;
  asm("sqrt.rn.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

FG_DEVICE float rsqrt_f32(float x) {
  float y;
  asm("rsqrt.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Loads through the read-only (non-coherent) data path: for data no thread writes during the kernel.
// NOTE: __ldg, not inline asm: the compiler may speculate a non-volatile asm "load" past the branch that guards
// it (a null optional operand: an illegal address).
FG_DEVICE u32 load_ro_u32(const void* p) { return __ldg(static_cast<const unsigned int*>(p)); }
FG_DEVICE u16 load_ro_u16(const void* p) { return __ldg(static_cast<const unsigned short*>(p)); }

FG_DEVICE float half_bits_to_float(u16 h) {
  float f;
  asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
  return f;
}

FG_DEVICE u16 float_to_half_bits(float f) {
  u16 h;
  asm("{ .reg .f16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
  return h;
}

FG_DEVICE u16 float_to_bf16_bits(float f) {
  u16 h;
  asm("{ .reg .b16 t; cvt.rn.bf16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
  return h;
}

// v from lane ^ mask of the warp; every lane of the warp must call it (full mask).
FG_DEVICE float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
// v from lane - d of the warp (lanes below d: their own); every lane of the warp must call it.
FG_DEVICE int shfl_up(int v, int d) { return __shfl_up_sync(0xffffffffu, v, d); }

template <class In>
struct MmaAtom;

template <class In>
struct Sm90MmaAtomBase {
  static constexpr int kWarpSize = 32;
  static constexpr int kChunksPerStep = 4;  // 16-byte K chunks per step: 64 values of K
  static constexpr int kRowsPerLane = 2;
  static constexpr int kChunksPerLane = 1;
  static constexpr int kAccPerLane = 8;
  static constexpr int kStoreVec = 2;  // accumulator pairs (e, e+1) are adjacent columns of one row

  struct Frag {
    Vec16 v[kRowsPerLane * kChunksPerLane];
  };

  FG_DEVICE static int lane_row(int lane, int i) { return (lane >> 2) + 8 * i; }
  FG_DEVICE static int lane_chunk(int lane, int /*j*/) { return lane & 3; }

  // Accumulator element e: n-half h = e / 4; r = e % 4 -> row g + 8 * (r / 2), col 8h + 2t + r % 2.
  FG_DEVICE static int acc_row(int lane, int e) { return (lane >> 2) + 8 * ((e >> 1) & 1); }
  FG_DEVICE static int acc_col(int lane, int e) { return 8 * (e >> 2) + 2 * (lane & 3) + (e & 1); }
};

template <>
struct MmaAtom<Fp8E4M3> : Sm90MmaAtomBase<Fp8E4M3> {
  struct Acc {
    float c[8];
  };
  FG_DEVICE static void zero(Acc& acc) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc.c[e] = 0.f;
  }
  FG_DEVICE static float get(const Acc& acc, int e) { return acc.c[e]; }
  FG_DEVICE static void add(Acc& acc, const Acc& other) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc.c[e] += other.c[e];
  }
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int kh = 0; kh < 2; ++kh) {
        float* c = acc.c + 4 * h;
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a.v[0].w[2 * kh]), "r"(a.v[1].w[2 * kh]), "r"(a.v[0].w[2 * kh + 1]),
              "r"(a.v[1].w[2 * kh + 1]), "r"(b.v[h].w[2 * kh]), "r"(b.v[h].w[2 * kh + 1]));
      }
    }
  }
};

template <>
struct MmaAtom<Int8> : Sm90MmaAtomBase<Int8> {
  struct Acc {
    int c[8];
  };
  FG_DEVICE static void zero(Acc& acc) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc.c[e] = 0;
  }
  FG_DEVICE static float get(const Acc& acc, int e) { return static_cast<float>(acc.c[e]); }
  FG_DEVICE static void add(Acc& acc, const Acc& other) {  // int32: exact, converted once in get()
#pragma unroll
    for (int e = 0; e < 8; ++e) acc.c[e] += other.c[e];
  }
  FG_DEVICE static void mma(Acc& acc, const Frag& a, const Frag& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int kh = 0; kh < 2; ++kh) {
        int* c = acc.c + 4 * h;
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a.v[0].w[2 * kh]), "r"(a.v[1].w[2 * kh]), "r"(a.v[0].w[2 * kh + 1]),
              "r"(a.v[1].w[2 * kh + 1]), "r"(b.v[h].w[2 * kh]), "r"(b.v[h].w[2 * kh + 1]));
      }
    }
  }
};

}  // namespace arch
}  // namespace fg
