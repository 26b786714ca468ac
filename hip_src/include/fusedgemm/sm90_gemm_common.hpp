// The pieces both sm_90a GEMM kernels (sm90_gemm.hpp: a CTA per tile; sm90_gemm_persistent.hpp)
// share: the tile configuration, the tile order, the wgmma fragment layout, the shared-memory map and the
// producer's copies (the consumers' main loops are in sm90_gemm_mainloop.hpp, the CTA-per-tile kernel's store
// paths and split-K reduction in sm90_gemm_stores.hpp). The design is described at the top of sm90_gemm.hpp.
#pragma once
#include "arch/sm90_async.hpp"
#include "block_scales.hpp"
#include "epilogue.hpp"
#include "gemm_configs.hpp"
#include "gemm_groups.hpp"

#if defined(FG_NVIDIA)
namespace fg {

// kSwapAB (decode, M <= kBlockM <= 64): the MMAs compute C^T = B . A^T, so the weight's rows are the wgmma's
// M (kBlockN / 64 MMAs of 64 rows per K step, one warpgroup) and the activation's rows its N (kBlockM, down
// to 16). At M = 1 an unswapped m64 MMA computes 64 rows for one: swapped, the tensor core does 1/4 of that
// work, and the copies, not the MMAs, bound the kernel.
// The shared-memory stages are the same; only the descriptors trade places.
//
// kChains (unswapped tiles): independent accumulator chains per warpgroup. Consecutive K blocks alternate
// between them (fp8: two partial tiles; int8: two int32 tiles summed at the end), so a block's MMAs never wait
// for the previous block's results inside the tensor core, and an fp8 block's promotion runs while the next
// block's MMAs do.
//
// kPersistent (unswapped, two consumer warpgroups, n128; no split-K): one wave of CTAs, each looping over
// tiles, with the epilogue handed to the producer warpgroup's three spare warps. The consumers park each
// finished tile's fp32 accumulators in shared memory and start the next tile's K blocks at once, so the
// epilogue (scales, bias, activation, stores: a sixth of a tile's time at large M) and the CTA start-up run under
// the next tile's MMAs instead of between them.
//
// kPairB (matmul_fused's plain B, CTA per tile, one chain, no split-K): CTAs run in clusters of two along grid x
// that compute row blocks 2p and 2p + 1 of one column tile, so both read the same B tile. Each copies half of B's
// rows (or column blocks) and the copy engine multicasts that half into both CTAs' stages: a CTA reads 16 + 16
// KB from L2 per K block of a 128 x 256 tile instead of 16 + 32. Either CTA's stage is then written by both, so
// a stage is refilled only when the consumers of both have released it ("empty" barriers count both CTAs'
// consumer warps: one local and one remote arrive per warp), and the pair starts and ends behind cluster
// barriers (the peer's copies and arrives may reach this CTA's barriers from its first to its last K block).
//
// kTileLoop (CTA-per-tile kernel, no split-K): one wave of CTAs, each looping over tiles in the persistent kernel's
// order, the consumers storing each tile (through a 64 x 64 fp32 buffer per warpgroup: store_tile_staged) while the
// producer already fetches the next tile's K blocks. For tiles whose fp32 tile does not fit beside the stages
// (128 x 256: 128 KB against 4 x 48 KB) most of the epilogue is not hidden under MMAs, but the copies run on through
// it, and CTA start-up and the pipeline's fill are paid once per CTA, not per tile. What the buffer holds is hidden:
// each warpgroup's last 64-column chunk of a tile is left in it, and the producer warpgroup's three spare warps store
// it under the next tile's MMAs (store_handed_chunk); the CTA's last tile the consumers store whole. One chunk: the
// buffer is all that fits beside 4 stages, and giving up a stage for a second chunk costs more than it hides.
//
// The config of one tile shape: Tile is a traits struct of named fields (kBlockM, kBlockN, kStages,
// kMinBlocksPerSm, kSwapAB, kChains, kPersistent, kPairB, kEpilogueWarps, kTileLoop), generated with the
// config's name into gemm_configs.hpp from runtime/tile_configs.py; the rest follows from them.
template <class Tile>
struct WgmmaConfig {
  static constexpr int kBlockM = Tile::kBlockM;
  // One m64nBN wgmma per warpgroup per K step of 32 bytes: 128, 192 or 256 (256: the 16/32-bit kinds only).
  static constexpr int kBlockN = Tile::kBlockN;
  static constexpr int kBlockK = 128;  // bytes = fp8/int8 values of K per stage
  static constexpr int kStages = Tile::kStages;
  static constexpr int kMinBlocksPerSm = Tile::kMinBlocksPerSm;
  static constexpr bool kSwapAB = Tile::kSwapAB;
  static constexpr int kChains = Tile::kChains;
  static constexpr bool kPersistent = Tile::kPersistent;
  static constexpr bool kPairB = Tile::kPairB;
  static constexpr bool kTileLoop = Tile::kTileLoop;
  static constexpr int kPair = kPairB ? 2 : 1;  // CTAs whose consumers release each stage
  static constexpr bool kBMnMajor = false;  // B [K, N] (N contiguous): MnMajorB<Config>
  static constexpr bool kSplitTf32 = false;  // two buffers of a stage's small TF32 parts: SplitTf32<Config>
  static constexpr bool kBlockScaled = false;  // fp8 K blocks promoted times per-block scales: BlockScaled<Config>
  static constexpr int kConsumerWarpgroups = kSwapAB ? 1 : kBlockM / 64;
  static constexpr int kMmaN = kSwapAB ? kBlockM : kBlockN;        // the wgmma's N
  static constexpr int kMmasPerStep = kSwapAB ? kBlockN / 64 : 1;  // per warpgroup and K step of 32
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  // Each SM sub-partition has 16384 registers for its warps: three consumer warpgroups plus a producer warp
  // would be capped at 128 registers per thread (spills). Then the producer is a whole warpgroup that gives
  // registers back (setmaxnreg) so the consumers can hold 160. Otherwise the producer is one warp.
  // Likewise 192- and 256-wide tiles: 96 or 128 accumulators per thread (and fp8's partial tile as many again)
  // do not fit the 168 registers that two consumer warpgroups and a producer warp get (one sub-partition holds
  // 3 of the 9 warps).
  // Two chains of 64 columns likewise: fp8 holds acc + 2 partial tiles = 192 accumulators per thread.
  // A persistent kernel's epilogue warps are the producer warpgroup's.
  static constexpr bool kSetMaxNReg = kConsumerWarpgroups == 3 || kBlockN > 128 || kChains > 1 || kPersistent;
  // NOTE: setmaxnreg moves registers within the CTA's launch allocation (384 threads x 168 = 64512): the consumers'
  // 2 x 128 x 232 leave exactly 128 x 40 for the producer warpgroup. Asking more deadlocks setmaxnreg.inc (48
  // hangs the persistent kernel).
  // kEpilogueWarps (persistent): 3, the producer warpgroup's spare warps, with 40 registers (consumers 232:
  // two chains fit); or 7, a second producer warpgroup, with 88 registers (consumers 168: one chain), for short K
  // where the epilogue, not the MMAs, sets a tile's time (3 warps, one per sub-partition, are latency bound); or 7
  // with 40 registers beside two chains (consumers 216: 2 x 128 x 216 + 256 x 40 = 65536).
  static constexpr int kEpilogueWarps = kPersistent ? Tile::kEpilogueWarps : 0;
  // Rows an epilogue warp has in flight at once (store_parked_rows): two with 88 registers (seven warps, one chain),
  // where the second row's loads hide latency; one with 40, where a second row's values do not fit and cost more
  // than they hide.
  static constexpr int kEpilogueRowsAtOnce = kEpilogueWarps == 7 && kChains == 1 ? 2 : 1;
  // persistent: the copy warp and the epilogue warps (one or two warpgroups); else a warpgroup or one warp
  static constexpr int kProducerThreads = kPersistent ? 32 * (1 + kEpilogueWarps) : kSetMaxNReg ? 128 : 32;
  // Seven epilogue warps beside two chains (persistent_128x128_epi7): 40 registers each, the consumers 216
  // (256 x 216 + 256 x 40).
  static constexpr int kProducerRegs =
      kConsumerWarpgroups == 3 ? 24 : kEpilogueWarps == 7 ? (kChains > 1 ? 40 : 88) : 40;
  static constexpr int kConsumerRegs =
      kConsumerWarpgroups == 3 ? 160 : kEpilogueWarps == 7 ? (kChains > 1 ? 216 : 168) : 232;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kStageBytesA = kBlockM * kBlockK;
  static constexpr int kStageBytesB = kBlockN * kBlockK;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kAccPerThread = kMmasPerStep * kMmaN / 2;
  static constexpr int kReduceBytes = kAccPerThread * kConsumerThreads * 4;
  // Persistent: the parked tile (fp32, kBlockM x kBlockN) and the tile's staged epilogue values follow the
  // stages: room for kStagedFloats = kBlockM + 2 kBlockN floats, the rows' values ([k][kBlockM]) then the
  // columns' ([k][kBlockN]) -- one per row and two per column for the presets (alpha * scale_a; scale_b, bias).
  // An epilogue with more hoisted values does not fit (the host does not plan it on this config).
  static constexpr int kEpilogueThreads = 32 * kEpilogueWarps;
  // Tile loop: in place of the parked tile, each consumer warpgroup's 64 x 64 fp32 store buffer (store_tile_staged).
  static constexpr int kParkedOffset = kStages * kStageBytes;
  static constexpr int kParkedBytes =
      kPersistent ? kBlockM * kBlockN * 4 : kTileLoop ? kConsumerWarpgroups * 64 * 64 * 4 : 0;
  static constexpr int kStagedOffset = kParkedOffset + kParkedBytes;
  static constexpr int kStagedFloats = kPersistent ? kBlockM + 2 * kBlockN : 0;
  static constexpr int kBarrierOffset = kStagedOffset + kStagedFloats * 4;
  // + the parked tile's full / empty (persistent), or the handed chunk's (tile loop)
  static constexpr int kBarriers = 2 * kStages + (kPersistent || kTileLoop ? 2 : 0);
  // + 1024: the dynamic shared-memory base is rounded up to the 1024-byte alignment the swizzle needs.
  static constexpr int kSmemBytes = kBarrierOffset + kBarriers * 8 + 1024;
  static_assert(kSwapAB ? kBlockM == 16 && kBlockN % 64 == 0 : kBlockM % 64 == 0 && kBlockM <= 192,
                "one to three consumer warpgroups of 64 rows; swapped: 16 activation rows, 64-row weight MMAs");
  static_assert(kSwapAB || kBlockN == 128 || kBlockN == 192 || (kBlockN == 256 && kConsumerWarpgroups <= 2),
                "unswapped tiles are 128, 192 or 256 wide (one wgmma per warpgroup and K step); 256 wide: 128 "
                "accumulators per thread, which fit two consumer warpgroups' 232 registers, not three's 160");
  static_assert(kReduceBytes <= kBarrierOffset, "the split-K partial tile reuses the stage buffers");
  static_assert(kChains == 1 || (kChains == 2 && !kSwapAB && kConsumerWarpgroups == 2 && kBlockN == 128),
                "two chains: fp8 needs 3 x 64 accumulators per thread, which fits 2 consumer warpgroups of n128 only");
  static_assert(!kPersistent || (!kSwapAB && kConsumerWarpgroups == 2 && kBlockN == 128),
                "persistent: the parked-tile layout and the epilogue warps' row mapping assume a 128 x 128 tile");
  static_assert(!kPersistent || kEpilogueWarps == 3 || kEpilogueWarps == 7, "3 or 7 epilogue warps");
  static_assert(!kTileLoop || (!kPersistent && !kSwapAB && kProducerThreads == 128 && kBlockN % 64 == 0),
                "the tile loop is the unswapped CTA-per-tile kernel's, with a producer warpgroup (its spare warps "
                "store the handed chunks)");
  static_assert(!kPairB || (!kSwapAB && (kChains == 1 || kPersistent) && kBlockN % 32 == 0),
                "B-multicast pairs: unswapped, one chain (two: persistent only), halves of whole 16-row blocks");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_90 CTA can have");
};

// A config whose B comes MN-major: matmul_fused's [K, N] weights (16-bit kinds). A stage of B is then
// [kBlockN / 64 column blocks][K rows of the stage][128 B] (one 128-byte-swizzled TMA box per column block),
// read by the MMA with B (unswapped) or A (swapped tiles) transposed.
template <class Cfg>
struct MnMajorB : Cfg {
  static constexpr bool kBMnMajor = true;
};

// A config for F32x3 (exact fp32 as three TF32 products): after the rest of its shared memory, two buffers that
// each hold one stage's small parts (A then B, the stage's layout and swizzle), written by the consumers while the
// previous K block's MMAs run (split_tf32_mainloop).
template <class Cfg>
struct SplitTf32 : Cfg {
  static constexpr bool kSplitTf32 = true;
  static constexpr int kSmallOffset = (Cfg::kBarrierOffset + Cfg::kBarriers * 8 + 1023) / 1024 * 1024;
  static constexpr int kSmemBytes = kSmallOffset + 2 * Cfg::kStageBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_90 CTA can have");
  static_assert(!Cfg::kSwapAB && !Cfg::kPersistent && Cfg::kChains == 1 && !Cfg::kBMnMajor && !Cfg::kPairB,
                "F32x3 runs on the CTA-per-tile, one-chain, K-major-B main loop");
};

// Block-scaled fp8 (gemm_a8's DeepSeek-style scales; pkg/fusedgemm/blockscale.py): each K block's fp32 partial tile
// (one K block = 128 fp8 values = one scale block) is promoted into the accumulator times sa[m, kb] * sb[n / 128, kb]
// (consumer_mainloop): scale_a [M, k_blocks] (1 x 128 blocks), scale_b [ceil(N / 128), k_blocks] (128 x 128 blocks),
// row-major fp32; a null pointer is a scale of 1 (that side's scale, if any, is the epilogue's). Unswapped tiles of
// N 128 (CTA per tile or persistent): a tile's columns are one block of scale_b, its rows a thread's two
// accumulator rows. The scales reach the consumers through a ring in shared memory (BlockScaleRows), after the
// barriers: per consumer warp kScaleRingSlots slots -- K blocks j .. j + 3, a block's copies start three blocks
// ahead -- of kScaleRingSlotFloats floats, a warp's 16 scale_a rows then scale_b's value (16-byte slots);
// runtime/kernels.py (SCALE_RING_*) sizes the launch with them. The persistent kernels give a stage for it (their
// parked tile and 5 stages leave 416 bytes of the CTA's shared memory).
constexpr int kScaleRingSlots = 4;
constexpr int kScaleRingSlotFloats = 20;
constexpr int kScaleRingWarpBytes = kScaleRingSlots * kScaleRingSlotFloats * 4;
static_assert((kScaleRingSlots & (kScaleRingSlots - 1)) == 0, "a power of two of slots (a block's slot: j & (n - 1))");
template <class Tile>
struct BlockScaledTile : Tile {
  static constexpr int kStages = Tile::kPersistent ? Tile::kStages - 1 : Tile::kStages;
};
template <class Cfg>
struct BlockScaled;
template <class Tile>
struct BlockScaled<WgmmaConfig<Tile>> : WgmmaConfig<BlockScaledTile<Tile>> {
  using Base = WgmmaConfig<BlockScaledTile<Tile>>;
  static constexpr bool kBlockScaled = true;
  static constexpr int kScaleRingOffset = Base::kBarrierOffset + Base::kBarriers * 8;
  static constexpr int kSmemBytes = Base::kSmemBytes + (Base::kConsumerThreads / 32) * kScaleRingWarpBytes;
  static_assert(!Base::kTileLoop && !Base::kPairB && Base::kBlockN == 128 && Base::kBlockK == 128,
                "block scales: the CTA-per-tile (swapped too) or persistent kernels, tiles of N 128 (one scale_b "
                "block per K block), no B-multicast pairs");
  static_assert(kScaleRingOffset % 16 == 0 && kSmemBytes <= 227 * 1024, "the scale ring after the barriers");
};

// A persistent config's grouped kernels (sm90_gemm_persistent.hpp, kGrouped): a stage fewer, for the group table
// (gemm_groups.hpp) after the barriers; runtime/kernels.py grouped_persistent_smem sizes the launch.
template <class Tile>
struct GroupTableTile : Tile {
  static constexpr int kStages = Tile::kStages - 1;
};
template <class Cfg>
struct GroupedPersistent;
template <class Tile>
struct GroupedPersistent<WgmmaConfig<Tile>> : WgmmaConfig<GroupTableTile<Tile>> {
  using Base = WgmmaConfig<GroupTableTile<Tile>>;
  static constexpr int kGroupTableOffset = Base::kBarrierOffset + Base::kBarriers * 8;
  static constexpr int kSmemBytes = Base::kSmemBytes + kGroupTableBytes;
  static_assert(Base::kPersistent && !Base::kPairB, "the group table: persistent configs without B-multicast pairs");
  static_assert(kGroupTableOffset % 16 == 0 && kSmemBytes <= 227 * 1024, "the group table after the barriers");
};

// One consumer thread's block scales, K block by K block. The 16 activation rows a warp reads (unswapped: the
// warp's 16 rows of its warpgroup's 64, a thread's accumulator rows lane / 4 and + 8; swapped (decode) tiles: the
// tile's 16 rows, a thread's kRows D columns) and the tile's scale_b value are copied by lanes 0-15 and 16 of the
// warp (cp.async, 4 bytes each) into the warp's ring slot of the block, three K blocks ahead of its promotion.
// NOTE: the copies go to shared memory rather than registers because a wgmma fence waits for every load still
// writing a register: scales loaded into registers, at any prefetch distance, stalled the consumers at the next
// block's fence on their global latency (the largest stall of the block-scaled kernels in Nsight Compute).
// Rows outside M or a side without scales hold 1 (written once, never copied).
// kPairs: a gate / up pair's interleaved weight (a paired epilogue), whose 128-column tile holds 64 gate and 64 up
// columns: scale_b's pair-ordered table (block_scales.hpp scale_b_row) gives the tile two values, rows 2q and
// 2q + 1 (q = n0 / 256), copied by lanes 16 and 17. Unswapped, a thread's even columns take the first and its odd
// ones the second (kValues: 2 per row, block_scale_slot); swapped, a thread's weight rows have one parity, (lane /
// 4) & 1, so it reads that one.
template <int kRows, bool kSwapped, bool kPairs = false>
struct BlockScaleRows {
  static constexpr int kSlots = kScaleRingSlots, kSlotBytes = 4 * kScaleRingSlotFloats;
  static constexpr int kAhead = kSlots - 1;  // blocks copied ahead of the one read
  static constexpr int kBValues = kPairs && !kSwapped ? 2 : 1;  // scale_b values a thread reads
  static constexpr int kValues = kRows * kBValues;              // a thread's products per K block
  static_assert(17 < kScaleRingSlotFloats, "a slot holds 16 scale_a rows and two scale_b values");
  const float* src = nullptr;  // this lane's value of the CTA's first K block; null: none (lanes 17/18-31 too)
  u32 dst = 0;                 // its place in slot 0 (shared address)
  u32 read = 0;                // this thread's first value in slot 0
  u32 b_read = 0;              // scale_b's (first) value in slot 0
  bool copier = false;         // lanes 0-16 (pairs: 0-17): their value is copied, or is 1
  // Value r of this thread (row slot r; block_scale_slot) at `read` + 4 offset(r).
  FG_DEVICE static constexpr int offset(int r) { return kSwapped ? 8 * (r >> 1) + (r & 1) : 8 * r; }
  FG_DEVICE void copy(int i, int kb_count) const {  // K block i's values into slot i % kSlots: one copy group
    if (i < kb_count && src != nullptr) sm90::cp_async_4(dst + (i & (kSlots - 1)) * kSlotBytes, src + i);
    sm90::cp_async_commit();
  }
  // Before the K loop: the ones, and the copies of blocks 0 .. kAhead - 1.
  FG_DEVICE void start(int kb_count) const {
    if (copier && src == nullptr) {
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) sm90::st_shared_f32(dst + slot * kSlotBytes, 1.0f);
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i) copy(i, kb_count);
  }
  // After block j's wgmmas are issued: block j's scales into s, and block j + kAhead's copies into the slot of
  // block j - 1 (every lane of the warp has read it: each passed block j's wgmma fence since, which waits for the
  // read).
  // s[r * kBValues + p]: row value r times scale_b value p.
  FG_DEVICE void take(int j, int kb_count, float (&s)[kValues]) const {
    sm90::cp_async_wait<kAhead - 1>();  // block j's group (only the kAhead - 1 after it may still be in flight)
    __syncwarp();
    const u32 slot = (j & (kSlots - 1)) * kSlotBytes;
    float b[kBValues];
#pragma unroll
    for (int p = 0; p < kBValues; ++p) b[p] = sm90::ld_shared_f32(b_read + slot + 4 * p);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float a = sm90::ld_shared_f32(read + slot + 4 * offset(r));
#pragma unroll
      for (int p = 0; p < kBValues; ++p) s[r * kBValues + p] = a * b[p];
    }
    copy(j + kAhead, kb_count);
  }
};

