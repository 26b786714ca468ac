// cdna_gemm_tile: C[M, N] = epilogue(A[M, K] . B[N, K]^T) on AMD CDNA3 / CDNA4 (gfx942, gfx950) for gemm_a8's
// 8-bit kinds (fp8, int8; B PRESHUFFLED in the (16,16) layout of portable_gemm.hpp) and matmul_fused's kinds
// (bf16, fp16, tf32; B a PLAIN row-major [N, K] matrix, addressed as A is). The kernel structure of the
// fast public AMD GEMMs (FlyDSL's preshuffle GEMM, hipBLASLt / CK): A is staged through LDS, B goes from global
// memory straight to registers, and the K loop is software-pipelined.
//
// Block: kWarpsM x kWarpsN waves, each owning kTilesM x kTilesN 16x16 MFMA tiles (cdna_lds_128x128: 1 x 4 waves of
// 128 x 32, so every wave reads all of A's K block from LDS and B's columns are split between the waves: each byte
// of A and of B leaves global memory once per block). K advances in blocks of kBlockKBytes = 128 bytes (8 chunks of
// 16 bytes: 128 8-bit, 64 16-bit or 32 fp32 elements; 2 MFMA K steps of the gfx942 atoms and of gfx950's int8 /
// bf16 / fp16 / fp32, 1 of gfx950's fp8 16x16x128).
// kWarpsK > 1 (the decode tiles, cdna_lds_<M>x<N>_k<S>): S slices of the block's waves split K inside the block. A
// stage of the pipeline is then S consecutive K blocks, slice s computing block s of every stage (its own B, A from
// the stage's LDS copy, which the whole block loads as one contiguous run of S x 128 bytes per row), and the partial
// tiles are summed through LDS before the epilogue. A decode call's few rows of A are then copied once per block
// rather than once per wave, and a stage keeps S K blocks of the weight in flight per wave group.
//
//   A  [kBlockM rows x 128 B] per K block, double-buffered in LDS (2 x 16 KB for 128 rows). The block's 256 lanes
//      load it with coalesced 16-byte buffer loads (8 lanes cover a 128-byte row segment), hold it in registers
//      across the MFMAs of the current K block, then write it to the other LDS buffer. Each wave then reads its
//      A fragments from LDS (ds_read_b128): every A byte leaves global memory once per block instead of once per
//      wave. LDS layout: row r's chunk c sits in slot r * 8 + (c ^ (r % 8)) (an XOR swizzle): the 16
//      lanes that read one chunk column of 16 consecutive rows hit 8 distinct 16-byte bank groups per 8 lanes,
//      so the ds_read_b128s are free of bank conflicts. gfx950 loads A straight into LDS instead
//      (buffer_load_dwordx4 ... lds, arch/cdna_buffer.hpp): no staging registers and no ds_write; lane l of a
//      wave writes slot base + l, so each lane loads the chunk the swizzle puts in its slot, and each wave waits
//      for its loads (vmcnt) before the barrier that publishes them. gfx942 keeps the copy through registers
//      (its loads into LDS are 4 bytes a lane: four instructions and four M0 writes for one 16-byte load).
//   B  each wave loads its own kTilesN 16-row blocks of the preshuffled B straight into MFMA operand registers:
//      the (16,16) layout makes lane l's operand one contiguous 16-byte vector (n % 16 = l % 16, chunk by l / 16).
//      Plain B ([N, K] row-major, 16- or 32-bit) goes straight to registers too: lane l's operand of one MFMA
//      step is the 16-byte chunk l / 16 of row l % 16, one contiguous vector; a wave's load instruction covers 16
//      rows x 64 contiguous bytes and the K block's other step the other 64 bytes of the same 128-byte lines,
//      issued back to back. Staging B through LDS would buy no reuse (1 x 4 waves: each B column belongs to one
//      wave, so B leaves global memory once per block either way) and would add a 16-byte LDS write and read per B
//      byte per MFMA fragment on top of A's, in the LDS pipe that A's fragment reads already load most.
//      Two register sets alternate (the loop is unrolled by two), so K block k + 1's B is in flight while K
//      block k's MFMAs run.
//   Pipeline (one s_barrier per K block):
//      prologue: load A(0), B(0); write A(0) to LDS[0]; barrier
//      block k:  issue loads of A(k+1) (registers; gfx950: into LDS[(k+1) % 2]) and B(k+1) (the other B set);
//                read A(k) fragments from LDS[k % 2], MFMAs with B(k);
//                write A(k+1) to LDS[(k+1) % 2] (gfx950: wait for its loads); barrier
//      The barrier of block k both publishes A(k+1) and tells every wave that LDS[k % 2] is read (block k+1
//      writes it). The loads of block k+1 run under block k's LDS reads and MFMAs.
//   Ragged edges: two buffer descriptors per block (arch/cdna_buffer.hpp) sized to the block's rows of A and of
//      B: rows >= M and 16-row blocks (plain B: rows) >= N load zeros by the hardware's range check; a K chunk
//      >= K * kBytes / 16 gets an out-of-range offset (a select, no branch). K * kBytes % 16 == 0 (gemm_a8:
//      K % 16 == 0; matmul_fused: K % 8 == 0); any such K runs. Where K fills whole 128-byte K blocks, the host
//      launches the CdnaWholeKBlocks<Config> kernel instead, whose loads skip that select. Plain B: columns >= N
//      (N % 16 == 8) are never stored or passed to the epilogue.
//   Epilogue: the generated epilogue functor (epilogue.hpp) through the same slot calls as portable_gemm_tile.
//      A group-quantised output (out_groups.hpp; a group is the block's kBlockN columns: 128, or 256 GEMM columns
//      of gate / up pairs on cdna_lds_128x256) takes cdna_store_groups (cdna_store_groups.hpp): each row's |y|
//      reduced over the 16 lanes of a tile row, the wave's tiles, then the waves through LDS (the A buffers, free
//      after the K loop's last barrier), one more barrier.
//
// Requirements (checked on the host, as for every gemm_a8 / matmul_fused config): A / B 16-byte aligned;
// gemm_a8: N % 16 == 0, K % 16 == 0; matmul_fused: N % 8 == 0, K % 8 == 0; and 128 * K * kBytes < 2^31 - 16
// bytes (the descriptors' windows: K < 16M 8-bit, 8M 16-bit or 4M fp32 elements).
#pragma once
#include "arch/select.hpp"
#include "block_scales.hpp"
#include "cdna_store_groups.hpp"
#include "epilogue.hpp"
#include "gemm_configs.hpp"
#include "out_groups.hpp"
#if defined(__gfx942__) || defined(__gfx950__)
#include "arch/cdna_buffer.hpp"
#endif

