// The epilogue slot: what every GEMM kernel template calls to turn fp32 accumulators into outputs.
//
// An epilogue is one functor type, generated from an epilogue IR expression by pkg/fusedgemm/epilogue/
// codegen.py (the gemm_a8 presets too: epilogue_presets.hpp). It owns its operands and its outputs:
//
//   template <class Out> struct Epi {
//     using Output = Out;                              // element type of the main output (Out* types below)
//     struct Params { void* out; i64 ld_out; ... };    // pointers, strides, scalars: one kernel argument
//     static constexpr int kRowValues, kColValues;     // values that depend on the row (column) only
//     static void load_row(const Params&, int m, float (&r)[kRowValues]);   // m < M
//     static void load_col(const Params&, int n, float (&c)[kColValues]);   // n < N
//     template <int V, bool kVec4Aligned = false>      // V consecutive outputs (m, n .. n + V - 1), all in bounds
//     static void store(const Params&, int m, int n, const float (&acc)[V], const float (&r)[kRowValues],
//                       const float (&c)[V][kColValues]);
//     static bool vec4_aligned(const Params&);         // every 4-value store at n % 4 == 0 is one aligned store
//   };
//
// Kernels hoist load_row / load_col out of their store loops (a thread's rows and columns are known before
// the main loop ends) and call store once per fragment run; they never see what the epilogue computes.
// Host contract (checked in Python): out and every [M, N] operand are aligned to two elements and have an
// even row stride, so a pair of adjacent outputs is one aligned store.
#pragma once
#include "arch/select.hpp"