// The wgmma a config runs for input kind In: its N, and the transpose an MN-major B needs.
template <class In, class Cfg>
using MmaOf = sm90::Wgmma<In, Cfg::kMmaN,
                          !Cfg::kBMnMajor ? sm90::kTransNone : Cfg::kSwapAB ? sm90::kTransA : sm90::kTransB>;

// Which output tile a CTA computes. CTAs start roughly in launch order (blockIdx.x fastest). Row-major tile
// order makes one wave sweep a whole row of B's column tiles: right while B fits in L2 (50 MB on sm_90 parts),
// but a larger weight (gate_up: 117 MB of fp8) would then come again from DRAM for every row block of A.
// For those, consecutive CTAs walk down a group of 8 row blocks before moving one column right: a wave of
// 132 CTAs touches ~8 row blocks x ~17 column tiles of the operands. (Grouping weights that fit in L2 slows the
// CTA-per-tile kernels, so those keep row-major order.) The persistent kernel groups every weight (group_all): its
// CTAs drift apart over their tiles, and in row-major order they read operands back from DRAM that grouped tiles
// find in L2.
constexpr int kTileGroupRows = 8;  // 4 and 16 do as well on the persistent kernels
constexpr i64 kGroupTilesAboveWeightBytes = i64(48) << 20;
// Tile t (0 <= t < num_n * num_m, in the order CTAs take them) -> its row and column block. k_bytes: B's bytes per row;
// group_all: groups of kTileGroupRows row blocks whatever the weight's size.
FG_DEVICE void tile_of(int t, int num_n, int num_m, int N, int k_bytes, int& m_block, int& n_block,
                       bool group_all = false) {
  if (!group_all && static_cast<i64>(N) * k_bytes <= kGroupTilesAboveWeightBytes) {
    m_block = t / num_n;
    n_block = t - m_block * num_n;
    return;
  }
  const int first_m = t / (kTileGroupRows * num_n) * kTileGroupRows;
  const int rows = min(num_m - first_m, kTileGroupRows);
  const int local = t % (kTileGroupRows * num_n);
  m_block = first_m + local % rows;
  n_block = local / rows;
}
// A CTA-per-tile grid: the block's linear index is its tile.
FG_DEVICE void tile_of_block(int N, int k_bytes, int& m_block, int& n_block) {
  const int num_n = static_cast<int>(gridDim.x), num_m = static_cast<int>(gridDim.y);
  tile_of(static_cast<int>(blockIdx.y) * num_n + static_cast<int>(blockIdx.x), num_n, num_m, N, k_bytes, m_block,
          n_block);
}

