// bmm_tiny: C[b] = A[b] @ B[b] for many tiny matrices (m, n, k <= 64), fp32 accumulation, one launch.
//
// A block holds `elems` batch elements (blockDim.x >= elems * tx * ty, at most 256 threads). For each, A (stored transposed, [k][m_pad]) and B ([k][n_pad]) are
// staged in shared memory as fp32; a tile of ty x tx threads computes it, each thread an R x R register
// micro-tile, so every shared-memory read feeds R multiply-adds. Inputs may have any strides (transposed
// views, a broadcast B with batch stride 0), so no copy is ever needed on the host.
// Host side (pkg/fusedgemm/bmm.py) picks R, tx, ty, elems and the dynamic shared-memory size.
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

  // Stage: As[e][kk][r] = A[first+e][r][kk] (zero padding for r >= m), Bs[e][kk][col] likewise.
  for (int idx = tid; idx < count * k * m_pad; idx += nthreads) {
    const int e = idx / (k * m_pad);
    const int rem = idx - e * k * m_pad;
    const int kk = rem / m_pad;
    const int r = rem - kk * m_pad;
    smem[e * per_elem + rem] = r < m ? T::to_float(a[(first + e) * sab + static_cast<i64>(r) * sam + kk * sak]) : 0.f;
  }
  for (int idx = tid; idx < count * k * n_pad; idx += nthreads) {
    const int e = idx / (k * n_pad);
    const int rem = idx - e * k * n_pad;
    const int kk = rem / n_pad;
    const int col = rem - kk * n_pad;
    smem[e * per_elem + k * m_pad + rem] =
        col < n ? T::to_float(b[(first + e) * sbb + static_cast<i64>(kk) * sbk + col * sbn]) : 0.f;
  }
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
