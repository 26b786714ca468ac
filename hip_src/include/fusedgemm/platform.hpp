// Portable kernel-language basics shared by every arch.
//
// hip_src is the one source. On AMD it is compiled as HIP by clang; on NVIDIA, ci/hipify.py renames it
// mechanically into cuda_src and nvcc compiles it. Code here uses only constructs that exist in both
// (threadIdx, blockIdx, __global__, __device__, __launch_bounds__) plus plain C++.
//
// The AMD build runs with -nogpuinc (no ROCm install is needed to build code objects), so when the HIP
// headers are absent we declare the few pieces of the HIP kernel language we use ourselves.
#pragma once

#if defined(FG_HOST)
// Plain host C++ (g++/clang++): the epilogue functors compile for the CPU so tests can check codegen
// numerics without a GPU (arch/host.hpp). Kernels are not built this way.
#define __device__
#define __host__
#elif defined(__HIP_DEVICE_COMPILE__) || defined(__AMDGCN__) || defined(__HIP__)
#define FG_AMD 1
#else
#define FG_NVIDIA 1
#endif

#if defined(FG_AMD) && __has_include(<hip/hip_runtime.h>) && !defined(FG_NO_HIP_HEADERS)
#include <hip/hip_runtime.h>
#elif defined(FG_AMD)
// Minimal HIP kernel language for header-less builds (clang -nogpuinc).
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(threads) __attribute__((amdgpu_flat_work_group_size(1, threads)))
#define __forceinline__ inline __attribute__((always_inline))
namespace fg_hip_builtin {
struct ThreadIdx {
  __device__ unsigned get_x() const { return __builtin_amdgcn_workitem_id_x(); }
  __declspec(property(get = get_x)) unsigned x;
};
struct BlockIdx {
  __device__ unsigned get_x() const { return __builtin_amdgcn_workgroup_id_x(); }
  __device__ unsigned get_y() const { return __builtin_amdgcn_workgroup_id_y(); }
  __device__ unsigned get_z() const { return __builtin_amdgcn_workgroup_id_z(); }
  __declspec(property(get = get_x)) unsigned x;
  __declspec(property(get = get_y)) unsigned y;
  __declspec(property(get = get_z)) unsigned z;
};
struct BlockDim {
  __device__ unsigned get_x() const { return __builtin_amdgcn_workgroup_size_x(); }
  __declspec(property(get = get_x)) unsigned x;
};
}  // namespace fg_hip_builtin
static constexpr fg_hip_builtin::ThreadIdx threadIdx{};
static constexpr fg_hip_builtin::BlockIdx blockIdx{};
static constexpr fg_hip_builtin::BlockDim blockDim{};
// As HIP's own (amd_device_functions.h, __work_group_barrier with __CLK_LOCAL_MEM_FENCE): a workgroup release
// fence, the barrier, a workgroup acquire fence. The release makes the compiler complete this wave's LDS (and
// global) writes -- s_waitcnt lgkmcnt(0) -- before s_barrier; a bare s_barrier does not, and the CDNA memory
// model lets LDS requests of different waves be reordered, so another wave could read the bytes before they land.
static __device__ inline __attribute__((convergent)) void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
#endif

#if defined(FG_HOST)
#define FG_DEVICE inline
#else
#define FG_DEVICE __device__ __forceinline__
#endif

namespace fg {

using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;
using i64 = long long;

// One 16-byte vector: the unit of every global load of A and of the preshuffled B.
struct alignas(16) Vec16 {
  u32 w[4];
};

FG_DEVICE Vec16 zero_vec16() { return Vec16{{0u, 0u, 0u, 0u}}; }

FG_DEVICE Vec16 load_vec16(const u8* p) { return *reinterpret_cast<const Vec16*>(p); }

FG_DEVICE int imin(int x, int y) { return x < y ? x : y; }
FG_DEVICE int imax(int x, int y) { return x > y ? x : y; }

FG_DEVICE float bits_to_float(u32 u) { return __builtin_bit_cast(float, u); }
FG_DEVICE u32 float_to_bits(float f) { return __builtin_bit_cast(u32, f); }

// float -> bf16 bits in integer arithmetic: round to nearest even, NaN stays NaN (quiet). For targets without
// a conversion instruction (CDNA, the host build).
FG_DEVICE u16 float_to_bf16_bits_rne(float f) {
  u32 u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<u16>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<u16>(u >> 16);
}

// A compile-time int as a value (std::integral_constant without <type_traits>, which runtime compilers may
// lack): lets a generic lambda take a count its body unrolls by.
template <int V>
struct IntConstant {
  static constexpr int value = V;
};

// Input element types. The tag only selects the MMA atom (and, through InTraits, the element size and the
// layout B comes in); bytes are moved untyped.
struct Fp8E4M3 {};   // e4m3fn on sm_90 and gfx950 (OCP), e4m3fnuz on gfx942 (the arch header decides)
struct Int8 {};
struct Bf16 {};
struct Fp16 {};
struct Tf32 {};      // fp32 in memory; the tensor core reads 19 bits of each value (TF32 / xf32)
struct F32x3 {};     // fp32 in memory, exact to about fp32: each value split as big + small TF32 parts, three
                     // TF32 products per pair (big.big + big.small + small.big); sm_90a only

// kBytes: one element in memory. kPreshuffledB: B comes as the (16,16) preshuffled weight (the 8-bit
// gemm_a8 family) rather than a plain row-major [N, K] matrix (the 16/32-bit matmul_fused family).
// kSplitTf32: the F32x3 main loop (sm90_gemm_mainloop.hpp, split_tf32_stage).
template <class In>
struct InTraits {
  static constexpr int kBytes = 1;
  static constexpr bool kPreshuffledB = true;
  static constexpr bool kSplitTf32 = false;
};
template <>
struct InTraits<Bf16> {
  static constexpr int kBytes = 2;
  static constexpr bool kPreshuffledB = false;
  static constexpr bool kSplitTf32 = false;
};
template <>
struct InTraits<Fp16> {
  static constexpr int kBytes = 2;
  static constexpr bool kPreshuffledB = false;
  static constexpr bool kSplitTf32 = false;
};
template <>
struct InTraits<Tf32> {
  static constexpr int kBytes = 4;
  static constexpr bool kPreshuffledB = false;
  static constexpr bool kSplitTf32 = false;
};
template <>
struct InTraits<F32x3> {
  static constexpr int kBytes = 4;
  static constexpr bool kPreshuffledB = false;
  static constexpr bool kSplitTf32 = true;
};

}  // namespace fg