namespace fg {

// Tile: a traits struct generated with the config's name into gemm_configs.hpp from runtime/tile_configs.py
// (CdnaTile).
template <class Tile>
struct CdnaLdsGemmConfig {
  static constexpr int kWarpsM = Tile::kWarpsM;
  static constexpr int kWarpsN = Tile::kWarpsN;
  static constexpr int kWarpsK = Tile::kWarpsK;  // > 1: K split inside the block (decode tiles)
  static constexpr int kWarps = kWarpsM * kWarpsN * kWarpsK;
  static constexpr int kTilesM = Tile::kTilesM;
  static constexpr int kTilesN = Tile::kTilesN;
  static constexpr int kWarpTileM = 16 * kTilesM;
  static constexpr int kWarpTileN = 16 * kTilesN;
  static constexpr int kBlockM = kWarpsM * kWarpTileM;
  static constexpr int kBlockN = kWarpsN * kWarpTileN;
  static constexpr int kBlockKBytes = Tile::kBlockKBytes;
  static constexpr int kChunksPerBlockK = kBlockKBytes / 16;
  static constexpr int kChunksPerStage = kWarpsK * kChunksPerBlockK;  // a stage: one K block per K slice of waves
  static constexpr int kThreads = kWarps * 64;
  static constexpr int kAVecsPerThread = kBlockM * kChunksPerStage / kThreads;  // A's 16-byte loads per stage
  static constexpr int kLdsBytes = 2 * kBlockM * kBlockKBytes * kWarpsK;        // two A buffers
  static_assert(kChunksPerBlockK == 8, "the LDS swizzle XORs the chunk with row % 8: K blocks of 128 bytes");
  static_assert(kBlockM * kChunksPerStage % kThreads == 0, "A's stage splits evenly over the block's lanes");
  static_assert(kThreads <= 1024, "at most 16 waves a workgroup");
  static_assert(kLdsBytes <= 64 * 1024, "LDS: gfx942 has 64 KB per workgroup");
  static constexpr bool kBlockScaled = false;
  static constexpr bool kWholeKBlocks = false;  // CdnaWholeKBlocks<Config>
};

// The kernel for K that fills whole K blocks (K * kBytes a positive multiple of kBlockKBytes: every LLM shape),
// chosen by the host (runtime/gemm_spec.py, whole_k_blocks): its loads carry no K-edge test, which the other kernel
// pays as one v_cndmask per load in every iteration although only a ragged last K block needs it.
template <class Cfg>
struct CdnaWholeKBlocks : Cfg {
  static constexpr bool kWholeKBlocks = true;
};

template <class Cfg>
struct IsCdnaLdsGemmConfig {
  static constexpr bool value = false;
};
template <class Tile>
struct IsCdnaLdsGemmConfig<CdnaLdsGemmConfig<Tile>> {
  static constexpr bool value = true;
};
template <class Cfg>
struct IsCdnaLdsGemmConfig<CdnaWholeKBlocks<Cfg>> : IsCdnaLdsGemmConfig<Cfg> {};
template <class Cfg>
struct IsCdnaLdsGemmConfig<PortableBlockScaled<Cfg>> : IsCdnaLdsGemmConfig<Cfg> {};

#if defined(__gfx942__) || defined(__gfx950__)

// Which output tile a workgroup of a plain (not grouped) call computes. The dispatcher deals workgroup ids (x
// fastest) round-robin over the XCDs (MI300X and MI355X: 8, each with its own L2), so in launch order an XCD's
// resident workgroups would be every 8th tile: few rows of the grid and a column in 8, sharing little through its
// L2. The XCD's ids are mapped to a run of consecutive tile numbers instead, and tile numbers are laid out
// kCdnaGroupRows rows of tiles at a time, down the rows first: an XCD's resident set (2 workgroups on each of its
// 32-38 CUs) is then about an 8 x 8-10 patch of tiles, whose A rows and B columns its L2 reads once
// (plan/cdna_xcd_order.py: the same order, for the model). A bijection on any grid (a 6-XCD part gets a valid, less
// compact order). Uniform, but two divisions by run-time values (about a hundred instructions before the first
// load): the split-K tiles (decode, M around 256: A is a few rows that every block shares, B streamed once in any
// order) and one-row grids keep launch order at no cost.
constexpr int kCdnaXcds = 8;
constexpr int kCdnaGroupRows = 8;
template <class Cfg>
FG_DEVICE void cdna_workgroup_tile(int M, int N, int& m_block, int& n_block) {
  const int gx = (N + Cfg::kBlockN - 1) / Cfg::kBlockN, gy = (M + Cfg::kBlockM - 1) / Cfg::kBlockM;
  int tx = static_cast<int>(blockIdx.x), ty = static_cast<int>(blockIdx.y);
  if (Cfg::kWarpsK == 1 && gy > 1) {
    const int id = ty * gx + tx, total = gx * gy;
    const int xcd = id % kCdnaXcds, q = total / kCdnaXcds, r = total % kCdnaXcds;
    const int t = xcd * q + imin(xcd, r) + id / kCdnaXcds;  // XCD xcd's ids: tile numbers in one run
    const int per_group = kCdnaGroupRows * gx;
    const int first = t / per_group * kCdnaGroupRows;
    const int rows = imin(gy - first, kCdnaGroupRows);
    const int in_group = t % per_group;
    ty = first + in_group % rows;
    tx = in_group / rows;
  }
  // (readfirstlane: the divisions above run on the VALU, and without it their results stay in VGPRs for the
  // whole kernel)
  m_block = __builtin_amdgcn_readfirstlane(ty * Cfg::kBlockM);
  n_block = __builtin_amdgcn_readfirstlane(tx * Cfg::kBlockN);
}

// kGrouped: a grouped GEMM's block (portable_gemm_grouped_block_scaled), for the whole-K loop's form (below).
template <class In, class Epi, class Cfg, bool kGrouped = false>
FG_DEVICE void cdna_gemm_tile(const u8* __restrict__ a,  // [M, K] row-major
                              const u8* __restrict__ b,  // [N, K] preshuffled (16,16) or row-major (kPreshuffledB)
                              int M, int N, int K,       // K in elements of In
                              const typename Epi::Params& ep,
                              int m_block, int n_block,   // the tile's first row and column
                              int col_base,               // as portable_gemm_direct_tile's
                              const BlockScaleArgs& bs = BlockScaleArgs{}) {  // Cfg::kBlockScaled only
  using Atom = arch::MmaAtom<In>;
  constexpr bool kPreshuffledB = InTraits<In>::kPreshuffledB;
  static_assert((kPreshuffledB && InTraits<In>::kBytes == 1) || (!kPreshuffledB && InTraits<In>::kBytes >= 2),
                "cdna_gemm_tile: the 8-bit kinds (preshuffled B) and the 16- / 32-bit kinds (plain B)");
  static_assert(Atom::kRowsPerLane == 1 && Atom::kWarpSize == 64, "CDNA MFMA atoms: wave64, one row per lane");
  static_assert(kPreshuffledB || Atom::kStoreVec == 1, "plain B masks columns >= N lane by lane");
  using Frag = typename Atom::Frag;
  using Acc = typename Atom::Acc;
  constexpr int kChunks = Cfg::kChunksPerBlockK;                    // 16-byte chunks per K block (8)
  constexpr int kSteps = kChunks / Atom::kChunksPerStep;            // MFMA K steps per K block
  static_assert(kSteps * Atom::kChunksPerStep == kChunks, "a K block holds whole MFMA steps");

  // LDS: two A buffers (stages), each kWarpsK K blocks of kBlockM rows x 8 swizzled chunks.
  constexpr int kSliceSlots = Cfg::kBlockM * kChunks;  // one K block of A in a stage
  __shared__ Vec16 lds_a[2][Cfg::kWarpsK * kSliceSlots];

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 64;
  const int warp = __builtin_amdgcn_readfirstlane(tid / 64);  // uniform: keeps wave offsets in SGPRs
  // the K slice: K block warp_k of every stage (a constant 0 without split-K, so that the offsets fold as before)
  constexpr int kSliceWaves = Cfg::kWarpsM * Cfg::kWarpsN;
  const int warp_k = Cfg::kWarpsK == 1 ? 0 : warp / kSliceWaves;
  const int wave_mn = Cfg::kWarpsK == 1 ? warp : warp % kSliceWaves;  // the wave's place in its slice
  const int warp_m = wave_mn / Cfg::kWarpsN;
  const int warp_n = wave_mn % Cfg::kWarpsN;
  const int m_warp = m_block + warp_m * Cfg::kWarpTileM;
  const int n_warp = n_block + warp_n * Cfg::kWarpTileN;
  const int row_bytes = K * InTraits<In>::kBytes;  // one row of A or of plain B; a multiple of 16
  const int num_chunks = row_bytes / 16;
  constexpr int kStageChunks = Cfg::kChunksPerStage;
  const int num_stages = (num_chunks + kStageChunks - 1) / kStageChunks;

  // The block's windows of A (its rows) and of B (its 16-row blocks: n_block is a multiple of 16, and a 16-row
  // block of the preshuffled B is 16 * K contiguous bytes; plain B: its rows, row_bytes each). Loads past them
  // return zeros. (Preshuffled B has 1-byte elements: row_bytes == K.)
  const int rows_a = M - m_block < Cfg::kBlockM ? M - m_block : Cfg::kBlockM;
  const int rows_b = N - n_block < Cfg::kBlockN ? N - n_block : Cfg::kBlockN;
  const arch::BufferRsrc rsrc_a =
      arch::make_buffer(a + static_cast<i64>(m_block) * row_bytes, static_cast<u32>(rows_a * row_bytes));
  const arch::BufferRsrc rsrc_b =
      arch::make_buffer(b + static_cast<i64>(n_block) * row_bytes, static_cast<u32>(rows_b * row_bytes));

  // A's global -> LDS copy: this lane's vectors v = tid + i * kThreads of the stage (row v / kStageChunks, chunk
  // c = v % kStageChunks: chunk c % 8 of the stage's K block c / 8, so a row's kWarpsK blocks are one contiguous run).
  // Loaded straight into LDS (kDmaA: gfx950), lane l of a wave writes slot base + l, so there v enumerates the
  // slots instead and the lane loads the chunk the swizzle puts in its slot (a wave's 64 lanes: 8 rows, each
  // row's 128 bytes in another order; the same cache lines).
  // The swizzle: row r's chunk c of a K block sits in slot r * 8 + swizzled(r, c); XOR is its own inverse, so
  // swizzled(r, s) is also the chunk that slot column s holds.
  auto swizzled = [](int row, int chunk) { return chunk ^ (row % 8); };
  constexpr bool kDmaA = arch::kLoadsToLdsVec16;
  static_assert(!kDmaA || kSliceSlots % 64 == 0, "a wave's loads into LDS stay inside one K block");
  u32 a_off[Cfg::kAVecsPerThread];   // byte offset in the window at stage 0
  int a_chunk[Cfg::kAVecsPerThread];
  int a_slot[Cfg::kAVecsPerThread];  // swizzled LDS slot (kDmaA: of the wave's lane 0)
#pragma unroll
  for (int i = 0; i < Cfg::kAVecsPerThread; ++i) {
    const int v = tid + i * Cfg::kThreads;
    if constexpr (kDmaA) {
      const int in_block = v % kSliceSlots, row = in_block / kChunks;
      const int chunk = (v / kSliceSlots) * kChunks + swizzled(row, in_block % kChunks);
      a_off[i] = static_cast<u32>(row * row_bytes + 16 * chunk);
      a_chunk[i] = chunk;
      a_slot[i] = __builtin_amdgcn_readfirstlane(v - lane);
    } else {
      const int row = v / kStageChunks, chunk = v % kStageChunks;
      a_off[i] = static_cast<u32>(row * row_bytes + 16 * chunk);
      a_chunk[i] = chunk;
      a_slot[i] = (chunk / kChunks) * kSliceSlots + row * kChunks + swizzled(row, chunk % kChunks);
    }
  }
  // A fragments from LDS: tile tm, step s, lane chunk j -> slot (swizzled); the same for every K block.
  int frag_slot[Cfg::kTilesM][kSteps][Atom::kChunksPerLane];
#pragma unroll
  for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int j = 0; j < Atom::kChunksPerLane; ++j) {
        const int row = warp_m * Cfg::kWarpTileM + 16 * tm + Atom::lane_row(lane, 0);
        const int chunk = s * Atom::kChunksPerStep + Atom::lane_chunk(lane, j);
        frag_slot[tm][s][j] = warp_k * kSliceSlots + row * kChunks + swizzled(row, chunk);
      }
  // B: preshuffled, the lane's vector of 16-row block tn, chunk c sits at b_base + tn * 16 * K + 256 * c; plain,
  // row (tile tn, lane_row) at b_base + tn * 16 * row_bytes, its chunk c 16 * c further.
  const int b_base = kPreshuffledB ? (warp_n * Cfg::kWarpTileN / 16) * 16 * K + 16 * Atom::lane_row(lane, 0)
                                   : (warp_n * Cfg::kWarpTileN + Atom::lane_row(lane, 0)) * row_bytes;
  constexpr int kBChunkBytes = kPreshuffledB ? 256 : 16;  // between consecutive K chunks of a lane's B vector
  const int b_tile_bytes = 16 * row_bytes;                 // between consecutive 16-row tiles (both layouts)

