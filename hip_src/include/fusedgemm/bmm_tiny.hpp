// bmm_tiny: C[b] = A[b] @ B[b] for many tiny matrices (m, n, k <= 64), fp32 accumulation, one launch.
//
// A block holds `elems` batch elements (blockDim.x >= elems * tx * ty, at most 256 threads). For each, A (stored transposed, [k][m_pad]) and B ([k][n_pad]) are
// staged in shared memory as fp32; a tile of ty x tx threads computes it, each thread an R x R register
// micro-tile, so every shared-memory read feeds R multiply-adds. Inputs may have any strides (transposed
// views, a broadcast B with batch stride 0), so no copy is ever needed on the host.
// Host side (pkg/fusedgemm/tiny_gemm.py) picks R, tx, ty, elems and the dynamic shared-memory size.
#pragma once
#include "arch/select.hpp"
#include "epilogue.hpp"

namespace fg {

struct InF32 {
  using Storage = float;
  FG_DEVICE static float to_float(float v) { return v; }
  FG_DEVICE static float from_float(float v) { return v; }
};
struct InBf16 {
  using Storage = u16;
  FG_DEVICE static float to_float(u16 v) { return bits_to_float(static_cast<u32>(v) << 16); }
  FG_DEVICE static u16 from_float(float v) { return arch::float_to_bf16_bits(v); }
};
struct InF16 {
  using Storage = u16;
  FG_DEVICE static float to_float(u16 v) { return arch::half_bits_to_float(v); }
  FG_DEVICE static u16 from_float(float v) { return arch::float_to_half_bits(v); }
};

constexpr int kBmmTinyMaxThreads = 256;

constexpr int kStageLoadsInFlight = 8;  // global loads each thread issues before storing any

// Copy X[first + e][i][j] (i < rows, j < cols; element address e * s_batch + i * s_i + j * s_j) into
// smem[e * per_elem + i * d_i + j * d_j] as fp32, for e < count. Iterates in the order of the smaller
// global stride so a warp's loads coalesce (a transposed view is read along its contiguous dimension), and
// keeps kStageLoadsInFlight loads outstanding per thread: staging is latency-bound otherwise.
template <class T>
FG_DEVICE void stage_matrix(const typename T::Storage* __restrict__ src, i64 s_batch, int s_i, int s_j, int first,
                            int count, int rows, int cols, float* smem, int per_elem, int d_i, int d_j) {
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  const bool j_fastest = (s_j < 0 ? -s_j : s_j) <= (s_i < 0 ? -s_i : s_i);
  const int inner = j_fastest ? cols : rows;
  const int per = rows * cols;
  const int total = count * per;
  for (int base = tid; base < total; base += nthreads * kStageLoadsInFlight) {
    float v[kStageLoadsInFlight];
    int dst[kStageLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kStageLoadsInFlight; ++u) {
      const int idx = base + u * nthreads;
      dst[u] = -1;
      if (idx < total) {
        const int e = idx / per;
        const int rem = idx - e * per;
        const int outer_i = rem / inner;
        const int inner_i = rem - outer_i * inner;
        const int i = j_fastest ? outer_i : inner_i;
        const int j = j_fastest ? inner_i : outer_i;
        v[u] = T::to_float(src[(first + e) * s_batch + static_cast<i64>(i) * s_i + static_cast<i64>(j) * s_j]);
        dst[u] = e * per_elem + i * d_i + j * d_j;
      }
    }
#pragma unroll
    for (int u = 0; u < kStageLoadsInFlight; ++u)
      if (dst[u] >= 0) smem[dst[u]] = v[u];
  }
}

template <class T, int R>
FG_DEVICE void bmm_tiny_block(const typename T::Storage* __restrict__ a,  // [batch, m, k], strides below
                              const typename T::Storage* __restrict__ b,  // [batch or 1, k, n]
                              typename T::Storage* __restrict__ c,        // [batch, m, n] contiguous
                              int batch, int m, int n, int k, i64 sab, int sam, int sak, i64 sbb, int sbk,
                              int sbn, int tx, int ty, int elems, float* smem) {
  const int m_pad = ty * R;
  const int n_pad = tx * R;
  const int per_elem = k * (m_pad + n_pad);
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  const int first = static_cast<int>(blockIdx.x) * elems;
  const int count = (batch - first) < elems ? (batch - first) : elems;

  // Zero the padding rows of As and columns of Bs (the micro-tiles read them; results there are dropped).
  if (m_pad != m || n_pad != n) {
    for (int idx = tid; idx < count * per_elem; idx += nthreads) smem[idx] = 0.f;
    __syncthreads();
  }
  // As[e][kk][r] = A[first+e][r][kk]  (transposed: a thread's R rows are contiguous);  Bs[e][kk][col].
  stage_matrix<T>(a, sab, sam, sak, first, count, m, k, smem, per_elem, 1, m_pad);
  stage_matrix<T>(b, sbb, sbk, sbn, first, count, k, n, smem + k * m_pad, per_elem, n_pad, 1);
  __syncthreads();

  const int threads_per_elem = tx * ty;
  const int e = tid / threads_per_elem;
  if (e >= count) return;  // after the only barrier
  const int t = tid - e * threads_per_elem;
  const int r0 = (t / tx) * R;
  const int c0 = (t % tx) * R;
  const float* As = smem + e * per_elem;
  const float* Bs = As + k * m_pad;

  float acc[R][R];
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < R; ++j) acc[i][j] = 0.f;
  for (int kk = 0; kk < k; ++kk) {
    float av[R], bv[R];
#pragma unroll
    for (int i = 0; i < R; ++i) av[i] = As[kk * m_pad + r0 + i];
#pragma unroll
    for (int j = 0; j < R; ++j) bv[j] = Bs[kk * n_pad + c0 + j];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
      for (int j = 0; j < R; ++j) acc[i][j] += av[i] * bv[j];
  }

  typename T::Storage* ce = c + static_cast<i64>(first + e) * m * n;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (r0 + i >= m) break;
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (c0 + j < n) ce[(r0 + i) * n + c0 + j] = T::from_float(acc[i][j]);
  }
}

}  // namespace fg