// A B-multicast pair's tile (Cfg::kPairB): unit p of the num_n x num_pairs pairs of row blocks, in tile_of's
// order, and for the pair's CTA of cluster rank r row block 2 m + r of it (past M when the row blocks are odd in
// number: that CTA still copies its half of B for its peer and stores nothing).
FG_DEVICE void pair_tile_of(int p, int num_n, int num_pairs, int N, int k_bytes, u32 rank, int& m_block,
                            int& n_block, bool group_all = false) {
  tile_of(p, num_n, num_pairs, N, k_bytes, m_block, n_block, group_all);
  m_block = 2 * m_block + static_cast<int>(rank);
}
// ... in a CTA-per-tile grid (2 x column tiles, pairs of row blocks), clusters of 2 along x: pair p = blockIdx.y x
// column tiles + blockIdx.x / 2.
FG_DEVICE void tile_of_pair_block(int N, int k_bytes, u32 rank, int& m_block, int& n_block) {
  const int num_n = static_cast<int>(gridDim.x) / 2;
  pair_tile_of(static_cast<int>(blockIdx.y) * num_n + static_cast<int>(blockIdx.x) / 2, num_n,
               static_cast<int>(gridDim.y), N, k_bytes, rank, m_block, n_block);
}

// Rows of A one TMA copy brings: the whole tile, except when all of M fits in one tile: then M rounded up to
// 8 (the copy engine slows down on out-of-bounds rows; rows of the tile past the box keep stale bytes, which
// only reach output rows >= M, never stored). The host encodes A's tensor map with the same box.
template <class Cfg>
FG_DEVICE int a_box_rows(int M) {
  return M >= Cfg::kBlockM ? Cfg::kBlockM : ((M + 7) & ~7);
}

