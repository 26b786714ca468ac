// The (input type, output type, preset epilogue) instances every gemm_a8 tile config is compiled for, in one
// place for both entry files (portable_gemm.hip, sm90_gemm.hip). runtime/kernels.py enumerates the same names
// (GEMM_A8_IN x GEMM_A8_OUT x presets.ACTIVATIONS); a CPU test checks every name is in each code object.
//
// FG_GEMM_A8_INSTANCES(ENTRY, CFG_NAME, CFG) expands
//   ENTRY(IN_NAME, IN, OUT_NAME, OUT, EPI_NAME, EPI, CFG_NAME, CFG)      EPI<OUT> is the epilogue functor
// for each instance; ENTRY defines one extern "C" kernel.
#pragma once
#include "epilogue_presets.hpp"

#define FG_GEMM_A8_ACTS_(ENTRY, IN_NAME, IN, OUT_NAME, OUT, CFG_NAME, CFG)                    \
  ENTRY(IN_NAME, IN, OUT_NAME, OUT, none, fg::EpiloguePresetNone, CFG_NAME, CFG)              \
  ENTRY(IN_NAME, IN, OUT_NAME, OUT, relu, fg::EpiloguePresetRelu, CFG_NAME, CFG)              \
  ENTRY(IN_NAME, IN, OUT_NAME, OUT, silu, fg::EpiloguePresetSilu, CFG_NAME, CFG)              \
  ENTRY(IN_NAME, IN, OUT_NAME, OUT, gelu, fg::EpiloguePresetGelu, CFG_NAME, CFG)              \
  ENTRY(IN_NAME, IN, OUT_NAME, OUT, gelu_erf, fg::EpiloguePresetGeluErf, CFG_NAME, CFG)

#define FG_GEMM_A8_OUTS_(ENTRY, IN_NAME, IN, CFG_NAME, CFG)                   \
  FG_GEMM_A8_ACTS_(ENTRY, IN_NAME, IN, bf16, fg::OutBf16, CFG_NAME, CFG) \
  FG_GEMM_A8_ACTS_(ENTRY, IN_NAME, IN, f16, fg::OutF16, CFG_NAME, CFG)

#define FG_GEMM_A8_INSTANCES(ENTRY, CFG_NAME, CFG)          \
  FG_GEMM_A8_OUTS_(ENTRY, fp8, fg::Fp8E4M3, CFG_NAME, CFG) \
  FG_GEMM_A8_OUTS_(ENTRY, i8, fg::Int8, CFG_NAME, CFG)
