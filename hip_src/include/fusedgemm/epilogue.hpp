// Epilogues: a small policy type applied to each fp32 accumulator value before the single rounding to
// the output type. The same functors serve every arch and every op family.
//
//   y = Act(acc * scale_a[m] * scale_b[n] + bias[n])      all in fp32, rounded once to Out
#pragma once
#include "arch/select.hpp"

namespace fg {

// ---- activations ---------------------------------------------------------------------------------------
struct ActIdentity {
  FG_DEVICE static float apply(float x) { return x; }
};

struct ActRelu {
  // NOTE: NaN must propagate like torch.relu, so no fmaxf (which drops NaN).
  FG_DEVICE static float apply(float x) { return x < 0.f ? 0.f : x; }
};

struct ActSilu {
  FG_DEVICE static float apply(float x) {
    constexpr float kLog2e = 1.4426950408889634f;
    return x * arch::fast_rcp(1.f + arch::fast_exp2(-x * kLog2e));  // exp overflow: x * 0 = -0 for x << 0
  }
};

// GeLU, tanh approximation (FlyDSL, cuBLASLt): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): no cancellation, saturates cleanly at both ends.
struct ActGeluTanh {
  FG_DEVICE static float apply(float x) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    constexpr float kLog2e = 1.4426950408889634f;
    const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
    return x * arch::fast_rcp(1.f + arch::fast_exp2(-2.f * u * kLog2e));
  }
};

// GeLU, exact (torch's default): x * Phi(x) = x * 0.5 * erfc(-x / sqrt(2)).
// erfc(z) for z >= 0 by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7); the two tails are computed
// without cancellation: Phi(x) = 0.5 erfc(|x|/sqrt2) for x < 0, 1 - 0.5 erfc(|x|/sqrt2) for x >= 0.
struct ActGeluErf {
  FG_DEVICE static float apply(float x) {
    constexpr float kInvSqrt2 = 0.7071067811865476f;
    constexpr float kLog2e = 1.4426950408889634f;
    const float z = (x < 0.f ? -x : x) * kInvSqrt2;
    const float t = arch::fast_rcp(1.f + 0.3275911f * z);
    const float poly =
        t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    const float erfc_z = poly * arch::fast_exp2(-z * z * kLog2e);
    const float phi = x < 0.f ? 0.5f * erfc_z : 1.f - 0.5f * erfc_z;
    return x * phi;
  }
};

// ---- operand loads -------------------------------------------------------------------------------------
// Bias element type is a run-time argument (one uniform branch per element costs nothing next to the
// mainloop, and it keeps the number of compiled kernels down). Values must match the Python side.
enum BiasKind : int { kBiasNone = 0, kBiasF32 = 1, kBiasBf16 = 2, kBiasF16 = 3 };

FG_DEVICE float load_bias(const void* bias, int kind, int n) {
  if (kind == kBiasF32) return static_cast<const float*>(bias)[n];
  if (kind == kBiasBf16) return bits_to_float(static_cast<u32>(static_cast<const u16*>(bias)[n]) << 16);
  if (kind == kBiasF16) return arch::half_bits_to_float(static_cast<const u16*>(bias)[n]);
  return 0.f;
}

// A scale is a pointer (per-row / per-column when stride is 1, broadcast when stride is 0) or null (1.0).
FG_DEVICE float load_scale(const float* scale, int stride, int i) { return scale ? scale[i * stride] : 1.f; }

// ---- output types ----------------------------------------------------------------------------------------
struct OutBf16 {
  FG_DEVICE static u16 from_float(float y) { return arch::float_to_bf16_bits(y); }
};
struct OutF16 {
  FG_DEVICE static u16 from_float(float y) { return arch::float_to_half_bits(y); }
};

// ---- the epilogue functor ------------------------------------------------------------------------------
template <class Act>
struct EpilogueScaleBiasAct {
  // scale = alpha * scale_a[m] * scale_b[n]; bias = bias[n] or 0.
  FG_DEVICE static float apply(float acc, float scale, float bias) { return Act::apply(acc * scale + bias); }
};

}  // namespace fg
