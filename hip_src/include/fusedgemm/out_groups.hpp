// Group-quantised outputs (gemm_a8's out_group=128): the epilogue's fp32 values y of each row are quantised per
// group of kOutGroup consecutive columns, with quantize_rows' rule (quantize_rows.hpp) applied to every group:
//
//   scale[m, g] = fl32(max_{n in g} |y[m, n]| / kMax)   (1 for an all-zero group, at least 2^-126; NaN propagates)
//   code[m, n]  = round(fl32(y[m, n] * fl32(1 / scale[m, g])))   nearest even, saturating at +-kMax
//
// so a GEMM that writes the next layer's DeepSeek-style 1x128 block-quantised input returns what
// quantize_rows(y, group=128) of its fp32 output would, in one kernel. The epilogue functor of such a call
// (epilogue/codegen.py, EpilogueSpec.out_group) declares kOutGroup and gives the two stores: store_code (one code
// from y and the group's 1 / scale) and store_scale. A kernel template that holds whole groups in one block
// reduces each row's |y| over its group and calls them (cdna_gemm.hpp: the group is the block's 128 columns).
#pragma once
#include "quantize_rows.hpp"

namespace fg {

// An epilogue functor's group width: its kOutGroup, 0 for a functor that writes plain outputs.
template <class Epi, class = void>
struct OutGroupOf {
  static constexpr int value = 0;
};
template <class Epi>
struct OutGroupOf<Epi, decltype(void(Epi::kOutGroup))> {
  static constexpr int value = Epi::kOutGroup;
};

// The code type (kMax) of a group-quantised output type.
template <class Out>
struct QuantCodesOf;
template <>
struct QuantCodesOf<OutFp8E4M3Fn> {
  using type = QuantFp8E4M3Fn;
};
template <>
struct QuantCodesOf<OutFp8E4M3Fnuz> {
  using type = QuantFp8E4M3Fnuz;
};

#if defined(FG_NVIDIA) || defined(__gfx942__) || defined(__gfx950__)
// The maximum of `key` (|y| as ordered bits, quant::abs_bits: NaN above inf) over the kLanes consecutive lanes (a
// power of two, aligned) that hold one row's values of a group: xor shuffles, every lane of the warp / wave takes part.
template <int kLanes>
FG_DEVICE u32 lanes_max(u32 key) {
#pragma unroll
  for (int mask = 1; mask < kLanes; mask *= 2)
    key = quant::max_u32(key, float_to_bits(arch::shfl_xor(bits_to_float(key), mask)));
  return key;
}
#endif

}  // namespace fg