  // The stage's (A) or K block's (B) offset is the loads' wave offset (soffset; readfirstlane: without it the
  // compiler may keep it in a VGPR and wrap every load in a waterfall loop): the per-lane offsets stay
  // loop-invariant. In range (chunk < num_chunks, row < rows) the access stays inside the window; a chunk past K
  // gets kBufferOob, unless every stage is whole (Cfg::kWholeKBlocks: no chunk is past K, the offsets go unmasked).
  // load_a(st, buf, stage): stage st of A into registers, or (kDmaA) into LDS buffer buf; store_a(buf, stage): the
  // registers into buf, or (kDmaA) this wave's loads into LDS completed, before the barrier that publishes them.
  auto load_a = [&](int st, int buf, Vec16 (&stage)[Cfg::kAVecsPerThread]) {
    const u32 k_off = __builtin_amdgcn_readfirstlane(16u * kStageChunks * st);  // uniform: stays an SGPR
    const int rem = __builtin_amdgcn_readfirstlane(num_chunks - st * kStageChunks);  // chunks of it inside K
#pragma unroll
    for (int i = 0; i < Cfg::kAVecsPerThread; ++i) {
      const bool ok = Cfg::kWholeKBlocks || a_chunk[i] < rem;
      if constexpr (kDmaA) {
        arch::buffer_load_vec16_to_lds(rsrc_a, &lds_a[buf][a_slot[i]], ok ? a_off[i] : arch::kBufferOob, k_off);
      } else {
        stage[i] = arch::buffer_load_vec16(rsrc_a, ok ? a_off[i] : arch::kBufferOob, k_off);
      }
    }
  };
  auto store_a = [&](int buf, const Vec16 (&stage)[Cfg::kAVecsPerThread]) {
    if constexpr (kDmaA) {
      arch::wait_vmcnt<0>();  // (B's loads of the next stage too: issued with A's, the order is the compiler's)
    } else {
#pragma unroll
      for (int i = 0; i < Cfg::kAVecsPerThread; ++i) lds_a[buf][a_slot[i]] = stage[i];
    }
  };
  // B of stage st: this wave's K block of it, kb = st * kWarpsK + warp_k.
  auto load_b = [&](int st, Frag (&fb)[kSteps][Cfg::kTilesN]) {
    const int kb = st * Cfg::kWarpsK + warp_k;
    const u32 k_off = __builtin_amdgcn_readfirstlane(static_cast<u32>(kBChunkBytes * kChunks * kb));
    const int rem = __builtin_amdgcn_readfirstlane(num_chunks - kb * kChunks);
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int j = 0; j < Atom::kChunksPerLane; ++j) {
        const int chunk = s * Atom::kChunksPerStep + Atom::lane_chunk(lane, j);  // in the K block
        const bool ok = Cfg::kWholeKBlocks || chunk < rem;
#pragma unroll
        for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
          const u32 off = static_cast<u32>(b_base + tn * b_tile_bytes + kBChunkBytes * chunk);
          fb[s][tn].v[j] = arch::buffer_load_vec16(rsrc_b, ok ? off : arch::kBufferOob, k_off);
        }
      }
  };

  Acc acc[Cfg::kTilesM][Cfg::kTilesN];