// Accumulator element j of consumer thread t (t counted within its warpgroup): row and column in the
// warpgroup's 64 x kBlockN tile (the wgmma D fragment layout).
FG_DEVICE int acc_row(int t, int j) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((j >> 1) & 1); }
FG_DEVICE int acc_col(int t, int j) { return 8 * (j >> 2) + 2 * (t & 3) + (j & 1); }

// The block scales of consumer thread t (within its warpgroup; warp: its consumer warp in the CTA) of rows row0 ..
// row0 + 15 (unswapped: its warp's 16 rows, wg_row0 + 16 (t / 32) on; swapped: the tile's) in the tile at column n0,
// from K block kb0 on; ring: the kernel's scale ring (shared address).
template <int kRows, bool kSwapped, bool kPairs = false>
FG_DEVICE BlockScaleRows<kRows, kSwapped, kPairs> block_scale_rows(const BlockScaleArgs& bs, int M, int row0, int n0,
                                                                  int t, int warp, int kb0, u32 ring) {
  BlockScaleRows<kRows, kSwapped, kPairs> r;
  const int lane = t & 31;
  const u32 slots = ring + static_cast<u32>(warp * kScaleRingWarpBytes);
  r.dst = slots + 4 * lane;
  r.read = slots + 4 * (kSwapped ? 2 * (lane & 3) : lane >> 2);
  r.b_read = slots + 4 * (16 + (kPairs && kSwapped ? (lane >> 2) & 1 : 0));
  r.copier = lane <= (kPairs ? 17 : 16);
  if (lane < 16 && bs.a != nullptr && row0 + lane < M) r.src = bs.a + static_cast<i64>(row0 + lane) * bs.k_blocks + kb0;
  if (lane >= 16 && r.copier && bs.b != nullptr) {
    // lane 16: the row of the tile's (even) columns; 17 (pairs): of its odd ones
    r.src = bs.b + static_cast<i64>(scale_b_row<kPairs>(n0 + lane - 16)) * bs.k_blocks + kb0;
  }
  return r;
}

