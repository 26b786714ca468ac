// bmm_tiny: C[b] = A[b] @ B[b] for many tiny matrices (m, n, k <= 64), fp32 accumulation, one launch.
//
// The problem is memory-bound (a few FLOP per byte) and latency decides unless every SM keeps tens of KB of
// loads in flight all the time. So:
//  * A block works through groups of `elems` consecutive batch elements, grid-stride (the host sizes the grid
//    to what stays resident). It issues the global loads of its NEXT group into registers before computing
//    the current one, so each block overlaps its own memory traffic with its arithmetic.
//  * Operands move in quads: 4 consecutive values along an operand's contiguous dimension, one 16-byte (f32)
//    or 8-byte (16-bit) load when strides and alignment allow (the host decides: `mode`), 4 scalar loads
//    otherwise, so any strides work (transposed views, a broadcast B with batch stride 0) without a copy.
//    Each thread holds up to kBmmTinyQuads quads in flight.
//  * Shared memory holds A as [a_rows][lda] and B as [k4][ldb] in fp32, k padded with zeros to k4, a multiple
//    of 4. A thread computes an R x R micro-tile, reading A as float4 along k and B as R-wide vectors: per 4
//    steps of k, R + 4 shared-memory reads feed 4 R^2 multiply-adds. lda is padded so that rows R apart fall
//    in different banks.
// Host side (pkg/fusedgemm/tiny_bmm.py::plan_bmm_tiny) picks R, the thread tile (tx, ty), elems, threads,
// the shared-memory layout (lda, ldb, a_elem, b_elem) and the grid.
//
// The f32 cp.async kernels (bmm_tiny_async_block, below) serve the common case where both operands are staged
// with 16-byte quads along their rows (A along k, B along n): copies go global -> shared without registers,
// into a ring of `stages` slots (a group; with the kc knob a k-chunk of one), so a block keeps stages - 1
// slots in flight while it computes one, with one barrier per slot. The register-staged kernel needed 32
// registers for its prefetch and two barriers per group, which held 64^3 to 2 blocks (16 warps) per SM, most of
// them waiting at barriers.
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
constexpr int kBmmTinyMinBlocks = 2;  // NVIDIA __launch_bounds__: <= 128 registers at 256 threads
constexpr int kBmmTinyQuads = 4;      // quads in flight per thread and operand: 2 x 4 x 16 B for f32
constexpr int kBmmTinyMaxStages = 8;  // cp.async ring depth: copy_async_wait handles up to 6 groups pending

// Operand mode bits (tiny_bmm.py::_operand_mode sets them).
constexpr int kAlongJ = 1;  // quads run along j (columns), else along i (rows): whichever has the smaller stride
constexpr int kVector = 2;  // one vector load per quad: stride 1 along the quad, extent % 4 == 0, aligned
constexpr int kDense = 4;   // also rows and elements packed back to back: quad q of a group is at 4 q

template <int N>
struct alignas(4 * N) F32xN {
  float v[N];
};
template <int N>
struct alignas(4 * N) U32xN {
  u32 w[N];
};

// floor(q / d) for 0 <= q < 2^22, given inv_d = 1.f / d: (q + 0.5) / d lies at least 0.5 / d away from an
// integer and the two fp32 roundings move it by less than that, so truncation is exact. A few instructions
// instead of the ~20 of an integer division by a run-time divisor; quad indices here are < 2^13.
FG_DEVICE int div_small(int q, float inv_d) { return static_cast<int>((static_cast<float>(q) + 0.5f) * inv_d); }

