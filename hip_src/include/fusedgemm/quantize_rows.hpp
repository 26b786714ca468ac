// quantize_rows: dynamic per-row (per-token) 8-bit quantization of x [M, K] in one kernel.
//
//   absmax[m] = max_k |x[m, k]|                          (NaN-propagating: a NaN anywhere makes it NaN)
//   scale[m]  = fl32(absmax[m] / kMax)                   kMax: 448 e4m3fn, 240 e4m3fnuz, 127 int8
//               1 for an all-zero row, at least 2^-126 otherwise (so 1 / scale stays finite)
//   q[m, k]   = round(fl32(x[m, k] * fl32(1 / scale[m])))   to nearest even, saturating at +-kMax
//
// One fp32 reciprocal per row and a multiply per element, not a division per element: an IEEE division is a
// ~10-instruction sequence (NVIDIA) that would make this memory-bound loop issue-bound at 2-byte inputs. The
// oracle (pkg/fusedgemm/reference.py, quantize_rows_reference) replays exactly these fp32 operations, so the
// codes match it bit for bit, ties included. The product is never contracted into an FMA (mul_rn): the
// oracle rounds it before rounding to 8 bits.
//
// Layout: one block per row (grid-stride over rows). The row moves as 16-byte packs (8 bf16/f16 or 4 f32
// values) when the host has checked alignment (kVector), else one element at a time. Pass 1 loads up to
// kQuantCachedPacks packs per thread into registers and reduces |x| to the row's absmax; pass 2 quantizes
// those registers and stores. So a row of up to 512 x 8 x 16 B = 64 KB (K = 32768 bf16 / 16384 f32) is read
// from memory once; the host sizes the block to the row (threads = packs / 8, rounded up to a multiple of 64).
// Packs past that (longer rows, or any row on the element path past 4096 elements) are read in pass 1 and read
// again in pass 2, from L2 while the row is resident. Registers rather than shared memory: a 32 KB row in
// shared memory would cap an SM at 7 rows in flight and add a shared-memory round trip per value; registers
// cost 32 per thread plus the 8 addresses of the loads issued together. 512 threads, not 1024: at 1024,
// __launch_bounds__ caps NVIDIA at 64 registers and ptxas spilled 76-80 bytes; 512 leaves room for 128.
//
// The absmax reduces the stored bit patterns (f32, bf16 or f16) with the sign cleared as unsigned integers:
// for non-negative IEEE values integer order is numeric order, and every NaN pattern sorts above +inf, so NaN
// propagates for free; the row's maximum is converted to fp32 once.
#pragma once
#include "epilogue.hpp"

namespace fg {

constexpr int kQuantMaxThreads = 512;   // block size cap (the host rounds to multiples of 64: one AMD wave)
constexpr int kQuantCachedPacks = 8;     // packs a thread keeps in registers between the two passes
constexpr float kQuantMinScale = 1.1754943508222875e-38f;  // 2^-126, the smallest normal fp32

// Input element types of a row. abs_key: |v| as bits whose unsigned order is numeric order (NaN above +inf),
// taken from the stored bits without converting (pass 1 then holds no fp32 copies of the values for pass 2 to
// reuse: ptxas kept all 64 and used 115 registers); abs_from_key: that magnitude as fp32, exactly.
struct QuantInF32 {
  using Storage = float;
  FG_DEVICE static float to_float(float v) { return v; }
  FG_DEVICE static u32 abs_key(float v) { return float_to_bits(v) & 0x7fffffffu; }
  FG_DEVICE static float abs_from_key(u32 key) { return bits_to_float(key); }
};
struct QuantInBf16 {
  using Storage = u16;
  FG_DEVICE static float to_float(u16 v) { return bits_to_float(static_cast<u32>(v) << 16); }
  FG_DEVICE static u32 abs_key(u16 v) { return v & 0x7fffu; }
  FG_DEVICE static float abs_from_key(u32 key) { return bits_to_float(key << 16); }
};
struct QuantInF16 {
  using Storage = u16;
  FG_DEVICE static float to_float(u16 v) { return arch::half_bits_to_float(v); }
  FG_DEVICE static u32 abs_key(u16 v) { return v & 0x7fffu; }
  FG_DEVICE static float abs_from_key(u32 key) { return arch::half_bits_to_float(static_cast<u16>(key)); }
};

// 8-bit code types: kMax is the largest finite magnitude, from_float rounds to nearest even and saturates.
template <int kBias>
struct QuantFp8 : OutFp8E4M3<kBias> {
  static constexpr float kMax = kBias == 8 ? 240.f : 448.f;
  // Two codes, lo in bits 0-7. sm_90 converts to e4m3fn in hardware (cvt.rn.satfinite: nearest even,
  // saturating to +-448, NaN to NaN): about 3 instructions a value where the integer path takes ~20, which at
  // 2-byte inputs would bound the kernel by issue rather than memory. Elsewhere the integer path (epilogue.hpp).
  FG_DEVICE static u32 from_float2(float lo, float hi) {
#if defined(FG_NVIDIA)
    if constexpr (kBias == 7) {
      unsigned short r;
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));  // d = {a: high, b: low}
      return r;
    }
#endif
    return static_cast<u32>(OutFp8E4M3<kBias>::from_float(lo)) |
           (static_cast<u32>(OutFp8E4M3<kBias>::from_float(hi)) << 8);
  }
  FG_DEVICE static u8 from_float(float y) {
#if defined(FG_NVIDIA)
    if constexpr (kBias == 7) return static_cast<u8>(from_float2(y, 0.f) & 0xffu);
#endif
    return OutFp8E4M3<kBias>::from_float(y);
  }
};
using QuantFp8E4M3Fn = QuantFp8<7>;
using QuantFp8E4M3Fnuz = QuantFp8<8>;

