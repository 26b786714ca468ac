// NVIDIA Hopper (sm_90a) asynchronous machinery: mbarriers, the bulk tensor copy engine (TMA), thread-block
// clusters with distributed shared memory, and warpgroup MMA (wgmma). Thin wrappers over single PTX
// instructions; the kernel templates (sm90_gemm.hpp) decide how to compose them.
//
// These have no AMD counterpart with the same shape (CDNA's MFMA kernels stage through LDS with ordinary
// loads), so this header is included only by NVIDIA-only kernel templates.
#pragma once
#include "../platform.hpp"

#if defined(FG_NVIDIA)
namespace fg {
namespace sm90 {

using u64 = unsigned long long;

// A CUtensorMap as the driver encodes it (cuTensorMapEncodeTiled on the host): 128 opaque bytes, passed
// to the kernel by value as a __grid_constant__ parameter so the copy engine can read it from param space.
struct alignas(64) TmaDesc {
  unsigned char bytes[128];
};

FG_DEVICE u32 smem_addr(const void* p) {
  u32 addr;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(addr) : "l"(p));
  return addr;
}

// Dynamic shared memory given at launch; kernels trap if the host passed less than their layout needs.
FG_DEVICE u32 dynamic_smem_bytes() {
  u32 n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}

// ---- mbarrier ---------------------------------------------------------------------------------------------
FG_DEVICE void mbar_init(u64* bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// Make the initialised barriers visible to the async proxy (TMA) and to the rest of the cluster.
FG_DEVICE void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

FG_DEVICE void mbar_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
FG_DEVICE void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Block until the barrier's phase with this parity has completed. A fresh barrier counts its (virtual)
// previous phase, parity 1, as completed: producers start waiting on "empty" with parity 1.
FG_DEVICE void mbar_wait(u64* bar, u32 parity) {
  const u32 addr = smem_addr(bar);
  u32 done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- TMA: tensor tile global -> shared, completion counted in bytes on an mbarrier ---------------------------
FG_DEVICE void tma_load_2d(void* dst, const TmaDesc* map, u64* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
FG_DEVICE void tma_load_3d(void* dst, const TmaDesc* map, u64* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];" ::"r"(smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// The same 2-D copy, multicast: the box lands at dst's offset in every CTA of `cta_mask` (bit r: cluster rank r),
// and each of those CTAs' barriers at bar's offset counts the bytes that reached it.
FG_DEVICE void tma_load_2d_multicast(void* dst, const TmaDesc* map, u64* bar, int c0, int c1, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}
FG_DEVICE void tma_load_3d_multicast(void* dst, const TmaDesc* map, u64* bar, int c0, int c1, int c2, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
}
FG_DEVICE void prefetch_tma_desc(const TmaDesc* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// ---- warp specialisation -------------------------------------------------------------------------------------
// Hand registers between warpgroups (the kernel must be register-capped at entry: __launch_bounds__(n, 1)).
template <int kRegs>
FG_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
FG_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
// Two floats to an 8-byte aligned shared-memory address (one 8-byte store).
FG_DEVICE void st_shared_v2(u32 addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y) : "memory");
}
FG_DEVICE void st_shared_f32(u32 addr, float x) { asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(x) : "memory"); }
FG_DEVICE float ld_shared_f32(u32 addr) {
  float x;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(x) : "r"(addr) : "memory");
  return x;
}
// 4 bytes global -> shared without a register in flight (cp.async): a wgmma fence waits for every load still
// writing a register, whatever it was for, but not for these. Complete once this thread's cp_async_wait says so.
FG_DEVICE void cp_async_4(u32 dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
FG_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most kPending of this thread's committed cp.async groups are still in flight.
template <int kPending>
FG_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
// A barrier among `threads` threads (whole warps) of the CTA, on hardware barrier `id` (0 is __syncthreads).
FG_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// ... arriving without waiting: the threads that bar.sync on it wait for these too (producer -> consumer hand-off).
FG_DEVICE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- clusters ---------------------------------------------------------------------------------------------
// gridDim.x read where it is used: a volatile read is never hoisted into a register held across a loop (in the
// persistent kernel's 40-register epilogue warps ptxas spilled the hoisted copy rather than re-read it).
FG_DEVICE int grid_ctas_x() {
  u32 n;
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(n));
  return static_cast<int>(n);
}

FG_DEVICE u32 cluster_rank() {
  u32 r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
FG_DEVICE u32 cluster_size() {
  u32 n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
// Every thread of every CTA in the cluster; release/acquire orders shared-memory writes before it with
// (remote) reads after it.
FG_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The two halves of cluster_sync, for a CTA that has something to do between saying it is done with its peers'
// shared memory and needing them to be done with its own (a multicast pair's epilogue).
FG_DEVICE void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
FG_DEVICE void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// Arrive on the barrier at bar's shared-memory offset in CTA `rank` of the cluster, with the default semantics
// (release, CTA scope): what a consumer's stage release needs once its MMAs have completed (wgmma wait).
// `.release.cluster` compiles to a MEMBAR.ALL.GPU before every arrive, which stalls the consumers.
FG_DEVICE void mbar_arrive_cluster(u64* bar, u32 rank) {
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
// Read the 32-bit word at the same shared-memory offset in CTA `rank` of this cluster.
FG_DEVICE u32 ld_cluster_u32(const void* local, u32 rank) {
  u32 remote, v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
  return v;
}

// ---- wgmma --------------------------------------------------------------------------------------------------
// Shared-memory matrix descriptor: start address, leading / stride byte offsets (all >> 4), layout type in
// bits 62-63 (0 = no swizzle, 1 = 128-byte swizzle). For K-major operands the leading offset is the step
// between 8x16-byte core matrices along K, the stride offset the step between them along M / N.
enum SmemLayout : int { kNoSwizzle = 0, kSwizzle128B = 1 };

FG_DEVICE u64 smem_desc(u32 addr, u32 leading_bytes, u32 stride_bytes, SmemLayout layout) {
  return static_cast<u64>((addr & 0x3FFFF) >> 4) | (static_cast<u64>((leading_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<u64>((stride_bytes >> 4) & 0x3FFF) << 32) | (static_cast<u64>(layout) << 62);
}

// desc advanced by `bytes` (a multiple of 16) in shared memory: one add to the start-address field, which cannot
// carry out of its 14 bits while the address stays below the 256 KB the field spans (an sm_90 CTA has 227 KB).
FG_DEVICE u64 desc_plus(u64 desc, u32 bytes) {
  return desc + (bytes >> 4);
}

// v as lane 0 of the warp has it (every lane must call): a value ptxas then knows to be warp-uniform, so what
// derives from it (a warpgroup's stage addresses, the wgmma descriptors) can live in uniform registers.
FG_DEVICE int warp_uniform(int v) {
  return __shfl_sync(0xffffffffu, v, 0);
}

FG_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Order this thread's ordinary shared-memory writes before later async-proxy (wgmma, TMA) reads of them.
FG_DEVICE void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
FG_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Wait until at most kPending committed groups of this warpgroup are still running.
template <int kPending>
FG_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keep the compiler from moving accumulator reads/writes across the asynchronous MMA.
// NOTE: float registers take "+f": through a "+r" view each one becomes a mov.b32 that ptxas may schedule
// before the wgmma.wait_group it follows in the source -- a read of in-flight accumulators, for which ptxas
// serialises every wgmma of the kernel (C7514; seen on the bf16 kernels, whose fp32 tile is fenced right after
// wait_group 0).
template <class T, int N>
FG_DEVICE void fence_regs(T (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (sizeof(T) == 4 && static_cast<T>(0.5f) != T(0))
      asm volatile("" : "+f"(r[i])::"memory");
    else
      asm volatile("" : "+r"(*reinterpret_cast<u32*>(&r[i]))::"memory");
  }
}

// One m64nNkK warpgroup MMA over 32 bytes of K (K = 32 8-bit, 16 16-bit or 8 tf32 values), N = 16, 128 or 192
// (every kind) or 256 (bf16, fp16, tf32 only): D[64 x N] (+)= A[64 x K] . B[N x K]^T, both K-major in shared
// memory. Thread t of the warpgroup holds D rows 16 (t / 32) + (t % 32) / 4 + 8 ((j / 2) % 2), columns
// 8 (j / 4) + 2 (t % 4) + j % 2, for j = 0..N/2-1. accumulate = 0 overwrites D.
// kTrans: 0 both operands K-major; kTransA: A is M-major; kTransB: B is N-major (16-bit kinds only: the
// instruction's transpose immediates; fp8, int8 and tf32 read K-major operands only).
enum WgmmaTranspose : int { kTransNone = 0, kTransA = 1, kTransB = 2 };
template <class In, int N, int kTrans>
constexpr bool kNoWgmma = false;
// The specialisations below are the MMAs that exist; any other (kind, N, transpose) stops the build here.
template <class In, int N, int kTrans = kTransNone>
struct Wgmma {
  static_assert(kNoWgmma<In, N, kTrans>,
                "no wgmma for this input kind, N and transpose: N = 16, 128, 192 for every kind, N = 256 for "
                "bf16 / fp16 / tf32 only (the 8-bit kinds have no 256-wide tile config)");
};

#define FG_RW_FLOAT(x) "+f"(x)
#define FG_RW_INT(x) "+r"(x)

// C is the operand constraint: "+f" for fp32 accumulators, "+r" for int32.
#define FG_WGMMA_D64(C, D) \
  C(D[0]), C(D[1]), C(D[2]), C(D[3]), C(D[4]), C(D[5]), C(D[6]), C(D[7]), C(D[8]), C(D[9]), C(D[10]),  \
  C(D[11]), C(D[12]), C(D[13]), C(D[14]), C(D[15]), C(D[16]), C(D[17]), C(D[18]), C(D[19]), C(D[20]),  \
  C(D[21]), C(D[22]), C(D[23]), C(D[24]), C(D[25]), C(D[26]), C(D[27]), C(D[28]), C(D[29]), C(D[30]),  \
  C(D[31]), C(D[32]), C(D[33]), C(D[34]), C(D[35]), C(D[36]), C(D[37]), C(D[38]), C(D[39]), C(D[40]),  \
  C(D[41]), C(D[42]), C(D[43]), C(D[44]), C(D[45]), C(D[46]), C(D[47]), C(D[48]), C(D[49]), C(D[50]),  \
  C(D[51]), C(D[52]), C(D[53]), C(D[54]), C(D[55]), C(D[56]), C(D[57]), C(D[58]), C(D[59]), C(D[60]),  \
  C(D[61]), C(D[62]), C(D[63])
#define FG_WGMMA_D96(C, D) FG_WGMMA_D64(C, D), \
  C(D[64]), C(D[65]), C(D[66]), C(D[67]), C(D[68]), C(D[69]), C(D[70]), C(D[71]), C(D[72]), C(D[73]),  \
  C(D[74]), C(D[75]), C(D[76]), C(D[77]), C(D[78]), C(D[79]), C(D[80]), C(D[81]), C(D[82]), C(D[83]),  \
  C(D[84]), C(D[85]), C(D[86]), C(D[87]), C(D[88]), C(D[89]), C(D[90]), C(D[91]), C(D[92]), C(D[93]),  \
  C(D[94]), C(D[95])
#define FG_WGMMA_D128(C, D) FG_WGMMA_D96(C, D), \
  C(D[96]), C(D[97]), C(D[98]), C(D[99]), C(D[100]), C(D[101]), C(D[102]), C(D[103]),  \
  C(D[104]), C(D[105]), C(D[106]), C(D[107]), C(D[108]), C(D[109]), C(D[110]), C(D[111]),  \
  C(D[112]), C(D[113]), C(D[114]), C(D[115]), C(D[116]), C(D[117]), C(D[118]), C(D[119]),  \
  C(D[120]), C(D[121]), C(D[122]), C(D[123]), C(D[124]), C(D[125]), C(D[126]), C(D[127])

#define FG_WGMMA_D8(C, D) C(D[0]), C(D[1]), C(D[2]), C(D[3]), C(D[4]), C(D[5]), C(D[6]), C(D[7])
#define FG_WGMMA_REGS8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define FG_WGMMA_REGS64 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,  "  \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39,  "  \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58,  "  \
  "%59, %60, %61, %62, %63}"
#define FG_WGMMA_REGS96 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,  "  \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39,  "  \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58,  "  \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77,  "  \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define FG_WGMMA_REGS128 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20,  "  \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39,  "  \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58,  "  \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77,  "  \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,  "  \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109,  "  \
  "%110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123,  "  \
  "%124, %125, %126, %127}"

// IN_T, N, ACC, the PTX shape/type suffix, the constraint, the register list and the operand numbers of
// desc_a (= N / 2), desc_b and the accumulate predicate; SCALE: fp8 takes the two input-negation immediates.
#define FG_WGMMA_SPECIALISE_T(IN_T, N, TRANS, ACC, EXACT, PTX, CONSTRAINT, D_LIST, REGS, A, B, P, SCALE)     \
  template <>                                                                                               \
  struct Wgmma<IN_T, N, TRANS> {                                                                            \
    using Acc = ACC;                                                                                        \
    static constexpr int kAccPerThread = N / 2;                                                             \
    static constexpr bool kExactAccumulator = EXACT;                                                        \
    FG_DEVICE static void mma(ACC (&d)[N / 2], u64 desc_a, u64 desc_b, int accumulate) {                    \
      asm volatile("{ .reg .pred p; setp.ne.b32 p, %" #P ", 0;\n\t"                                          \
                   "wgmma.mma_async.sync.aligned." PTX " " REGS ", %" #A ", %" #B ", p" SCALE "; }"         \
                   : D_LIST(CONSTRAINT, d)                                                                  \
                   : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                            \
    }                                                                                                       \
  };
#define FG_WGMMA_SPECIALISE(IN_T, N, ACC, EXACT, PTX, CONSTRAINT, D_LIST, REGS, A, B, P, SCALE) \
  FG_WGMMA_SPECIALISE_T(IN_T, N, kTransNone, ACC, EXACT, PTX, CONSTRAINT, D_LIST, REGS, A, B, P, SCALE)

// fp8 sums keep fewer mantissa bits (promote into fp32 every 128 K); int32 sums of int8 products are exact.
FG_WGMMA_SPECIALISE(Fp8E4M3, 128, float, false, "m64n128k32.f32.e4m3.e4m3", FG_RW_FLOAT, FG_WGMMA_D64,
                    FG_WGMMA_REGS64, 64, 65, 66, ", 1, 1")
FG_WGMMA_SPECIALISE(Fp8E4M3, 192, float, false, "m64n192k32.f32.e4m3.e4m3", FG_RW_FLOAT, FG_WGMMA_D96,
                    FG_WGMMA_REGS96, 96, 97, 98, ", 1, 1")
FG_WGMMA_SPECIALISE(Int8, 128, int, true, "m64n128k32.s32.s8.s8", FG_RW_INT, FG_WGMMA_D64, FG_WGMMA_REGS64,
                    64, 65, 66, "")
FG_WGMMA_SPECIALISE(Int8, 192, int, true, "m64n192k32.s32.s8.s8", FG_RW_INT, FG_WGMMA_D96, FG_WGMMA_REGS96,
                    96, 97, 98, "")
// n16: the swapped decode tiles (WgmmaConfig::kSwapAB), where N is the activation's rows.
FG_WGMMA_SPECIALISE(Fp8E4M3, 16, float, false, "m64n16k32.f32.e4m3.e4m3", FG_RW_FLOAT, FG_WGMMA_D8,
                    FG_WGMMA_REGS8, 8, 9, 10, ", 1, 1")
FG_WGMMA_SPECIALISE(Int8, 16, int, true, "m64n16k32.s32.s8.s8", FG_RW_INT, FG_WGMMA_D8, FG_WGMMA_REGS8, 8, 9,
                    10, "")
// bf16 / fp16 (k16) and tf32 (k8): 32 bytes of K per MMA like the 8-bit kinds, so one stage's descriptors are
// the same; the tensor core sums in fp32 (no promotion). The 16-bit kinds take the transpose immediates (0:
// both operands K-major).
FG_WGMMA_SPECIALISE(Bf16, 128, float, true, "m64n128k16.f32.bf16.bf16", FG_RW_FLOAT, FG_WGMMA_D64,
                    FG_WGMMA_REGS64, 64, 65, 66, ", 1, 1, 0, 0")
FG_WGMMA_SPECIALISE(Bf16, 192, float, true, "m64n192k16.f32.bf16.bf16", FG_RW_FLOAT, FG_WGMMA_D96,
                    FG_WGMMA_REGS96, 96, 97, 98, ", 1, 1, 0, 0")
FG_WGMMA_SPECIALISE(Bf16, 256, float, true, "m64n256k16.f32.bf16.bf16", FG_RW_FLOAT, FG_WGMMA_D128,
                    FG_WGMMA_REGS128, 128, 129, 130, ", 1, 1, 0, 0")
FG_WGMMA_SPECIALISE(Bf16, 16, float, true, "m64n16k16.f32.bf16.bf16", FG_RW_FLOAT, FG_WGMMA_D8, FG_WGMMA_REGS8,
                    8, 9, 10, ", 1, 1, 0, 0")
FG_WGMMA_SPECIALISE(Fp16, 128, float, true, "m64n128k16.f32.f16.f16", FG_RW_FLOAT, FG_WGMMA_D64,
                    FG_WGMMA_REGS64, 64, 65, 66, ", 1, 1, 0, 0")
FG_WGMMA_SPECIALISE(Fp16, 192, float, true, "m64n192k16.f32.f16.f16", FG_RW_FLOAT, FG_WGMMA_D96,
                    FG_WGMMA_REGS96, 96, 97, 98, ", 1, 1, 0, 0")
FG_WGMMA_SPECIALISE(Fp16, 256, float, true, "m64n256k16.f32.f16.f16", FG_RW_FLOAT, FG_WGMMA_D128,
                    FG_WGMMA_REGS128, 128, 129, 130, ", 1, 1, 0, 0")
FG_WGMMA_SPECIALISE(Fp16, 16, float, true, "m64n16k16.f32.f16.f16", FG_RW_FLOAT, FG_WGMMA_D8, FG_WGMMA_REGS8,
                    8, 9, 10, ", 1, 1, 0, 0")
// F32x3: the tf32 instruction on split fp32 operands; its K blocks are promoted into fp32 registers (like fp8):
// the tensor core sums 96 products (3 x 32 values of K) per block before an FADD, keeping the sum near fp32.
FG_WGMMA_SPECIALISE(F32x3, 128, float, false, "m64n128k8.f32.tf32.tf32", FG_RW_FLOAT, FG_WGMMA_D64,
                    FG_WGMMA_REGS64, 64, 65, 66, ", 1, 1")
// MN-major B (matmul_fused's [K, N] weights): trans-b on the unswapped tiles, trans-a on the swapped ones (the
// weight is the MMA's A there).
#define FG_WGMMA_16BIT_TRANSPOSED(IN_T, PTX_T)                                                                    \
  FG_WGMMA_SPECIALISE_T(IN_T, 128, kTransB, float, true, "m64n128k16.f32." PTX_T, FG_RW_FLOAT, FG_WGMMA_D64,     \
                        FG_WGMMA_REGS64, 64, 65, 66, ", 1, 1, 0, 1")                                              \
  FG_WGMMA_SPECIALISE_T(IN_T, 192, kTransB, float, true, "m64n192k16.f32." PTX_T, FG_RW_FLOAT, FG_WGMMA_D96,     \
                        FG_WGMMA_REGS96, 96, 97, 98, ", 1, 1, 0, 1")                                              \
  FG_WGMMA_SPECIALISE_T(IN_T, 256, kTransB, float, true, "m64n256k16.f32." PTX_T, FG_RW_FLOAT, FG_WGMMA_D128,    \
                        FG_WGMMA_REGS128, 128, 129, 130, ", 1, 1, 0, 1")                                          \
  FG_WGMMA_SPECIALISE_T(IN_T, 16, kTransA, float, true, "m64n16k16.f32." PTX_T, FG_RW_FLOAT, FG_WGMMA_D8,        \
                        FG_WGMMA_REGS8, 8, 9, 10, ", 1, 1, 1, 0")
FG_WGMMA_16BIT_TRANSPOSED(Bf16, "bf16.bf16")
FG_WGMMA_16BIT_TRANSPOSED(Fp16, "f16.f16")
#undef FG_WGMMA_16BIT_TRANSPOSED
FG_WGMMA_SPECIALISE(Tf32, 128, float, true, "m64n128k8.f32.tf32.tf32", FG_RW_FLOAT, FG_WGMMA_D64,
                    FG_WGMMA_REGS64, 64, 65, 66, ", 1, 1")
FG_WGMMA_SPECIALISE(Tf32, 192, float, true, "m64n192k8.f32.tf32.tf32", FG_RW_FLOAT, FG_WGMMA_D96,
                    FG_WGMMA_REGS96, 96, 97, 98, ", 1, 1")
FG_WGMMA_SPECIALISE(Tf32, 256, float, true, "m64n256k8.f32.tf32.tf32", FG_RW_FLOAT, FG_WGMMA_D128,
                    FG_WGMMA_REGS128, 128, 129, 130, ", 1, 1")
FG_WGMMA_SPECIALISE(Tf32, 16, float, true, "m64n16k8.f32.tf32.tf32", FG_RW_FLOAT, FG_WGMMA_D8, FG_WGMMA_REGS8,
                    8, 9, 10, ", 1, 1")

#undef FG_WGMMA_SPECIALISE
#undef FG_WGMMA_SPECIALISE_T
#undef FG_WGMMA_D128
#undef FG_WGMMA_REGS128
#undef FG_WGMMA_D96
#undef FG_WGMMA_REGS96
#undef FG_WGMMA_D64
#undef FG_RW_FLOAT
#undef FG_RW_INT
#undef FG_WGMMA_REGS64
#undef FG_WGMMA_D8
#undef FG_WGMMA_REGS8

}  // namespace sm90
}  // namespace fg
#endif  // FG_NVIDIA