// 16 bytes global -> shared. NVIDIA (sm_80+): cp.async.cg, which holds no registers while in flight and skips
// L1 (every byte is read once). AMD: a plain copy through registers, complete when it returns, so the ring
// below stays correct with commit/wait as no-ops (the planner keeps AMD on the register-staged kernels).
FG_DEVICE void copy16_async(float* dst_smem, const float* src) {
#if defined(FG_NVIDIA)
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst_smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
#else
  *reinterpret_cast<F32xN<4>*>(dst_smem) = *reinterpret_cast<const F32xN<4>*>(src);
#endif
}
FG_DEVICE void copy_async_commit() {
#if defined(FG_NVIDIA)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Wait until at most `pending` (0 to 6: stages - 2) of this thread's committed copy groups are still in
// flight. The count is an immediate operand, hence the switch.
FG_DEVICE void copy_async_wait(int pending) {
#if defined(FG_NVIDIA)
  switch (pending) {
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
  }
#endif
}

// One operand as staged: X[e][i][j] (i < rows, j < cols) at src + e * s_batch + i * s_i + j * s_j is copied to
// smem[e * elem + i * ld + j] as fp32. Quads cover the fast dimension (j or i) rounded up to a multiple of 4;
// the values past its end are stored as zeros (they land in padding that the layout reserves).
// Thread tid stages quads tid, tid + nthreads, ... (kBmmTinyQuads of them) of a group of `count` elements.
template <class T>
struct StagedOperand {
  using S = typename T::Storage;
  const S* src;
  i64 s_batch;
  int s_i, s_j, rows, cols, ld, elem, mode;
  int fast_quads, quads;  // quads per fast line, per element
  float inv_fast_quads, inv_quads;

  FG_DEVICE StagedOperand(const S* src_, i64 s_batch_, int s_i_, int s_j_, int rows_, int cols_, int ld_, int elem_,
                          int mode_)
      : src(src_), s_batch(s_batch_), s_i(s_i_), s_j(s_j_), rows(rows_), cols(cols_), ld(ld_), elem(elem_),
        mode(mode_) {
    fast_quads = ((mode & kAlongJ ? cols : rows) + 3) / 4;
    quads = fast_quads * (mode & kAlongJ ? rows : cols);
    inv_fast_quads = 1.f / static_cast<float>(fast_quads);
    inv_quads = 1.f / static_cast<float>(quads);
  }

  struct Pos {
    int e, i, j;
  };
  FG_DEVICE Pos locate(int q) const {  // quad q of a group -> element, row, column of its first value
    const int e = div_small(q, inv_quads);
    const int r = q - e * quads;
    const int slow = div_small(r, inv_fast_quads);
    const int fast = (r - slow * fast_quads) * 4;
    return mode & kAlongJ ? Pos{e, slow, fast} : Pos{e, fast, slow};
  }

  // Raw bits only: nothing reads these registers until the group is stored to shared memory, so while the
  // previous group is computed nobody waits for the loads.
  FG_DEVICE void load(int first, int count, u32 (&raw)[kBmmTinyQuads][4]) const {
    const int tid = static_cast<int>(threadIdx.x), nthreads = static_cast<int>(blockDim.x);
    const S* base = src + static_cast<i64>(first) * s_batch;
#pragma unroll
    for (int u = 0; u < kBmmTinyQuads; ++u) {
      const int q = tid + u * nthreads;
      if (q >= count * quads) break;
      if (mode & kVector) {
        const S* x = base + 4 * q;  // kDense
        if (!(mode & kDense)) {
          const Pos p = locate(q);
          x = base + p.e * s_batch + p.i * s_i + p.j * s_j;
        }
        if constexpr (sizeof(S) == 4) {
          const U32xN<4> v = *reinterpret_cast<const U32xN<4>*>(x);
#pragma unroll
          for (int w = 0; w < 4; ++w) raw[u][w] = v.w[w];
        } else {
          const U32xN<2> v = *reinterpret_cast<const U32xN<2>*>(x);
          raw[u][0] = v.w[0];
          raw[u][1] = v.w[1];
        }
      } else {
        const Pos p = locate(q);
        const S* x = base + p.e * s_batch + p.i * s_i + p.j * s_j;
        const int step = mode & kAlongJ ? s_j : s_i;
        const int left = mode & kAlongJ ? cols - p.j : rows - p.i;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          if constexpr (sizeof(S) == 4)
            raw[u][w] = w < left ? float_to_bits(x[w * step]) : 0u;
          else
            raw[u][w] = w < left ? static_cast<u32>(x[w * step]) : 0u;
        }
      }
    }
  }

  FG_DEVICE void store(int count, const u32 (&raw)[kBmmTinyQuads][4], float* smem) const {
    const int tid = static_cast<int>(threadIdx.x), nthreads = static_cast<int>(blockDim.x);
#pragma unroll
    for (int u = 0; u < kBmmTinyQuads; ++u) {
      const int q = tid + u * nthreads;
      if (q >= count * quads) break;
      const Pos p = locate(q);
      float v[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        if constexpr (sizeof(S) == 4)
          v[w] = bits_to_float(raw[u][w]);
        else  // a vector quad holds two values per word, a scalar quad one
          v[w] = T::to_float(static_cast<u16>(mode & kVector ? raw[u][w / 2] >> (16 * (w % 2)) : raw[u][w]));
      }
      float* d = smem + p.e * elem + p.i * ld + p.j;
      if (mode & kAlongJ) {  // ld, elem and j are multiples of 4: one 16-byte store
        *reinterpret_cast<F32xN<4>*>(d) = F32xN<4>{{v[0], v[1], v[2], v[3]}};
      } else {
#pragma unroll
        for (int w = 0; w < 4; ++w) d[w * ld] = v[w];
      }
    }
  }

  // The cp.async kernels: quads of `count` elements straight into shared memory at `smem`, as many per thread
  // as the group has (no register budget to respect). f32 with kVector and kAlongJ only (the host checks), so
  // every quad is 4 whole values with stride 1 along a row and lands 16-byte aligned (ld, elem multiples of 4).
  // The position (element e, row i, quad jq) of quad q advances by nthreads quads per step with carries
  // instead of a locate() per quad: ~12 instructions per copy rather than ~30 (64^3: 16 copies per thread).
  FG_DEVICE void copy_async(int first, int count, float* smem, int offset) const {  // offset: of a k-chunk
    const int tid = static_cast<int>(threadIdx.x), nthreads = static_cast<int>(blockDim.x);
    const int total = count * quads;
    if (tid >= total) return;
    const Pos p = locate(tid);
    int e = p.e, i = p.i, jq = p.j / 4;
    const int step_i = div_small(nthreads, inv_fast_quads), step_jq = nthreads - step_i * fast_quads;
    const float inv_rows = 1.f / static_cast<float>(rows);
    const S* base = src + static_cast<i64>(first) * s_batch + offset;
    for (int q = tid; q < total; q += nthreads) {
      const S* x = mode & kDense ? base + 4 * q : base + e * s_batch + i * s_i + 4 * jq;
      copy16_async(smem + e * elem + i * ld + 4 * jq, x);
      jq += step_jq;
      i += step_i;
      if (jq >= fast_quads) {
        jq -= fast_quads;
        ++i;
      }
      if (i >= rows) {
        const int de = div_small(i, inv_rows);
        e += de;
        i -= de * rows;
      }
    }
  }
};