// The slot (BlockScaleRows) of accumulator j's activation row: unswapped, its row acc_row(t, j) is row0 + 8 ((j >> 1)
// & 1); swapped, column acc_col(t, e) of D fragment j / kAccPerMma, e = j % kAccPerMma (SwappedOperands::row_slot).
// Unswapped pairs: times kBValues, plus the parity of its column acc_col(t, j), j & 1 (gate even, up odd).
template <bool kSwapAB, int kAccPerMma, bool kPairs = false>
FG_DEVICE constexpr int block_scale_slot(int j) {
  return kSwapAB ? (j & 1) | ((j % kAccPerMma) >> 2 << 1) : kPairs ? (((j >> 1) & 1) << 1) | (j & 1) : (j >> 1) & 1;
}

// Element (row, col) of a shared-memory fp32 tile of kWidth-word rows that the consumers write in the fragment layout
// and other threads read back by rows (the persistent kernel's parked tile, 128 wide; the tile loop's store
// buffer, 64 wide): word row * kWidth + (col ^ ((row & 3) << 3)). The XOR puts the four rows that a consumer
// half-warp writes (one 8-word group each) on different banks, and keeps a reader's four columns 4c..4c+3
// together (one conflict-free 16-byte read).
template <int kWidth>
FG_DEVICE int swizzled_index(int row, int col) { return row * kWidth + (col ^ ((row & 3) << 3)); }

