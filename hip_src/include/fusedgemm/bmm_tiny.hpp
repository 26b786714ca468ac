// bmm_tiny: C[b] = A[b] @ B[b] for many tiny matrices (m, n, k <= 64), fp32 accumulation, one launch.
//
// A block holds `elems` batch elements (blockDim.x >= elems * tx * ty, at most 256 threads). For each, A
// ([m_pad][k]) and B ([k][n_pad]; once per block when broadcast) are staged in shared memory as fp32; a tile of ty x tx threads computes it, each thread an R x R register
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

constexpr int kStageLoadsInFlight = 16;  // global loads each thread issues before storing any

// Copy X[first + e][i][j] (i < rows, j < cols; element address e * s_batch + i * s_i + j * s_j) into
// smem[e * per_elem + i * ld + j] as fp32, for e < count (rows x ld per element, ld >= cols).
// Fast path, the common one: contiguous row-major matrices packed back to back (and ld == cols) are one
// flat copy of count * rows * cols values, no index math. Otherwise iterate in the order of the smaller
// global stride so a warp's loads coalesce (a transposed view is read along its contiguous dimension).
// Either way each thread keeps kStageLoadsInFlight loads outstanding: staging is latency-bound otherwise.
template <class T>
FG_DEVICE void stage_matrix(const typename T::Storage* __restrict__ src, i64 s_batch, int s_i, int s_j, int first,
                            int count, int rows, int cols, float* smem, int per_elem, int ld) {
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  const int per = rows * cols;
  const int total = count * per;
  const bool flat = s_j == 1 && s_i == cols && ld == cols && per_elem == per && (count == 1 || s_batch == per);
  const bool j_fastest = (s_j < 0 ? -s_j : s_j) <= (s_i < 0 ? -s_i : s_i);
  const int inner = j_fastest ? cols : rows;
  const typename T::Storage* x0 = src + first * s_batch;
  for (int base = tid; base < total; base += nthreads * kStageLoadsInFlight) {
    float v[kStageLoadsInFlight];
    int dst[kStageLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kStageLoadsInFlight; ++u) {
      const int idx = base + u * nthreads;
      dst[u] = -1;
      if (idx < total) {
        if (flat) {
          v[u] = T::to_float(x0[idx]);
          dst[u] = idx;
        } else {
          const int e = idx / per;
          const int rem = idx - e * per;
          const int outer_i = rem / inner;
          const int inner_i = rem - outer_i * inner;
          const int i = j_fastest ? outer_i : inner_i;
          const int j = j_fastest ? inner_i : outer_i;
          v[u] = T::to_float(x0[e * s_batch + static_cast<i64>(i) * s_i + static_cast<i64>(j) * s_j]);
          dst[u] = e * per_elem + i * ld + j;
        }
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
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  const int first = static_cast<int>(blockIdx.x) * elems;
  const int count = (batch - first) < elems ? (batch - first) : elems;
  const int b_count = sbb == 0 ? 1 : count;  // a broadcast B is staged once per block
  // Shared memory: As[elems][m_pad][k] (row-major, like A), then Bs[elems or 1][k][n_pad].
  float* As = smem;
  float* Bs = smem + elems * m_pad * k;

  // Zero the padding (rows m..m_pad of As, columns n..n_pad of Bs): micro-tiles read it, results are dropped.
  if (m_pad != m)
    for (int idx = tid; idx < count * (m_pad - m) * k; idx += nthreads) {
      const int e = idx / ((m_pad - m) * k);
      As[e * m_pad * k + m * k + (idx - e * (m_pad - m) * k)] = 0.f;
    }
  if (n_pad != n)
    for (int idx = tid; idx < b_count * k * (n_pad - n); idx += nthreads) {
      const int row = idx / (n_pad - n);  // over all staged elements: row = e * k + kk
      Bs[row * n_pad + n + (idx - row * (n_pad - n))] = 0.f;
    }
  stage_matrix<T>(a, sab, sam, sak, first, count, m, k, As, m_pad * k, k);
  stage_matrix<T>(b, sbb, sbk, sbn, first, b_count, k, n, Bs, k * n_pad, n_pad);
  __syncthreads();

  const int threads_per_elem = tx * ty;
  const int e = tid / threads_per_elem;
  if (e >= count) return;  // after the only barrier
  const int t = tid - e * threads_per_elem;
  const int r0 = (t / tx) * R;
  const int c0 = (t % tx) * R;
  const float* Ae = As + e * m_pad * k + r0 * k;
  const float* Be = Bs + (sbb == 0 ? 0 : e) * k * n_pad + c0;

  float acc[R][R];
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < R; ++j) acc[i][j] = 0.f;
#pragma unroll 2
  for (int kk = 0; kk < k; ++kk) {
    float av[R], bv[R];
#pragma unroll
    for (int i = 0; i < R; ++i) av[i] = Ae[i * k + kk];
#pragma unroll
    for (int j = 0; j < R; ++j) bv[j] = Be[kk * n_pad + j];
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