// One row of a thread's micro-tile to C: one R-wide store when n % R == 0 and C is aligned (vec), else
// element by element up to `valid` columns.
template <class T, int R>
FG_DEVICE void store_c_row(typename T::Storage* dst, const float (&v)[R], int valid, bool vec) {
  if (vec) {
    if constexpr (sizeof(typename T::Storage) == 4) {
      F32xN<R> x;
#pragma unroll
      for (int j = 0; j < R; ++j) x.v[j] = v[j];
      *reinterpret_cast<F32xN<R>*>(dst) = x;
    } else {
      U32xN<R / 2> x;
#pragma unroll
      for (int j = 0; j < R / 2; ++j)
        x.w[j] = static_cast<u32>(T::from_float(v[2 * j])) | (static_cast<u32>(T::from_float(v[2 * j + 1])) << 16);
      *reinterpret_cast<U32xN<R / 2>*>(dst) = x;
    }
  } else {
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (j < valid) dst[j] = T::from_float(v[j]);
  }
}

// C[e] rows r0..r0+R, columns c0..c0+R of one element from its staged A ([a_rows][lda]) and B ([k4][ldb]).
template <class T, int R>
FG_DEVICE void compute_tile(const float* Ae, const float* Be, int k4, int lda, int ldb, float (&acc)[R][R]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < R; ++j) acc[i][j] = 0.f;
#pragma unroll 1
  for (int kk = 0; kk < k4; kk += 4) {
    F32xN<4> av[R];
#pragma unroll
    for (int i = 0; i < R; ++i) av[i] = *reinterpret_cast<const F32xN<4>*>(Ae + i * lda + kk);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const F32xN<R> bv = *reinterpret_cast<const F32xN<R>*>(Be + (kk + q) * ldb);
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < R; ++j) acc[i][j] += av[i].v[q] * bv.v[j];
    }
  }
}