struct QuantInt8 {
  using Bits = u8;
  static constexpr float kMax = 127.f;
  // Symmetric [-127, 127] (never -128, so a code negates exactly); NaN has no int8 code and writes 0 (its
  // row's scale is NaN, which keeps the row visible downstream).
  FG_DEVICE static Bits from_float(float t) {
#if defined(FG_NVIDIA)
    // cvt.rni.s32.f32: nearest even, NaN -> 0, saturating at the int32 range; then the integer clamp (the
    // bounds are integers, so clamping after rounding equals clamping before)
    int r = __float2int_rn(t);
    r = r > 127 ? 127 : (r < -127 ? -127 : r);
#else
    if (!(t == t)) return 0;
    t = t > kMax ? kMax : (t < -kMax ? -kMax : t);
    const int r = static_cast<int>(__builtin_rintf(t));  // v_rndne_f32 / the default rounding mode: nearest even
#endif
    return static_cast<Bits>(static_cast<unsigned>(r) & 0xffu);
  }
  FG_DEVICE static u32 from_float2(float lo, float hi) {
    return static_cast<u32>(from_float(lo)) | (static_cast<u32>(from_float(hi)) << 8);
  }
};

namespace quant {

// a * b rounded to fp32, never fused with a later add: NVIDIA's __fmul_rn is exempt from FMA contraction;
// clang (HIP and host) contracts only instructions that carry the contract flag, which this one does not.
FG_DEVICE float mul_rn(float a, float b) {
#if defined(FG_NVIDIA)
  return __fmul_rn(a, b);
#else
#pragma clang fp contract(off)
  return a * b;
#endif
}

// The row's scale from its absmax (see the top of the file). NaN and +inf pass through (NaN < x is false).
template <class Q>
FG_DEVICE float row_scale(float absmax) {
  if (absmax == 0.f) return 1.f;  // an all-zero row: every code is 0 whatever the scale; 1 keeps it finite
  const float s = absmax / Q::kMax;
  return s < kQuantMinScale ? kQuantMinScale : s;
}

// |v| as ordered bits: max over these is the NaN-propagating absmax.
FG_DEVICE u32 abs_bits(float v) { return float_to_bits(v) & 0x7fffffffu; }
FG_DEVICE u32 max_u32(u32 a, u32 b) { return a > b ? a : b; }

#if !defined(FG_HOST)
#if defined(FG_NVIDIA)
constexpr int kWarp = 32;
FG_DEVICE u32 warp_max_u32(u32 v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = max_u32(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
#else
constexpr int kWarp = 64;
FG_DEVICE u32 warp_max_u32(u32 v) {
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1)
    v = max_u32(v, static_cast<u32>(__builtin_amdgcn_ds_bpermute((lane ^ o) << 2, static_cast<int>(v))));
  return v;
}
#endif

// Max over the block. `slots`: kQuantMaxThreads / 32 words of shared memory, alternated between consecutive
// rows by the caller, so one barrier per row suffices: a thread writes a row's slots only after every thread
// has passed the previous row's barrier, hence finished reading the slots of the row before that.
FG_DEVICE u32 block_max_u32(u32 v, u32* slots) {
  v = warp_max_u32(v);
  const int tid = static_cast<int>(threadIdx.x);
  if ((tid & (kWarp - 1)) == 0) slots[tid / kWarp] = v;
  __syncthreads();
  const int warps = (static_cast<int>(blockDim.x) + kWarp - 1) / kWarp;
  u32 r = 0;
  for (int w = 0; w < warps; ++w) r = max_u32(r, slots[w]);  // a broadcast read per warp
  return r;
}

// kPack consecutive values of a row: one 16-byte load (kVector) or one element.
template <class In, int kPack>
struct alignas(sizeof(typename In::Storage) * kPack) QuantPack {
  typename In::Storage v[kPack];
};

template <class In, int kPack>
FG_DEVICE u32 pack_abs_key(const QuantPack<In, kPack>& p) {
  u32 m = 0;
#pragma unroll
  for (int i = 0; i < kPack; ++i) m = max_u32(m, In::abs_key(p.v[i]));
  return m;
}

// The pack's codes as one store (kPack bytes: 8 for 16-bit inputs, 4 for f32, 1 on the element path).
template <class In, class Q, int kPack>
FG_DEVICE void store_codes(u8* dst, const QuantPack<In, kPack>& p, float inv) {
  using Codes = typename epi::UintOf<8 * kPack>::type;  // one byte per code
  Codes c = 0;
  if constexpr (kPack == 1) {
    c = Q::from_float(mul_rn(In::to_float(p.v[0]), inv));
  } else {
#pragma unroll
    for (int i = 0; i < kPack; i += 2)
      c |= static_cast<Codes>(Q::from_float2(mul_rn(In::to_float(p.v[i]), inv),
                                             mul_rn(In::to_float(p.v[i + 1]), inv))) << (8 * i);
  }
  *reinterpret_cast<Codes*>(dst) = c;
}
#endif  // !FG_HOST

}  // namespace quant

#if !defined(FG_HOST)
// The whole kernel: rows blockIdx.x, blockIdx.x + blocks, ... of x (row stride ld elements, unit element
// stride) -> q [M, K] (contiguous) and scale [M]; blocks = the grid's size (an argument: the header-less HIP
// build has no gridDim). kVector: x, ld and K allow 16-byte packs (host-checked:
// 16-byte aligned base, ld * size and K * size multiples of 16).
template <class In, class Q, bool kVector>
FG_DEVICE void quantize_rows_block(const typename In::Storage* __restrict__ x, i64 ld, u8* __restrict__ q,
                                   float* __restrict__ scale, int M, int K, int blocks) {
  using S = typename In::Storage;
  constexpr int kPack = kVector ? 16 / static_cast<int>(sizeof(S)) : 1;
  using Pack = quant::QuantPack<In, kPack>;
  __shared__ u32 slots[2][kQuantMaxThreads / 32];
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int packs = K / kPack;
  const int cached = threads * kQuantCachedPacks;  // packs held in registers; the rest are read twice
  int parity = 0;
  for (int row = static_cast<int>(blockIdx.x); row < M; row += blocks, parity ^= 1) {
    const Pack* xr = reinterpret_cast<const Pack*>(x + static_cast<i64>(row) * ld);
    u8* qr = q + static_cast<i64>(row) * K;
    // All loads first and unconditional (past the row's end: its last pack again, masked below), so the
    // compiler issues them back to back; a load inside `if (p < packs)` next to its use serialised them.
    Pack held[kQuantCachedPacks];
#pragma unroll
    for (int j = 0; j < kQuantCachedPacks; ++j) {
      const int p = tid + j * threads;
      held[j] = xr[p < packs ? p : packs - 1];
    }
    u32 amax = 0;
#pragma unroll
    for (int j = 0; j < kQuantCachedPacks; ++j) {
      const u32 bits = quant::pack_abs_key<In, kPack>(held[j]);
      amax = quant::max_u32(amax, tid + j * threads < packs ? bits : 0u);
    }
    for (int p = cached + tid; p < packs; p += threads) {
      const Pack v = xr[p];  // one load of the pack (a reference into global memory would load each value)
      amax = quant::max_u32(amax, quant::pack_abs_key<In, kPack>(v));
    }
    amax = quant::block_max_u32(amax, slots[parity]);
    const float s = quant::row_scale<Q>(In::abs_from_key(amax));
    const float inv = 1.f / s;  // IEEE division (no fast-math on either compiler): correctly rounded
#pragma unroll
    for (int j = 0; j < kQuantCachedPacks; ++j) {
      const int p = tid + j * threads;
      if (p < packs) quant::store_codes<In, Q, kPack>(qr + static_cast<i64>(p) * kPack, held[j], inv);
    }
    for (int p = cached + tid; p < packs; p += threads) {
      const Pack v = xr[p];
      quant::store_codes<In, Q, kPack>(qr + static_cast<i64>(p) * kPack, v, inv);
    }
    if (tid == 0) scale[row] = s;
  }
}
#endif  // !FG_HOST

}  // namespace fg