// A wgmma kernel's shared memory: stages (A, then B); the persistent kernel's parked tile or the tile loop's store
// buffers; the persistent kernel's staged epilogue values; the barriers (the stages' full, empty, then the parked
// tile's or the handed chunk's full, empty).
// The base comes through an asm volatile, so each role recomputes it after its setmaxnreg (no CSE with the
// prologue's copy).
template <class Cfg>
struct KernelSmem {
  u8* base;
  FG_DEVICE KernelSmem() {
    extern __shared__ u8 smem_raw[];
    u32 addr = sm90::smem_addr(smem_raw);
    asm volatile("" : "+r"(addr));
    base = smem_raw + ((1024 - (addr & 1023)) & 1023);
  }
  FG_DEVICE u8* stage_a() const { return base; }
  FG_DEVICE u8* stage_b() const { return base + Cfg::kStages * Cfg::kStageBytesA; }
  FG_DEVICE float* parked() const { return reinterpret_cast<float*>(base + Cfg::kParkedOffset); }
  FG_DEVICE float* row_staged() const { return reinterpret_cast<float*>(base + Cfg::kStagedOffset); }
  template <class Epi>
  FG_DEVICE float* col_staged() const { return row_staged() + Epi::kRowValues * Cfg::kBlockM; }
  FG_DEVICE sm90::u64* full() const { return reinterpret_cast<sm90::u64*>(base + Cfg::kBarrierOffset); }
  FG_DEVICE sm90::u64* empty() const { return full() + Cfg::kStages; }
  FG_DEVICE sm90::u64* parked_full() const { return full() + 2 * Cfg::kStages; }
  FG_DEVICE sm90::u64* parked_empty() const { return full() + 2 * Cfg::kStages + 1; }
  FG_DEVICE int* group_table() const { return reinterpret_cast<int*>(base + Cfg::kGroupTableOffset); }
};