template <class T, int R>
FG_DEVICE void bmm_tiny_block(const typename T::Storage* __restrict__ a,  // [batch, m, k], strides sab, sam, sak
                              const typename T::Storage* __restrict__ b,  // [batch or 1, k, n], sbb (0: broadcast)
                              typename T::Storage* __restrict__ c,        // [batch, m, n] contiguous
                              int batch, int m, int n, int k, i64 sab, int sam, int sak, i64 sbb, int sbk, int sbn,
                              int a_mode, int b_mode, int tx, int ty, int elems, int lda, int ldb, int a_elem,
                              int b_elem, int num_blocks, float* smem) {
  static_assert(R == 2 || R == 4, "micro-tile R must be 2 or 4: B rows are read as R-wide vectors");
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  const int groups = (batch + elems - 1) / elems;
  int g = static_cast<int>(blockIdx.x);
  if (g >= groups) return;
  const bool bcast = sbb == 0;
  const StagedOperand<T> A(a, sab, sam, sak, m, k, lda, a_elem, a_mode);
  const StagedOperand<T> B(b, sbb, sbk, sbn, k, n, ldb, b_elem, b_mode);
  float* As = smem;                   // [elems][a_rows][lda]
  float* Bs = smem + elems * a_elem;  // [elems, or 1 if broadcast][k4][ldb]
  const int k4 = (k + 3) / 4 * 4;

  // This thread's micro-tile: element e0 (then e0 + e_step, ...) of each group, rows r0.., columns c0...
  const int tpe = tx * ty;
  const int e_step = nthreads / tpe;
  const int e0 = tid / tpe;
  const int t = tid - e0 * tpe;
  const int r0 = (t / tx) * R, c0 = (t - (t / tx) * tx) * R;
  const bool c_vec = n % R == 0 && reinterpret_cast<unsigned long long>(c) % (R * sizeof(*c)) == 0;

  u32 raw_a[kBmmTinyQuads][4], raw_b[kBmmTinyQuads][4];
  if (!bcast) {  // the first group's loads are in flight while shared memory is zeroed
    A.load(g * elems, imin(elems, batch - g * elems), raw_a);
    B.load(g * elems, imin(elems, batch - g * elems), raw_b);
  }
  // Zero everything once: the padding (A columns k..k4, B rows k..k4, rows and columns past m and n) is never
  // written again, so micro-tiles read finite zeros there and NaN/Inf propagate exactly as in torch.bmm.
  const int smem_floats = elems * a_elem + (bcast ? 1 : elems) * b_elem;
  for (int i = tid * 4; i < smem_floats; i += nthreads * 4)
    *reinterpret_cast<F32xN<4>*>(smem + i) = F32xN<4>{{0.f, 0.f, 0.f, 0.f}};
  __syncthreads();
  if (bcast) {  // B once per block, in slices of whole quad lines (rows if kAlongJ, else columns)
    const bool bj = b_mode & kAlongJ;
    const int lines = bj ? k : n;
    const int per_slice = imin(lines, kBmmTinyQuads * nthreads / B.fast_quads);
    for (int l = 0; l < lines; l += per_slice) {
      const int ll = imin(per_slice, lines - l);
      const StagedOperand<T> slice(b + l * (bj ? sbk : sbn), 0, sbk, sbn, bj ? ll : k, bj ? n : ll, ldb, 0, b_mode);
      slice.load(0, 1, raw_b);
      slice.store(1, raw_b, Bs + l * (bj ? ldb : 1));
    }
    A.load(g * elems, imin(elems, batch - g * elems), raw_a);
  }

  for (;;) {
    const int first = g * elems;
    const int count = imin(elems, batch - first);
    A.store(count, raw_a, As);
    if (!bcast) B.store(count, raw_b, Bs);
    __syncthreads();
    const int next = g + num_blocks;
    if (next < groups) {
      A.load(next * elems, imin(elems, batch - next * elems), raw_a);
      if (!bcast) B.load(next * elems, imin(elems, batch - next * elems), raw_b);
    }

    if (e0 < e_step) {  // threads past the last whole element tile only stage
      for (int e = e0; e < count; e += e_step) {
        float acc[R][R];
        compute_tile<T, R>(As + e * a_elem + r0 * lda, Bs + (bcast ? 0 : e * b_elem) + c0, k4, lda, ldb, acc);
        typename T::Storage* ce = c + static_cast<i64>(first + e) * m * n + c0;
#pragma unroll
        for (int i = 0; i < R; ++i)
          if (r0 + i < m) store_c_row<T, R>(ce + (r0 + i) * n, acc[i], n - c0, c_vec);
      }
    }
    g = next;
    if (g >= groups) break;
    __syncthreads();  // everyone is done reading this group before the next one overwrites it
  }
}

