// Entry points of quantize_rows: fg_quantize_rows_<in>_<out>_<path>, in = f32 | bf16 | f16, out = e4m3fn |
// e4m3fnuz | i8, path = v16 (16-byte packs; the host checked the alignment) | e1 (one element at a time).
// Every arch builds every output type: which fp8 variant a GEMM reads is the caller's business (quantize.py
// picks the device's). runtime/kernels.py (QUANTIZE_ROWS) packs the arguments in this order; a CPU test checks
// it against each code object's metadata.
#include "include/fusedgemm/quantize_rows.hpp"

// NVIDIA: with the block size alone ptxas held one kernel (f32 -> e4m3fnuz) at 64 registers and spilled 4
// bytes; naming one resident block lets it take the 72 it needs (<= 128 at 512 threads).
#if defined(FG_NVIDIA)
#define FG_QUANTIZE_ROWS_BOUNDS __launch_bounds__(fg::kQuantMaxThreads, 1)
#else
#define FG_QUANTIZE_ROWS_BOUNDS __launch_bounds__(fg::kQuantMaxThreads)
#endif

#define FG_QUANTIZE_ROWS_ENTRY(IN_NAME, IN, OUT_NAME, OUT, PATH_NAME, VECTOR)                                   \
  extern "C" __global__ void FG_QUANTIZE_ROWS_BOUNDS                                                            \
      fg_quantize_rows_##IN_NAME##_##OUT_NAME##_##PATH_NAME(const void* x, long long ld, void* q, float* scale, \
                                                            int M, int K, int blocks) {                        \
    fg::quantize_rows_block<IN, OUT, VECTOR>(static_cast<const typename IN::Storage*>(x), ld,                  \
                                             static_cast<fg::u8*>(q), scale, M, K, blocks);                            \
  }

#define FG_QUANTIZE_ROWS_OUTS(IN_NAME, IN, PATH_NAME, VECTOR)                                   \
  FG_QUANTIZE_ROWS_ENTRY(IN_NAME, IN, e4m3fn, fg::QuantFp8E4M3Fn, PATH_NAME, VECTOR)           \
  FG_QUANTIZE_ROWS_ENTRY(IN_NAME, IN, e4m3fnuz, fg::QuantFp8E4M3Fnuz, PATH_NAME, VECTOR)       \
  FG_QUANTIZE_ROWS_ENTRY(IN_NAME, IN, i8, fg::QuantInt8, PATH_NAME, VECTOR)

#define FG_QUANTIZE_ROWS_PATHS(IN_NAME, IN)          \
  FG_QUANTIZE_ROWS_OUTS(IN_NAME, IN, v16, true)      \
  FG_QUANTIZE_ROWS_OUTS(IN_NAME, IN, e1, false)

FG_QUANTIZE_ROWS_PATHS(f32, fg::QuantInF32)
FG_QUANTIZE_ROWS_PATHS(bf16, fg::QuantInBf16)
FG_QUANTIZE_ROWS_PATHS(f16, fg::QuantInF16)
