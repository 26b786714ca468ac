// anchor_blockscaled.cu -- the fp8block kind of the CUTLASS anchor (see anchor.cu, anchor_common.h):
// DeepSeek-V3-style block-scaled fp8 GEMM with the scales applied in the mainloop.
//
//   D[M,N] (bf16) = epi( sum_kb SA[m,kb] * SB[n/128,kb] * (X8[m, kb*128:+128] . W8[n, kb*128:+128]) )
//   X8 [M,K] e4m3 row-major, W8 [N,K] e4m3 row-major (nn.Linear weight)
//   SA [M, ceil(K/128)]            fp32 row-major: one scale per 1x128 block of X8
//   SB [ceil(N/128), ceil(K/128)]  fp32 row-major: one scale per 128x128 block of W8
//   epi: silu_bias = silu(v + bias[n]) (LinCombPerColBiasEltAct<SiLu>), none = bf16(v) (LinearCombination)
//
// The mainloop is CUTLASS's sm90 blockwise-scaling collective (example 67,
// sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp; schedules
// KernelTmaWarpSpecialized{Cooperative,Pingpong}FP8Blockwise). Each 128-deep k tile is accumulated by
// the fp8 wgmmas into a temporary fp32 fragment which is then multiplied by SA*SB and added into the
// main accumulator (promotion every k tile), so the epilogue only sees the fully scaled sum.
//
// Scale layouts: CUTLASS describes SFA/SFB as cute layouts ((granMN, restMN), (granK, restK), L) whose
// granule modes have stride 0 (cutlass::detail::Sm90BlockwiseScaleConfig). Both operands here are
// declared K-major, i.e. the k-block index is the contiguous one -- exactly our row-major SA and SB, so
// CUTLASS reads fusedgemm's scale tensors as they are, no transposed copy. (Example 67's groupwise
// variant declares SFA M-major, [ceil(K/128), M]; with K-major SFA the collective loads the scales with
// cp.async from a producer warp instead of TMA -- IsTmaLoadSFA is false -- which is what the timed
// kernels here do.)
#include "anchor_common.h"

#if ANCHOR_HAS_KERNELS

#include "cute/tensor.hpp"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace anchor {
namespace blockscaled {

using namespace cute;
using bf16 = cutlass::bfloat16_t;
using e4m3 = cutlass::float_e4m3_t;

// 1 (M) x 128 (K) for SFA, 128 (N) x 128 (K) for SFB; both K-major (= row-major [rows, ceil(K/128)]).
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kScaleBlock, kScaleBlock, cute::GMMA::Major::K,
                                                               cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// ---- epilogue: the scales are already in the accumulator, so only bias + SiLU remain ---------------
template <Epi E> struct Fusion;

// D = silu(alpha*acc + bias[n]), alpha = 1; C void (no beta*C term). Same op as the bf16 kind.
template <> struct Fusion<Epi::SiluBias> {
  using Op = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<
      cutlass::epilogue::thread::SiLu, bf16 /*D*/, float /*compute*/, bf16 /*bias*/, void /*C*/, float /*scalar*/>;
  template <class Args> static void fill(Args& t, RunCtx const& c) {
    t.alpha = 1.0f;
    t.beta = 0.0f;
    t.bias_ptr = static_cast<bf16 const*>(c.bias);
  }
};

// D = bf16(acc).
template <> struct Fusion<Epi::None> {
  using Op = cutlass::epilogue::fusion::LinearCombination<bf16, float, void, float>;
  template <class Args> static void fill(Args& t, RunCtx const&) {
    t.alpha = 1.0f;
    t.beta = 0.0f;
  }
};

// ---- kernel assembly (example 67 with our operand layouts) -----------------------------------------
template <class D> struct GemmFor {
  static_assert(D::kind == Kind::FP8Block, "anchor_blockscaled.cu builds the fp8block kind only");
  static_assert(D::tk == kScaleBlock, "the k tile must equal the 128-wide scale block");
  using ElementAB = e4m3;
  using ElementD = bf16;
  using ElementAcc = float;  // also the block-scale element type (the collective requires it)
  using ElementCompute = float;
  using LayoutA = cutlass::layout::RowMajor;     // X [M,K], K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // W [N,K], K contiguous
  using LayoutD = cutlass::layout::RowMajor;     // D [M,N], N contiguous
  static constexpr int AlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;
  static constexpr int AlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using TileShape = Shape<Int<D::tm>, Int<D::tn>, Int<D::tk>>;
  using ClusterShape = Shape<Int<D::cm>, Int<D::cn>, _1>;
  static constexpr bool kPingpong = D::sched == Sched::Pingpong;
  using KernelSchedule = cute::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise,
                                             cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>;
  using EpilogueSchedule = cute::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                               cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using FusionT = Fusion<D::epi>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute,
      void, LayoutD, AlignD,       // C: none
      ElementD, LayoutD, AlignD,   // D
      EpilogueSchedule, typename FusionT::Op>::CollectiveOp;

  // The builder takes (operand layout, scale layout) pairs for A and B.
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      ElementAB, cute::tuple<LayoutA, LayoutSFA>, AlignAB,
      ElementAB, cute::tuple<LayoutB, LayoutSFB>, AlignAB,
      ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

template <class D> struct Runner {
  static int run(RunCtx& c) {
    using G = GemmFor<D>;
    using Gemm = typename G::Gemm;
    using GemmKernel = typename G::GemmKernel;
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideC = typename GemmKernel::StrideC;
    using StrideD = typename GemmKernel::StrideD;

    auto mnkl = cute::make_shape(c.M, c.N, c.K, 1);
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {c.M, c.N, c.K, 1};
    args.mainloop.ptr_A = static_cast<e4m3 const*>(c.A);
    args.mainloop.dA = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(c.M, c.K, 1));
    args.mainloop.ptr_B = static_cast<e4m3 const*>(c.B);
    args.mainloop.dB = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(c.N, c.K, 1));
    // SA[m,kb] at m*ceil(K/128) + kb, SB[nb,kb] at nb*ceil(K/128) + kb (K-major scale layouts).
    args.mainloop.ptr_SFA = c.scale_a;
    args.mainloop.layout_SFA = ScaleConfig::tile_atom_to_shape_SFA(mnkl);
    args.mainloop.ptr_SFB = c.scale_b;
    args.mainloop.layout_SFB = ScaleConfig::tile_atom_to_shape_SFB(mnkl);
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(c.M, c.N, 1));
    args.epilogue.ptr_D = static_cast<bf16*>(c.D);
    args.epilogue.dD = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(c.M, c.N, 1));
    G::FusionT::fill(args.epilogue.thread, c);
    args.hw_info.device_id = c.device;
    args.hw_info.sm_count = c.sm_count;
    args.scheduler.max_swizzle_size = c.swizzle;
    using RasterOpt = decltype(args.scheduler.raster_order);
    args.scheduler.raster_order = c.raster == 1   ? RasterOpt::AlongM
                                  : c.raster == 2 ? RasterOpt::AlongN
                                                  : RasterOpt::Heuristic;
    return run_gemm<Gemm>(c, args);
  }
};

struct Source {
  static constexpr bool has(Kind k) { return k == Kind::FP8Block; }
};

namespace {
[[maybe_unused]] const int registered =
    anchor_register_all<Source, Runner>(std::make_integer_sequence<int, ANCHOR_NUM_CONFIGS>{});
}

}  // namespace blockscaled
}  // namespace anchor

#endif  // ANCHOR_HAS_KERNELS