// Adds to C rows tr + i ty (i < RM), columns 4 (tc + q tx) .. + 3 (q < RN / 4) of one element the products
// over kc values of k, from its staged A ([a_rows][lda], Ae at row tr) and B ([kc][ldb], Be at column 4 tc).
// Rows and column quads are interleaved rather than contiguous so that a warp's A reads hit adjacent rows
// (lda = 4 mod 8: different banks) and its B reads adjacent 16-byte quads: one shared-memory wavefront per
// 8 distinct quads, no bank conflicts. Per 4 steps of k, RM + RN / 4 x 4 float4 reads feed 4 RM RN
// multiply-adds (4 x 8: 12 reads per 128 FFMA). TX > 0 fixes tx (and ldb = TX RN) at compile time: the B
// offsets become immediates and, with k unrolled by 4, so do the A offsets; at run-time tx the address
// arithmetic was ~50 instructions per 128 FFMA, and issue slots the bound.
template <int RM, int RN, int TX>
FG_DEVICE void mac_tile_interleaved(const float* Ae, const float* Be, int kc, int lda, int ldb_rt, int ty,
                                    int tx_rt, float (&acc)[RM][RN]) {
  const int tx = TX > 0 ? TX : tx_rt;
  const int ldb = TX > 0 ? TX * RN : ldb_rt;
#pragma unroll 4
  for (int kk = 0; kk < kc; kk += 4) {
    F32xN<4> av[RM];
#pragma unroll
    for (int i = 0; i < RM; ++i) av[i] = *reinterpret_cast<const F32xN<4>*>(Ae + i * ty * lda + kk);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      F32xN<4> bv[RN / 4];
#pragma unroll
      for (int q = 0; q < RN / 4; ++q) bv[q] = *reinterpret_cast<const F32xN<4>*>(Be + (kk + s) * ldb + 4 * q * tx);
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int q = 0; q < RN / 4; ++q)
#pragma unroll
          for (int w = 0; w < 4; ++w) acc[i][4 * q + w] += av[i].v[s] * bv[q].v[w];
    }
  }
}