#pragma unroll
  for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
    for (int tn = 0; tn < Cfg::kTilesN; ++tn) Atom::zero(acc[tm][tn]);

  // Block scales (Cfg::kBlockScaled; one K block is one scale block: acc += sa[row, kb] sb[col block, kb] P_kb).
  // scale_b: a wave's columns lie in one 128-column scale block (a gate / up pair's: in one 256-column pair block,
  // whose gate scale is on even columns and up scale on odd ones, the lane's parity), so a K block needs one or two
  // uniform values (scalar loads). scale_a: lane j of row group r (lanes 16 r + j) loads, for q < kScaleLoads, the
  // scale of row 16 tm + 4 r + e with n = j + 16 q = 4 tm + e (dword buffer loads: rows past M read 0 by the range
  // check, and are never stored), times scale_b; a DPP row_newbcast:n then hands value n of each row group to its
  // 16 lanes: tile tm's accumulator row e (acc_row). A K block costs a lane kScaleLoads loads and 4 kTilesM DPP
  // moves, no branch, where a load per accumulator row and column (each behind its own bounds test) cost 2.5x
  // the per-channel kernel's time on paper (docs/perf-notes.md).
  constexpr bool kScaled = Cfg::kBlockScaled;
  constexpr int kScaleLoads = kScaled ? Cfg::kTilesM / 4 : 1;
  static_assert(!kScaled || (kPreshuffledB && Atom::kAccPerLane == 4 && Cfg::kTilesM % 4 == 0 &&
                              128 % Cfg::kWarpTileN == 0),
                "block scales: 8-bit preshuffled B, whole row groups of tiles, a wave inside one scale block "
                "(plan/cdna.py has_block_scaled_kernel)");
  const u32 sa_row_bytes = 4u * static_cast<u32>(bs.k_blocks);
  // (made unconditionally: a descriptor assigned under a branch is kept in scratch memory)
  const arch::BufferRsrc rsrc_sa = arch::make_buffer(
      bs.a + (bs.a != nullptr ? static_cast<i64>(m_block) * bs.k_blocks : 0),
      kScaled && bs.a != nullptr ? static_cast<u32>(rows_a) * sa_row_bytes : 0u);
  u32 sa_off[kScaleLoads] = {};  // this lane's rows' offsets in the block's window of scale_a (K block 0)
  const float* sb_even = nullptr;  // the wave's scale_b row at K block 0 (a pair's: the gate's; odd: the up's)
  const float* sb_odd = nullptr;
  if constexpr (kScaled) {
#pragma unroll
    for (int q = 0; q < kScaleLoads; ++q) {
      const int n = (lane & 15) + 16 * q;
      sa_off[q] = static_cast<u32>(warp_m * Cfg::kWarpTileM + 16 * (n >> 2) + 4 * (lane >> 4) + (n & 3)) *
                  sa_row_bytes;
    }
    if (bs.b != nullptr) {  // the rows of the wave's even and odd columns (n_warp is even and uniform)
      sb_even = bs.b + static_cast<i64>(scale_b_row<Epi::kPairs>(n_warp)) * bs.k_blocks;
      sb_odd = bs.b + static_cast<i64>(scale_b_row<Epi::kPairs>(n_warp + 1)) * bs.k_blocks;
    }
  }
  // K block kb's scales as loaded: v[q] = sa(this lane's row q), times sb where it is one value for the wave (then
  // sb is returned as 1); a pair's sb is the lane's own column's (its parity), applied after the broadcast, which
  // moves other lanes' values. Row tile tm's four rows are row_broadcast from v just before its promotion (all
  // kTilesM x 4 held through the block's MFMAs, they would spill).
  auto block_scales = [&](int kb, float (&v)[kScaleLoads]) -> float {
    float sb = 1.f;
    if constexpr (kScaled) {
      // A K slice's block past K (in the last stage of a split-K tile) has zero products: any scale serves, so take
      // the last block's rather than read past the scale rows.
      if constexpr (Cfg::kWarpsK > 1) kb = imin(kb, bs.k_blocks - 1);
      if (sb_even != nullptr) sb = (Epi::kPairs && (lane & 1)) ? sb_odd[kb] : sb_even[kb];
      const u32 k_off = __builtin_amdgcn_readfirstlane(4u * static_cast<u32>(kb));
#pragma unroll
      for (int q = 0; q < kScaleLoads; ++q) {
        v[q] = bs.a != nullptr ? arch::buffer_load_f32(rsrc_sa, sa_off[q], k_off) : 1.f;
        if constexpr (!Epi::kPairs) v[q] *= sb;
      }
    }
    return Epi::kPairs ? sb : 1.f;
  };

  // Stage st's MFMAs (this wave's K block of it) from LDS buffer buf. Block-scaled: one row tile at a time into a
  // partial tile, added to the accumulators times its scales: kTilesN partial accumulators, not kTilesM x kTilesN
  // (the same MFMAs and LDS reads, in another order).
  auto mma_block = [&](int buf, const Frag (&fb)[kSteps][Cfg::kTilesN], int st) {
    if constexpr (kScaled) {
      float v[kScaleLoads];
      const float sb = block_scales(st * Cfg::kWarpsK + warp_k, v);  // 1 unless a pair's
      Acc p[Cfg::kTilesN];  // (two sets, alternating row tiles, compile to the same code: the compiler renames)
#pragma unroll
      for (int tm = 0; tm < Cfg::kTilesM; ++tm) {
#pragma unroll
        for (int tn = 0; tn < Cfg::kTilesN; ++tn) Atom::zero(p[tn]);
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
          Frag fa;
#pragma unroll
          for (int j = 0; j < Atom::kChunksPerLane; ++j) fa.v[j] = lds_a[buf][frag_slot[tm][s][j]];
#pragma unroll
          for (int tn = 0; tn < Cfg::kTilesN; ++tn) Atom::mma(p[tn], fa, fb[s][tn]);
        }
        float sc[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sc[e] = arch::row_broadcast((4 * tm + e) % 16, v[(4 * tm + e) / 16]);
          if constexpr (Epi::kPairs) sc[e] *= sb;
        }
#pragma unroll
        for (int tn = 0; tn < Cfg::kTilesN; ++tn) Atom::add_scaled(acc[tm][tn], p[tn], sc);
      }
    } else {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        Frag fa[Cfg::kTilesM];
#pragma unroll
        for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
          for (int j = 0; j < Atom::kChunksPerLane; ++j) fa[tm].v[j] = lds_a[buf][frag_slot[tm][s][j]];
#pragma unroll
        for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
          for (int tn = 0; tn < Cfg::kTilesN; ++tn) Atom::mma(acc[tm][tn], fa[tm], fb[s][tn]);
      }
    }
  };

  // Two B register sets, alternated by unrolling the K loop twice (register arrays need static indices).
  Frag fb0[kSteps][Cfg::kTilesN], fb1[kSteps][Cfg::kTilesN];
  Vec16 stage[Cfg::kAVecsPerThread];
  load_a(0, 0, stage);
  load_b(0, fb0);
  store_a(0, stage);
  __syncthreads();
  // Stage st: the loads of st + 1, then stage st's MFMAs, then A(st + 1) into the other buffer and one barrier.
  // Past the last stage the loads are never used: with the K-edge test they load zeros (nothing is read from
  // memory). Without it (kWholeKBlocks) they would read past the windows (soffset is not range-checked), so that
  // kernel's loop stops before the stages whose next stage is past K, and a tail without those loads runs them.
  int st = 0;
  // The grouped and group-quantised block-scaled whole-K kernels keep the loop for any K, their prefetch's stage
  // index clamped to the last stage (a redundant load in place of one past K): with the loop and tail above they
  // took 256 VGPRs + 9-13 AGPRs (one wave per SIMD, where this form keeps two). So do the block-scaled whole-K
  // kernels of the blocks of 64 rows or fewer (the split-K decode tiles, cdna_lds_64x128): with the loop and tail
  // the compiler folded a tail stage into the loop (three stages an iteration, branches inside). The plain
  // 128-row block-scaled kernel keeps the loop and tail: clamped, its loop has 9-18 more VALU and 6-8 more SALU,
  // and its registers fit either way.
  constexpr bool kClampedPrefetch = Cfg::kWholeKBlocks && Cfg::kBlockScaled &&
                                    (kGrouped || OutGroupOf<Epi>::value != 0 || Cfg::kBlockM < 128);
  if constexpr (Cfg::kWholeKBlocks && !kClampedPrefetch) {
    for (; st + 2 < num_stages; st += 2) {
      load_a(st + 1, 1, stage);
      load_b(st + 1, fb1);
      mma_block(0, fb0, st);
      store_a(1, stage);
      __syncthreads();
      load_a(st + 2, 0, stage);
      load_b(st + 2, fb0);
      mma_block(1, fb1, st + 1);
      store_a(0, stage);
      __syncthreads();
    }
    if (st + 1 < num_stages) {  // two stages left
      load_a(st + 1, 1, stage);
      load_b(st + 1, fb1);
      mma_block(0, fb0, st);
      store_a(1, stage);
      __syncthreads();
      mma_block(1, fb1, st + 1);
    } else {
      mma_block(0, fb0, st);
    }
    __syncthreads();  // the A buffers are read: out_group reuses them
  } else {
    const int last = num_stages - 1;
    auto next = [&](int b) { return kClampedPrefetch && b > last ? last : b; };
    for (; st < num_stages; st += 2) {
      load_a(next(st + 1), 1, stage);
      load_b(next(st + 1), fb1);
      mma_block(0, fb0, st);
      store_a(1, stage);
      __syncthreads();
      if (st + 1 >= num_stages) break;
      load_a(next(st + 2), 0, stage);
      load_b(next(st + 2), fb0);
      mma_block(1, fb1, st + 1);
      store_a(0, stage);
      __syncthreads();
    }
  }

  if constexpr (OutGroupOf<Epi>::value != 0) {
    static_assert(Cfg::kWarpsK == 1, "out_group: one K slice (the group's reduction is across the N waves)");
    static_assert(Cfg::kWarpsN * Cfg::kBlockM * sizeof(u32) <= sizeof(lds_a), "out_group: LDS");
    cdna_store_groups<Atom, Epi, Cfg>(acc, ep, M, N, m_block, n_block, m_warp, n_warp, warp_n, lane, col_base,
                                      reinterpret_cast<u32*>(&lds_a[0][0]));
    return;
  }
  // Epilogue: each lane's accumulators (one column, four rows per tile) through the epilogue slot, as
  // portable_gemm_tile does (preshuffled B: 16-column tiles are all in or all out, N % 16 == 0; plain B: columns
  // >= N are skipped per lane).
  auto store_tile = [&](const Acc& tile, int tm, int tn) {
    if constexpr (Epi::kPairs && Atom::kStoreVec == 1) {
      // Paired epilogue (gate 2j, up 2j + 1): the partner column is in lane ^ kPairLaneXor; every lane
      // exchanges first (whole-wave shuffle), the even column's lane stores the pair.
      float mine[Atom::kAccPerLane], other[Atom::kAccPerLane];
#pragma unroll
      for (int e = 0; e < Atom::kAccPerLane; ++e) {
        mine[e] = Atom::get(tile, e);
        other[e] = arch::shfl_xor(mine[e], Atom::kPairLaneXor);
      }
      const int col = n_warp + 16 * tn + Atom::acc_col(lane, 0);
      if (col & 1) return;
      if constexpr (!kPreshuffledB) {
        if (col >= N) return;  // N is even: col + 1 < N too
      }
      float c[2][Epi::kColValues];
      Epi::load_col(ep, col_base + col, c[0]);
      Epi::load_col(ep, col_base + col + 1, c[1]);
#pragma unroll
      for (int e = 0; e < Atom::kAccPerLane; ++e) {
        const int row = m_warp + 16 * tm + Atom::acc_row(lane, e);
        if (row >= M) continue;
        float r[Epi::kRowValues];
        Epi::load_row(ep, row, r);
        const float v[2] = {mine[e], other[e]};
        Epi::template store<2>(ep, row, col, v, r, c);
      }
    } else {
      const int col = n_warp + 16 * tn + Atom::acc_col(lane, 0);
      if constexpr (!kPreshuffledB) {
        if (col >= N) return;  // a tile straddling N (N % 16 == 8): kStoreVec == 1, one column per lane
      }
      float c[Atom::kStoreVec][Epi::kColValues];
#pragma unroll
      for (int s = 0; s < Atom::kStoreVec; ++s) Epi::load_col(ep, col_base + col + s, c[s]);
#pragma unroll
      for (int e = 0; e < Atom::kAccPerLane; e += Atom::kStoreVec) {
        const int row = m_warp + 16 * tm + Atom::acc_row(lane, e);
        if (row >= M) continue;
        float r[Epi::kRowValues];
        Epi::load_row(ep, row, r);
        float v[Atom::kStoreVec];
#pragma unroll
        for (int s = 0; s < Atom::kStoreVec; ++s) v[s] = Atom::get(tile, e + s);
        Epi::template store<Atom::kStoreVec>(ep, row, col, v, r, c);
      }
    }
  };
  if constexpr (Cfg::kWarpsK == 1) {
#pragma unroll
    for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
      for (int tn = 0; tn < Cfg::kTilesN; ++tn)
        if (n_warp + 16 * tn < N) store_tile(acc[tm][tn], tm, tn);
  } else {
    // Split-K: every wave parks its partial tiles in the A buffers (read: the loop ended on a barrier); tile t of
    // a wave's tiles is summed over the K slices and stored by the slice t % kWarpsK (the same lane layout in every
    // wave: lane l sums slot l of each), so the epilogue is spread over the slices.
    constexpr int kWaveTiles = Cfg::kTilesM * Cfg::kTilesN;
    static_assert(Cfg::kWarpsK * kSliceWaves * kWaveTiles * 64 * sizeof(Acc) <= sizeof(lds_a), "split-K: LDS");
    Acc* partial = reinterpret_cast<Acc*>(&lds_a[0][0]);  // [slice][wave of the slice][tile][lane]
#pragma unroll
    for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
      for (int tn = 0; tn < Cfg::kTilesN; ++tn)
        partial[((warp_k * kSliceWaves + wave_mn) * kWaveTiles + tm * Cfg::kTilesN + tn) * 64 + lane] = acc[tm][tn];
    __syncthreads();
#pragma unroll
    for (int tm = 0; tm < Cfg::kTilesM; ++tm)
#pragma unroll
      for (int tn = 0; tn < Cfg::kTilesN; ++tn) {
        const int t = tm * Cfg::kTilesN + tn;
        if (t % Cfg::kWarpsK != warp_k || n_warp + 16 * tn >= N) continue;
        Acc sum = partial[(wave_mn * kWaveTiles + t) * 64 + lane];
#pragma unroll
        for (int w = 1; w < Cfg::kWarpsK; ++w)
          Atom::add(sum, partial[((w * kSliceWaves + wave_mn) * kWaveTiles + t) * 64 + lane]);
        store_tile(sum, tm, tn);
      }
  }
}

#endif  // gfx942 || gfx950

}  // namespace fg
