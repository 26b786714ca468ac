// The consumer warpgroups' main loops of the sm_90a GEMM kernels (sm90_gemm.hpp: a CTA per tile;
// sm90_gemm_persistent.hpp): K blocks from the shared-memory ring into the accumulators, the stage release
// (local, and remote in a B-multicast pair), fp8 promotion, two accumulator chains, and F32x3's split operands.
// The configs, tile order and copies they use are in sm90_gemm_common.hpp.
#pragma once
#include "sm90_gemm_common.hpp"

#if defined(FG_NVIDIA)
namespace fg {

// F32x3: one fp32 word x as big + small TF32 values (bits with the low 13 mantissa bits zero), each rounded to
// nearest: |x - big - small| <= 2^-22 |x|. Inf / NaN ride in big alone (so inf x a zero small part of the other
// operand can make a NaN where exact fp32 gives inf). A value that would round up to inf is truncated instead.
FG_DEVICE void split_tf32(u32 x, u32& big, u32& small) {
  if ((x & 0x7F800000u) == 0x7F800000u) {
    big = x;
    small = 0u;
    return;
  }
  u32 r = (x + 0x1000u) & 0xFFFFE000u;
  if ((r & 0x7F800000u) == 0x7F800000u) r = x & 0xFFFFE000u;
  big = r;
  small = (float_to_bits(bits_to_float(x) - bits_to_float(r)) + 0x1000u) & 0xFFFFE000u;  // the difference is exact
}

// Split one landed stage: big parts in place, small parts into the buffer q (same byte offsets: the same swizzle),
// 16-byte vectors spread over all consumer threads t.
template <class Cfg>
FG_DEVICE void split_tf32_stage(u8* sa, u8* sb, u8* qa, u8* qb, int t) {
  auto split_range = [&](u8* src, u8* dst, int bytes) {
    for (int v = t; v < bytes / 16; v += Cfg::kConsumerThreads) {
      uint4 x = *reinterpret_cast<const uint4*>(src + 16 * v);
      uint4 big, small;
      split_tf32(x.x, big.x, small.x);
      split_tf32(x.y, big.y, small.y);
      split_tf32(x.z, big.z, small.z);
      split_tf32(x.w, big.w, small.w);
      *reinterpret_cast<uint4*>(src + 16 * v) = big;
      *reinterpret_cast<uint4*>(dst + 16 * v) = small;
    }
  };
  split_range(sa, qa, Cfg::kStageBytesA);
  split_range(sb, qb, Cfg::kStageBytesB);
}

// The F32x3 main loop: acc += A . B^T with A = Ab + As, B = Bb + Bs and the three products Ab.Bb + Ab.Bs + As.Bb
// (As.Bs, ~2^-22 relative, is dropped), each K block's 12 MMAs into a partial tile promoted into acc by FADD.
// Block i + 1 is split (consumer threads, generic-proxy shared-memory writes, a proxy fence and a barrier of the
// consumer threads) while block i's MMAs run; its small parts go to the other of the two buffers.
template <class In, class Cfg, class Acc, int kAcc>
FG_DEVICE void split_tf32_mainloop(Acc (&acc)[kAcc], int g0, int kb_count, u8* stage_a, u8* stage_b,
                                   sm90::u64* full, sm90::u64* empty, int wg, int lane) {
  static_assert(Cfg::kSplitTf32, "F32x3 runs on SplitTf32<Config> (its shared memory holds the small parts)");
  using Mma = MmaOf<In, Cfg>;
  u8* small = stage_a + Cfg::kSmallOffset;  // stage_a is the aligned base of the dynamic shared memory
  const int t = static_cast<int>(threadIdx.x);  // consumer thread 0 .. kConsumerThreads - 1
  auto stage_of = [&](int i) { return (g0 + i) % Cfg::kStages; };
  auto prepare = [&](int i) {
    const int g = g0 + i, s = stage_of(i);
    sm90::mbar_wait(&full[s], (g / Cfg::kStages) & 1);
    u8* q = small + (i & 1) * Cfg::kStageBytes;
    split_tf32_stage<Cfg>(stage_a + s * Cfg::kStageBytesA, stage_b + s * Cfg::kStageBytesB, q,
                          q + Cfg::kStageBytesA, t);
    sm90::fence_proxy_async_smem();  // the split parts, written by threads, are read by wgmma (the async proxy)
    sm90::named_barrier_sync(1, Cfg::kConsumerThreads);
  };
  Acc part[kAcc];
  if (kb_count > 0) prepare(0);
  for (int i = 0; i < kb_count; ++i) {
    const int s = stage_of(i);
    u8* q = small + (i & 1) * Cfg::kStageBytes;
    const u32 a_big = sm90::smem_addr(stage_a + s * Cfg::kStageBytesA + wg * 64 * Cfg::kBlockK);
    const u32 a_small = sm90::smem_addr(q + wg * 64 * Cfg::kBlockK);
    const u32 b_big = sm90::smem_addr(stage_b + s * Cfg::kStageBytesB);
    const u32 b_small = sm90::smem_addr(q + Cfg::kStageBytesA);
    sm90::fence_regs(part);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
      Mma::mma(part, k_major_desc<Cfg>(a_big, kk), k_major_desc<Cfg>(b_big, kk), kk > 0);
      Mma::mma(part, k_major_desc<Cfg>(a_big, kk), k_major_desc<Cfg>(b_small, kk), 1);
      Mma::mma(part, k_major_desc<Cfg>(a_small, kk), k_major_desc<Cfg>(b_big, kk), 1);
    }
    sm90::wgmma_commit();
    if (i + 1 < kb_count) prepare(i + 1);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(part);
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(&empty[s]);
#pragma unroll
    for (int j = 0; j < kAcc; ++j) acc[j] += part[j];
  }
}