// The f32 cp.async kernel. Preconditions (tiny_bmm.py::_async_ok, _plan_async): A has kVector | kAlongJ
// (k % 4 == 0, stride 1 along k, aligned); B too, or is broadcast (sbb == 0, any strides: staged once through
// registers); kc divides k, kc % 4 == 0, and if kc < k every element of a group has its own threads
// (elems * tx * ty <= threads: the accumulators stay in registers across chunks).
// Work items: chunk c (k in [c kc, (c + 1) kc)) of the block's groups, in order; item w sits in ring slot
// w % stages: [elems][a_elem] A chunk ([a_rows][lda]) then [elems][b_elem] B chunk ([kc][ldb], left out when
// broadcast); after the ring the broadcast B [k][ldb]. Chunks (kc < k, a planner knob) fit more blocks per SM
// in less shared memory, but cost a barrier and a copy round per chunk, which loses at 64^3, so
// the default plans have one chunk (kc = k).
// Nothing is zeroed: k needs no padding (k % 4 == 0), and the rows past m in A and columns past n in B only
// feed outputs that are never stored.
template <int RM, int RN, int TX>
FG_DEVICE void bmm_tiny_async_block(const float* __restrict__ a,  // [batch, m, k], strides sab, sam, 1
                                    const float* __restrict__ b,  // [batch or 1, k, n], sbb (0: broadcast)
                                    float* __restrict__ c,        // [batch, m, n] contiguous
                                    int batch, int m, int n, int k, i64 sab, int sam, int sak,
                                    i64 sbb, int sbk, int sbn, int a_mode, int b_mode, int tx, int ty, int elems,
                                    int lda, int ldb, int a_elem, int b_elem, int num_blocks, int stages, int kc,
                                    float* smem) {
  static_assert(RN % 4 == 0, "columns are read from B as 16-byte quads");
  (void)sak;  // 1: kVector along k
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  const int groups = (batch + elems - 1) / elems;
  const int g0 = static_cast<int>(blockIdx.x);
  if (g0 >= groups) return;
  const bool bcast = sbb == 0;
  const int chunks = k / kc;
  // Chunks of an element are not packed back to back: the kDense shortcut (quad q at 4 q) holds only whole.
  const int a_chunk_mode = chunks > 1 ? a_mode & ~kDense : a_mode;
  const int b_chunk_mode = chunks > 1 ? b_mode & ~kDense : b_mode;
  const int slot_floats = elems * (a_elem + (bcast ? 0 : b_elem));
  float* Bc = smem + stages * slot_floats;  // broadcast B
  const StagedOperand<InF32> Ak(a, sab, sam, 1, m, kc, lda, a_elem, a_chunk_mode);  // chunk 0 of A; c at + c kc
  const StagedOperand<InF32> Bk(b, sbb, sbk, 1, kc, n, ldb, b_elem, b_chunk_mode);  // ... of B; at + c kc sbk

  // Copies of work item w (group g0 + (w / chunks) num_blocks, chunk w % chunks) into its slot, as one commit
  // group (empty past the end: every iteration then waits on the same count).
  auto issue = [&](int w) {
    const int it = chunks == 1 ? w : w / chunks, ch = w - it * chunks;
    const int grp = g0 + it * num_blocks;
    if (grp < groups) {
      const int first = grp * elems, count = imin(elems, batch - first);
      float* st = smem + (w % stages) * slot_floats;
      Ak.copy_async(first, count, st, ch * kc);
      if (!bcast) Bk.copy_async(first, count, st + elems * a_elem, ch * kc * sbk);
    }
    copy_async_commit();
  };
  for (int w = 0; w + 1 < stages; ++w) issue(w);
  if (bcast) {  // B once per block, as the register-staged kernel does; the loop's first barrier publishes it
    const StagedOperand<InF32> B(b, sbb, sbk, sbn, k, n, ldb, k * ldb, b_mode);
    u32 raw_b[kBmmTinyQuads][4];
    const bool bj = b_mode & kAlongJ;
    const int lines = bj ? k : n;
    const int per_slice = imin(lines, kBmmTinyQuads * nthreads / B.fast_quads);
    for (int l = 0; l < lines; l += per_slice) {
      const int ll = imin(per_slice, lines - l);
      const StagedOperand<InF32> slice(b + l * (bj ? sbk : sbn), 0, sbk, sbn, bj ? ll : k, bj ? n : ll, ldb, 0,
                                       b_mode);
      slice.load(0, 1, raw_b);
      slice.store(1, raw_b, Bc + l * (bj ? ldb : 1));
    }
  }

  // This thread's tile: element e0 (then e0 + e_step, ...) of each group, row tr, column quad tc.
  const int tpe = tx * ty;
  const int e_step = nthreads / tpe;
  const int e0 = tid / tpe;
  const int t = tid - e0 * tpe;
  const int tr = t / tx, tc = t - (t / tx) * tx;
  const bool c_vec = n % 4 == 0 && reinterpret_cast<unsigned long long>(c) % 16 == 0;
  float acc[RM][RN];

  for (int w = 0, grp = g0; grp < groups; grp += num_blocks) {
    const int first = grp * elems;
    const int count = imin(elems, batch - first);
    for (int ch = 0; ch < chunks; ++ch, ++w) {
      copy_async_wait(stages - 2);  // this thread's copies of item w have landed
      __syncthreads();              // everyone's have, and everyone is done with the slot refilled next
      issue(w + stages - 1);
      const float* st = smem + (w % stages) * slot_floats;
      // Threads past the last whole element tile only copy. With chunks > 1 this loop runs at most once.
      for (int e = e0; e < count && e0 < e_step; e += e_step) {
        if (ch == 0) {
#pragma unroll
          for (int i = 0; i < RM; ++i)
#pragma unroll
            for (int j = 0; j < RN; ++j) acc[i][j] = 0.f;
        }
        mac_tile_interleaved<RM, RN, TX>(st + e * a_elem + tr * lda,
                                         (bcast ? Bc + ch * kc * ldb : st + elems * a_elem + e * b_elem) + 4 * tc,
                                         kc, lda, ldb, ty, tx, acc);
        if (ch + 1 < chunks) continue;
        float* ce = c + static_cast<i64>(first + e) * m * n;
#pragma unroll
        for (int i = 0; i < RM; ++i) {
          const int row = tr + i * ty;
          if (row >= m) continue;
#pragma unroll
          for (int q = 0; q < RN / 4; ++q) {
            const int col = 4 * (tc + q * tx);
            const float v[4] = {acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]};
            if (col < n) store_c_row<InF32, 4>(ce + row * n + col, v, n - col, c_vec);
          }
        }
      }
    }
  }
  copy_async_wait(0);  // nothing left in flight when the block exits (the trailing groups are empty)
}

}  // namespace fg