// Values of K in a stage row: kBlockK bytes (128 fp8 / int8, 64 bf16 / fp16, 32 tf32 values).
template <class In, class Cfg>
constexpr int kStageValues = Cfg::kBlockK / InTraits<In>::kBytes;

// K blocks of a K-element problem. TMA zero-fills a ragged last block past K.
template <class In, class Cfg>
FG_DEVICE int k_block_count(int K) {
  return (K + kStageValues<In, Cfg> - 1) / kStageValues<In, Cfg>;
}

// The descriptor of K step kk (32 bytes of K) of a K-major, 128-byte-swizzled operand tile at shared address
// `base` (A, a plain B, F32x3's small parts): 8-row core-matrix groups 8 x 128 B apart.
template <class Cfg>
FG_DEVICE sm90::u64 k_major_desc(u32 base, int kk) {
  return sm90::smem_desc(base + 32 * kk, 16, 8 * Cfg::kBlockK, sm90::kSwizzle128B);
}

// Whether B reaches shared memory as a plain K-major [N, K] tile (matmul_fused's weights) rather than gathered
// from the preshuffled layout: 128-byte rows, 128-byte swizzle, like A.
template <class In>
constexpr bool kPlainB = !InTraits<In>::kPreshuffledB;

// The producer's copies of K block kb of the tile at (m0, n0) into stage buffers a_dst / b_dst, counted on `bar`.
// a_rows: rows of A one copy brings (a_box_rows). Coordinates are in elements, innermost first.
template <class In, class Cfg>
// pair_rank (Cfg::kPairB): this CTA's rank in its pair; it copies that half of B into both CTAs' stages, and the
// barrier counts the whole stage (the other half comes from the peer's copy).
FG_DEVICE void copy_k_block(u8* a_dst, u8* b_dst, const sm90::TmaDesc& a_map, const sm90::TmaDesc& b_map,
                            sm90::u64* bar, int a_rows, int kb, int m0, int n0, int pair_rank = 0) {
  constexpr int kValues = kStageValues<In, Cfg>;
  sm90::mbar_arrive_expect_tx(bar, a_rows * Cfg::kBlockK + Cfg::kStageBytesB);
  sm90::tma_load_2d(a_dst, &a_map, bar, kb * kValues, m0);
  if constexpr (Cfg::kPairB) {
    constexpr int kHalfN = Cfg::kBlockN / 2;
    constexpr u16 kBoth = 0x3;
    if constexpr (!kPlainB<In>) {
      // Preshuffled: this CTA's half of the stage's 8 K chunks, all row blocks (the host encodes the box with 4
      // chunks). The stage is [K chunk][row block][256 B], so that is one contiguous half of it.
      constexpr int kChunks = Cfg::kBlockK / 32;
      sm90::tma_load_3d_multicast(b_dst + pair_rank * (Cfg::kStageBytesB / 2), &b_map, bar, 0, n0 / 16,
                                  kb * (Cfg::kBlockK / 16) + pair_rank * kChunks, kBoth);
    } else if constexpr (Cfg::kBMnMajor) {
      static_assert(kHalfN % 64 == 0, "an MN-major B's halves are whole 64-column blocks");
#pragma unroll
      for (int h = 0; h < kHalfN / 64; ++h) {  // this CTA's column blocks of the stage
        const int j = pair_rank * (kHalfN / 64) + h;
        sm90::tma_load_2d_multicast(b_dst + j * kValues * 128, &b_map, bar, n0 + 64 * j, kb * kValues, kBoth);
      }
    } else {  // this CTA's kHalfN rows (the host encodes B's box with kHalfN rows)
      sm90::tma_load_2d_multicast(b_dst + pair_rank * kHalfN * Cfg::kBlockK, &b_map, bar, kb * kValues,
                                  n0 + pair_rank * kHalfN, kBoth);
    }
  } else if constexpr (Cfg::kBMnMajor) {
    static_assert(!InTraits<In>::kPreshuffledB && InTraits<In>::kBytes == 2, "MN-major B: 16-bit kinds only");
#pragma unroll
    for (int j = 0; j < Cfg::kBlockN / 64; ++j)  // column block j: N n0 + 64 j .. + 63, all kValues K rows
      sm90::tma_load_2d(b_dst + j * kValues * 128, &b_map, bar, n0 + 64 * j, kb * kValues);
  } else if constexpr (kPlainB<In>) {
    sm90::tma_load_2d(b_dst, &b_map, bar, kb * kValues, n0);
  } else {
    // One copy gathers K chunks kb*8 .. kb*8+7 of the tile's BN/16 row blocks; the map's dimensions are
    // ordered (256 B, row block, K chunk), so the box lands as [K chunk][row block][256 B].
    sm90::tma_load_3d(b_dst, &b_map, bar, 0, n0 / 16, kb * (Cfg::kBlockK / 16));
  }
}

}  // namespace fg
#endif  // FG_NVIDIA