// The consumer warpgroups' main loop: K blocks i = 0 .. kb_count - 1 of the tile into acc (zeroed by the
// caller). Block i is the CTA's g0 + i-th: the ring's stage and phase follow that count, so a persistent CTA's
// tiles continue one sequence. Cfg::kBlockScaled (fp8): block i's partial tile is promoted times its block scales,
// its scales read from the scale ring (BlockScaleRows: copied two K blocks ahead).
template <class In, class Cfg, class Acc, int kAcc, int kScaleRows = 2, bool kScalePairs = false>
FG_DEVICE void consumer_mainloop(Acc (&acc)[kAcc], int g0, int kb_count, u8* stage_a, u8* stage_b,
                                 sm90::u64* full, sm90::u64* empty, int wg, int lane,
                                 const BlockScaleRows<kScaleRows, Cfg::kSwapAB, kScalePairs>& scales = {}) {
  using Scales = BlockScaleRows<kScaleRows, Cfg::kSwapAB, kScalePairs>;
  if constexpr (InTraits<In>::kSplitTf32) {
    split_tf32_mainloop<In, Cfg>(acc, g0, kb_count, stage_a, stage_b, full, empty, wg, lane);
    return;
  }
  using Mma = MmaOf<In, Cfg>;
  constexpr int kAccPerMma = Mma::kAccPerThread;
  constexpr int kValues = kStageValues<In, Cfg>;  // K rows of an MN-major B stage
  // Issue K block i's MMAs into `d` (asynchronously; committed as one group). accumulate = false: the
  // block's first MMA overwrites d.
  auto issue = [&](int i, Acc(&d)[kAcc], bool accumulate) {
    const int g = g0 + i;
    const int s = g % Cfg::kStages;
    sm90::mbar_wait(&full[s], (g / Cfg::kStages) & 1);
    const u32 a_base = sm90::smem_addr(stage_a + s * Cfg::kStageBytesA + wg * 64 * Cfg::kBlockK);
    const u32 b_base = sm90::smem_addr(stage_b + s * Cfg::kStageBytesB);
    // Each MMA's descriptors are the K step's offset added to the stage's (uniform-register adds, not a mask and
    // shift of every address).
    const sm90::u64 da0 = k_major_desc<Cfg>(a_base, 0);
    // B's descriptor at K step 0 and the bytes one K step moves it: MN-major, 16 K rows (2048 B) per MMA, 64-column
    // blocks kValues x 128 B apart (leading offset), 8-row K groups 1024 B apart (stride offset); plain, 32 B within
    // the 128-byte swizzle; preshuffled, two 16-byte K chunks of every row.
    const sm90::u64 db0 =
        Cfg::kBMnMajor ? sm90::smem_desc(b_base, kValues * 128, 1024, sm90::kSwizzle128B)
        : kPlainB<In> ? k_major_desc<Cfg>(b_base, 0)
                              : sm90::smem_desc(b_base, Cfg::kBlockN * 16, 128, sm90::kNoSwizzle);
    constexpr u32 kStepB = Cfg::kBMnMajor ? 2048 : kPlainB<In> ? 32 : 2 * Cfg::kBlockN * 16;
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
      const sm90::u64 da = sm90::desc_plus(da0, 32 * kk);
      if constexpr (Cfg::kSwapAB) {
        // Weight rows 64h..64h+63 (8 core matrices of 8 rows, 128 B apart) are the MMA's A, the activation
        // its B: D[h] = B_h . A^T. Weight row block h: column block h (kValues x 128 B on) MN-major, 64 rows
        // (64 x 128 B) plain, 8 core matrices (1024 B) preshuffled.
        constexpr u32 kRowBlockB = Cfg::kBMnMajor ? kValues * 128 : kPlainB<In> ? 64 * Cfg::kBlockK : 8 * 128;
#pragma unroll
        for (int h = 0; h < Cfg::kMmasPerStep; ++h) {
          const sm90::u64 dw = sm90::desc_plus(db0, h * kRowBlockB + kk * kStepB);
          Mma::mma(*reinterpret_cast<Acc(*)[kAccPerMma]>(&d[h * kAccPerMma]), dw, da, accumulate || kk > 0);
        }
      } else {
        Mma::mma(d, da, sm90::desc_plus(db0, kk * kStepB), accumulate || kk > 0);
      }
    }
    sm90::wgmma_commit();
  };
  // K block i's MMAs are complete: its stage can be refilled.
  // In a B-multicast pair the peer's producer also writes this stage: it waits for this warp's arrival too.
  auto release = [&](int i) {
    __syncwarp();
    if (lane == 0) {
      sm90::u64* bar = &empty[(g0 + i) % Cfg::kStages];
      sm90::mbar_arrive(bar);
      if constexpr (Cfg::kPairB) sm90::mbar_arrive_cluster(bar, sm90::cluster_rank() ^ 1u);
    }
  };
  static_assert(!Cfg::kBlockScaled || !Mma::kExactAccumulator, "block scales: fp8 (a partial tile per K block)");
  if constexpr (Mma::kExactAccumulator) {
    // int8 (int32 sums are exact) and the 16/32-bit kinds (the tensor core keeps fp32 sums): every K block
    // accumulates straight into the result tile and the MMAs of consecutive blocks queue back to back; only
    // the stage release waits, one block behind. Two chains: odd blocks go to acc2, added to acc at the end.
    Acc acc2[kAcc];  // the second chain (unused with one chain)
    for (int i = 0; i < kb_count; ++i) {
      bool second = false;
      if constexpr (Cfg::kChains > 1) second = i & 1;
      if (second)
        issue(i, acc2, i > 1);
      else
        issue(i, acc, i > 0);
      if (i > 0) {
        sm90::wgmma_wait<1>();
        release(i - 1);
      }
    }
    sm90::wgmma_wait<0>();
    sm90::fence_regs(acc);
    if (kb_count > 0) release(kb_count - 1);
    if constexpr (Cfg::kChains > 1) {
      sm90::fence_regs(acc2);
      if (kb_count > 1) {
#pragma unroll
        for (int j = 0; j < kAcc; ++j) acc[j] += acc2[j];
      }
    }
  } else if constexpr (Cfg::kChains > 1) {
    // fp8, two partial tiles: block i's MMAs are issued into part[i % 2] before block i - 1's partial tile
    // (the other one) is waited for and promoted, so the promotion overlaps the tensor core's work.
    // NOTE: ptxas tracks which wgmma group a wait retires only in straight-line code: across a loop's back
    // edge it assumes the other partial tile may still be in flight and serialises every wgmma (C7514). So
    // the loop body is kUnroll blocks, unrolled, ending in wait<0> (one exposed promotion per kUnroll
    // blocks); the remaining blocks run as unrolled groups of 4, 2 and 1. 8 exposes half the promotions of 4
    // (several percent at large K); 16 gains nothing more.
    constexpr int kUnroll = 8;
    static_assert(kUnroll == 2 || kUnroll == 4 || kUnroll == 8, "the groups of 4, 2 and 1 cover < 8 remaining blocks");
    Acc part0[kAcc], part1[kAcc];
    auto promote = [&](Acc(&p)[kAcc]) {
      sm90::fence_regs(p);
#pragma unroll
      for (int j = 0; j < kAcc; ++j) acc[j] += p[j];
    };
    // Block-scaled: the scales of the blocks in part0 / part1, and the promotion times them.
    float scale0[Scales::kValues], scale1[Scales::kValues];
    if constexpr (Cfg::kBlockScaled) scales.start(kb_count);
    auto promote_scaled = [&](Acc(&p)[kAcc], const float(&sc)[Scales::kValues]) {
      sm90::fence_regs(p);
#pragma unroll
      for (int j = 0; j < kAcc; ++j)
        acc[j] = fmaf(p[j], sc[block_scale_slot<Cfg::kSwapAB, kAccPerMma, kScalePairs>(j)], acc[j]);
    };
    // Blocks i .. i + count - 1 (count: an integral_constant), unrolled; nothing is in flight after it.
    auto run_blocks = [&](auto count, int i) {
      constexpr int kCount = decltype(count)::value;
#pragma unroll
      for (int u = 0; u < kCount; ++u) {
        if (u & 1) {
          sm90::fence_regs(part1);
          issue(i + u, part1, false);
          if constexpr (Cfg::kBlockScaled) scales.take(i + u, kb_count, scale1);
        } else {
          sm90::fence_regs(part0);
          issue(i + u, part0, false);
          if constexpr (Cfg::kBlockScaled) scales.take(i + u, kb_count, scale0);
        }
        if (u > 0) {
          sm90::wgmma_wait<1>();  // block i + u - 1 is complete
          release(i + u - 1);
          if constexpr (Cfg::kBlockScaled) {
            if (u & 1)
              promote_scaled(part0, scale0);
            else
              promote_scaled(part1, scale1);
          } else {
            if (u & 1)
              promote(part0);
            else
              promote(part1);
          }
        }
      }
      sm90::wgmma_wait<0>();
      release(i + kCount - 1);
      if constexpr (Cfg::kBlockScaled) {
        if ((kCount - 1) & 1)
          promote_scaled(part1, scale1);
        else
          promote_scaled(part0, scale0);
      } else {
        if ((kCount - 1) & 1)
          promote(part1);
        else
          promote(part0);
      }
    };
    int i = 0;
    for (; i + kUnroll <= kb_count; i += kUnroll) run_blocks(IntConstant<kUnroll>{}, i);
    if constexpr (kUnroll > 4) {
      if (i + 4 <= kb_count) {
        run_blocks(IntConstant<4>{}, i);
        i += 4;
      }
    }
    if constexpr (kUnroll > 2) {
      if (i + 2 <= kb_count) {
        run_blocks(IntConstant<2>{}, i);
        i += 2;
      }
    }
    if (i < kb_count) run_blocks(IntConstant<1>{}, i);
  } else {
    // fp8: each K block goes to a partial tile that is waited for and added to the fp32 result (promotion
    // every 128 values of K).
    // NOTE: every 128, not 256: this gives _scaled_mm's error exactly (same rms, same share of correctly rounded
    // outputs). Promotion every 256 is a few percent faster, but on positive inputs its error is half again
    // cuBLAS's and a third of the bf16 outputs are not correctly rounded (a tenth at 128).
    Acc part[kAcc];
#pragma unroll
    for (int j = 0; j < kAcc; ++j) part[j] = Acc(0);
    if constexpr (Cfg::kBlockScaled) scales.start(kb_count);
    for (int i = 0; i < kb_count; ++i) {
      sm90::fence_regs(part);
      issue(i, part, false);
      float sc[Scales::kValues];  // block-scaled: block i's scales
      if constexpr (Cfg::kBlockScaled) scales.take(i, kb_count, sc);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(part);
      release(i);
      if constexpr (Cfg::kBlockScaled) {
#pragma unroll
        for (int j = 0; j < kAcc; ++j)
          acc[j] = fmaf(part[j], sc[block_scale_slot<Cfg::kSwapAB, kAccPerMma, kScalePairs>(j)], acc[j]);
      } else {
#pragma unroll
        for (int j = 0; j < kAcc; ++j) acc[j] += part[j];
      }
    }
  }
}

}  // namespace fg
#endif  // FG_NVIDIA
