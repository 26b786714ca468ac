// Host (CPU) versions of the numeric helpers the epilogue uses, for the CPU tests of generated functors
// (compiled with -DFG_HOST by g++ or clang++). Exact library functions stand in for the GPUs' approximate
// instructions; conversions round to nearest even as the GPUs do.
#pragma once
#include <cmath>

#include "../platform.hpp"

namespace fg {
namespace arch {

inline float fast_exp2(float x) { return std::exp2(x); }
inline float fast_rcp(float x) { return 1.f / x; }
inline float sqrt_f32(float x) { return std::sqrt(x); }
inline float rsqrt_f32(float x) { return 1.f / std::sqrt(x); }

// The read-only path is the plain one here (the loads are scalar and hoisted out of the store loops).
inline u32 load_ro_u32(const void* p) { return *static_cast<const u32*>(p); }
inline u16 load_ro_u16(const void* p) { return *static_cast<const u16*>(p); }

inline float half_bits_to_float(u16 h) { return static_cast<float>(__builtin_bit_cast(_Float16, h)); }
inline u16 float_to_half_bits(float f) { return __builtin_bit_cast(u16, static_cast<_Float16>(f)); }

inline u16 float_to_bf16_bits(float f) { return float_to_bf16_bits_rne(f); }

}  // namespace arch
}  // namespace fg