namespace fg {

// ---- output element types -------------------------------------------------------------------------------
struct OutBf16 {
  using Bits = u16;
  FG_DEVICE static Bits from_float(float y) { return arch::float_to_bf16_bits(y); }
};
struct OutF16 {
  using Bits = u16;
  FG_DEVICE static Bits from_float(float y) { return arch::float_to_half_bits(y); }
};
struct OutF32 {
  using Bits = u32;
  FG_DEVICE static Bits from_float(float y) { return float_to_bits(y); }
};

// fp8 e4m3 outputs, saturating (|y| beyond the largest finite value writes that value; NaN writes NaN),
// round to nearest even. kBias 7: OCP e4m3fn (max 448, NaN 0x7f, sm_90 / gfx950); kBias 8: e4m3fnuz (max 240,
// NaN 0x80, no negative zero; gfx942). Integer arithmetic on the fp32 bits: the same on every arch and host.
template <int kBias>
struct OutFp8E4M3 {
  using Bits = u8;
  static constexpr bool kFnuz = kBias == 8;
  static constexpr u32 kMaxCode = kFnuz ? 0x7fu : 0x7eu;
  static constexpr u32 kNanCode = kFnuz ? 0x80u : 0x7fu;
  FG_DEVICE static Bits from_float(float y) {
    const u32 bits = float_to_bits(y);
    const u32 sign = (bits >> 24) & 0x80u;
    const u32 mag = bits & 0x7fffffffu;
    if (mag > 0x7f800000u) return static_cast<Bits>(kNanCode);
    constexpr u32 kMinNormalBits = static_cast<u32>(128 - kBias) << 23;  // 2^(1 - kBias)
    u32 code;
    if (mag < kMinNormalBits) {
      // Subnormal range: multiples of 2^(-2 - kBias); scale by 2^(kBias + 2) (exact) and round to an integer
      // with the 2^23 trick (round to nearest even). 8 rounds up into the smallest normal, code 8: consistent.
      const float q = bits_to_float(mag) * static_cast<float>(1 << (kBias + 2));
      code = static_cast<u32>((q + 8388608.f) - 8388608.f);
    } else {
      const u32 rounded = mag + 0x7ffffu + ((mag >> 20) & 1u);  // round the 23-bit mantissa to 3 bits
      const u32 rebased = (rounded >> 20) - (static_cast<u32>(127 - kBias) << 3);
      code = (rounded >> 20) >= (static_cast<u32>(127 - kBias) << 3) + (kMaxCode + 1) ? kMaxCode : rebased;
    }
    if (kFnuz && code == 0) return 0;  // fnuz has no negative zero
    return static_cast<Bits>(sign | code);
  }
};
using OutFp8E4M3Fn = OutFp8E4M3<7>;
using OutFp8E4M3Fnuz = OutFp8E4M3<8>;

// ---- operand loads ----------------------------------------------------------------------------------------
// Element kinds of operands whose type is chosen at run time ("dyn" operands: the gemm_a8 bias). Values
// must match pkg/fusedgemm/epilogue/codegen.py DYN_KINDS.
enum ElemKind : int { kElemF32 = 1, kElemBf16 = 2, kElemF16 = 3 };

namespace epi {

FG_DEVICE float load_f32(const void* p, i64 i) { return static_cast<const float*>(p)[i]; }
FG_DEVICE float load_bf16(const void* p, i64 i) {
  return bits_to_float(static_cast<u32>(static_cast<const u16*>(p)[i]) << 16);
}
FG_DEVICE float load_f16(const void* p, i64 i) { return arch::half_bits_to_float(static_cast<const u16*>(p)[i]); }
// Vector and scalar operands (read-only for the kernel's lifetime: they must not alias an output) go through
// the read-only data path where the arch has one; [M, N] aux operands may be the output itself (in place) and
// use plain loads.
FG_DEVICE float load_f32_ro(const void* p, i64 i) {
  return bits_to_float(arch::load_ro_u32(static_cast<const float*>(p) + i));
}
// The hoisted 16-bit operands load in two steps, all of a batch's bits first, then the conversions: loaded and
// converted element by element, ptxas issued a few loads, converted them (waiting for memory), then the next few
// -- four or five DRAM round trips in a row for a tile's 32 bf16 bias values.
// The bits are held in 32-bit words: in a u16 array the compiler packs two per register (PRMT), which waits for
// the loads as a conversion does.
FG_DEVICE u32 load_bits16_ro(const void* p, i64 i) { return arch::load_ro_u16(static_cast<const u16*>(p) + i); }
FG_DEVICE float bf16_bits_to_float(u32 h) { return bits_to_float(h << 16); }
FG_DEVICE float f16_bits_to_float(u32 h) { return arch::half_bits_to_float(static_cast<u16>(h)); }

// ---- the IR's ops in fp32 (NaN propagates through every one, as in torch) --------------------------------
FG_DEVICE float inf() { return bits_to_float(0x7f800000u); }
FG_DEVICE float relu(float x) { return x < 0.f ? 0.f : x; }  // not fmaxf: that drops NaN
FG_DEVICE float leaky_relu(float x, float slope) { return x < 0.f ? x * slope : x; }
FG_DEVICE float exp(float x) {
  constexpr float kLog2e = 1.4426950408889634f;
  return arch::fast_exp2(x * kLog2e);
}
FG_DEVICE float sigmoid(float x) { return arch::fast_rcp(1.f + exp(-x)); }
FG_DEVICE float silu(float x) { return x * sigmoid(x); }  // exp overflow: x * 0 = -0 for x << 0
// GeLU, tanh approximation (FlyDSL, cuBLASLt): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): no cancellation, saturates cleanly at both ends.
FG_DEVICE float gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return x * arch::fast_rcp(1.f + exp(-2.f * u));
}
// GeLU, exact (torch's default): x * Phi(x) = x * 0.5 * erfc(-x / sqrt(2)).
// erfc(z) for z >= 0 by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7); the two tails are computed
// without cancellation: Phi(x) = 0.5 erfc(|x|/sqrt2) for x < 0, 1 - 0.5 erfc(|x|/sqrt2) for x >= 0.
FG_DEVICE float gelu_erf(float x) {
  constexpr float kInvSqrt2 = 0.7071067811865476f;
  const float z = (x < 0.f ? -x : x) * kInvSqrt2;
  const float t = arch::fast_rcp(1.f + 0.3275911f * z);
  const float poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float erfc_z = poly * exp(-z * z);
  const float phi = x < 0.f ? 0.5f * erfc_z : 1.f - 0.5f * erfc_z;
  return x * phi;
}
// tanh: an odd Taylor polynomial below |x| = 1/4 (relative error < 1e-8 there), else 1 - 2 / (1 + e^{2|x|})
// with the sign put back (cancellation at most 4x at |x| = 1/4).
FG_DEVICE float tanh(float x) {
  const float a = x < 0.f ? -x : x;
  if (a < 0.25f) {
    const float x2 = x * x;
    return x * (1.f + x2 * (-0.3333333333f + x2 * (0.1333333333f + x2 * (-0.0539682540f + x2 * 0.0218694885f))));
  }
  const float t = 1.f - 2.f * arch::fast_rcp(1.f + exp(2.f * a));
  return x < 0.f ? -t : (x == x ? t : x);
}
FG_DEVICE float abs(float x) { return bits_to_float(float_to_bits(x) & 0x7fffffffu); }
FG_DEVICE float sqrt(float x) { return arch::sqrt_f32(x); }
FG_DEVICE float rsqrt(float x) { return arch::rsqrt_f32(x); }
FG_DEVICE float div(float a, float b) { return a / b; }
FG_DEVICE float maximum(float a, float b) { return a != a ? a : (b > a || b != b ? b : a); }
FG_DEVICE float minimum(float a, float b) { return a != a ? a : (b < a || b != b ? b : a); }
FG_DEVICE float clamp(float x, float lo, float hi) { return minimum(maximum(x, lo), hi); }
FG_DEVICE float round_bf16(float x) { return bits_to_float(static_cast<u32>(arch::float_to_bf16_bits(x)) << 16); }
FG_DEVICE float round_f16(float x) { return arch::half_bits_to_float(arch::float_to_half_bits(x)); }

// ---- stores -----------------------------------------------------------------------------------------------
template <int kBits>
struct UintOf;  // the unsigned integer of kBits bits
template <>
struct UintOf<8> { using type = u8; };
template <>
struct UintOf<16> { using type = u16; };
template <>
struct UintOf<32> { using type = u32; };
template <>
struct UintOf<64> { using type = unsigned long long; };
template <class T>
struct alignas(2 * sizeof(T)) TwoOf {
  T lo, hi;
};

// Whether every four-value store_row of an output with this base and row stride, at columns n % 4 == 0, is one
// aligned store (8 or 16 bytes). A kernel tests this once, outside its store loop, and passes kVec4Aligned: a
// per-row test of the address slows the persistent kernels' epilogue warps, which bound short-K tiles.
template <class Out>
FG_DEVICE bool vec4_stores_aligned(const void* base, i64 ld) {
  constexpr unsigned long long kBytes = 4 * sizeof(typename Out::Bits);
  return ((reinterpret_cast<unsigned long long>(base) | static_cast<unsigned long long>(ld) * (kBytes / 4)) &
          (kBytes - 1)) == 0;
}

// V consecutive outputs of one row, converted to Out. Pairs are one aligned store (host contract above);
// four values are one store when the address allows (4, 8 or 16 bytes; kVec4Aligned: the caller has checked
// vec4_stores_aligned), else two pair stores.
template <class Out, int V, bool kVec4Aligned = false>
FG_DEVICE void store_row(void* base, i64 ld, int m, int n, const float (&y)[V]) {
  using Bits = typename Out::Bits;
  Bits* dst = static_cast<Bits*>(base) + static_cast<i64>(m) * ld + n;
  if constexpr (V == 1) {
    dst[0] = Out::from_float(y[0]);
  } else {
    static_assert(V % 2 == 0, "store_row: 1 or an even number of values");
    constexpr int kPairBits = 16 * static_cast<int>(sizeof(Bits));
    using Pair = typename UintOf<kPairBits>::type;
    Pair pairs[V / 2];
#pragma unroll
    for (int i = 0; i < V / 2; ++i)
      pairs[i] = static_cast<Pair>(Out::from_float(y[2 * i])) |
                 (static_cast<Pair>(Out::from_float(y[2 * i + 1])) << (kPairBits / 2));
    if constexpr (V == 4 && kPairBits == 16) {  // 1-byte outputs (fp8 / int8 codes): one 4-byte store
      if (kVec4Aligned || (reinterpret_cast<unsigned long long>(dst) & 3) == 0) {
        *reinterpret_cast<u32*>(dst) = static_cast<u32>(pairs[0]) | (static_cast<u32>(pairs[1]) << 16);
        return;
      }
    }
    if constexpr (V == 4 && kPairBits >= 32) {
      if (kVec4Aligned || (reinterpret_cast<unsigned long long>(dst) & (2 * sizeof(Pair) - 1)) == 0) {
        *reinterpret_cast<TwoOf<Pair>*>(dst) = TwoOf<Pair>{pairs[0], pairs[1]};
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < V / 2; ++i) reinterpret_cast<Pair*>(dst)[i] = pairs[i];
  }
}

}  // namespace epi
}  // namespace fg
