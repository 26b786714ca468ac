// Stream-K schedule of the persistent sm_90a kernels (gemm_a8_sm90_persistent.hpp): which tiles and K blocks each
// CTA computes, and the hand-over of partial tiles between CTAs through a global workspace.
//
// Why: a persistent grid of P CTAs over T tiles lasts ceil(T / P) tile times for T / P of work. With T < P (M =
// 256: qkv has 96 tiles on 132 SMs) a third of the SMs idle for the whole kernel; with T > P the last wave does.
// The schedule: the last sk_tiles tiles (in tile_of's order) are the stream-K part, their sk_tiles x kb K blocks
// cut into sk_ctas <= P equal contiguous ranges (CTA c < sk_ctas: [c sk_iters / sk_ctas, (c + 1) sk_iters /
// sk_ctas)); the T - sk_tiles tiles before them run whole first, CTA c taking tiles c, c + P, ... (the plain
// persistent order). The host picks (plan/stream_k.py, which mirrors this file) sk_tiles = the last partial wave
// (every tile when T < P) and sk_ctas = j x sk_tiles: each of those tiles in j equal pieces, so the CTAs that share
// a tile's operands (its neighbours in tile_of's order) still run the same K blocks at the same time. Ranges that
// cut tiles unevenly (stream-K proper: sk_ctas = P) measured 20-50% slower on an H100: CTAs that read the same B
// blocks many K blocks apart found them evicted from L2 (docs/perf-notes.md).
//
// Every unit is parked for the epilogue warps like a whole tile. A CTA's range starts either at a tile's K block 0
// or inside a tile. Inside, its first stream-K unit is a *partial* piece of that tile: the epilogue warps copy it
// as fp32 / int32 to the CTA's own workspace slot and set its flag. Every other unit starts at K block 0: a whole
// tile, or a tile's *first piece*, whose epilogue warps wait for the flags of the later CTAs whose ranges start
// inside that tile (contiguous CTAs: no range is empty), add their slots in CTA order while storing
// (deterministic), and reset the flags to 0 for the next launch. A partial piece is a range's first unit and a first
// piece its last, so the flags are mostly set before they are waited for, and the hand-over runs on the epilogue
// warps, under the next unit's MMAs. Every CTA writes at most one slot, so the workspace is P flags and P slots of
// one 128 x 128 tile of 4-byte accumulators; flags start at 0 (the host zeroes the workspace once).
// Deadlock freedom: a CTA only waits for higher-numbered CTAs' first stream-K units, which wait for nothing.
#pragma once
#include "gemm_a8_sm90_common.hpp"

#if defined(FG_NVIDIA)
namespace fg {

constexpr int kStreamKMaxCtas = 1024;          // flags at the workspace's start (4 KB), then the slots
constexpr int kStreamKSlotBytes = 128 * 128 * 4;  // one 128 x 128 tile of fp32 / int32 accumulators

// The first K block (of the stream-K part's sk_iters) of CTA c's range; the ranges are those of the first sk_ctas
// CTAs (the others' are empty). The host keeps sk_ctas x sk_iters < 2^31.
FG_DEVICE int stream_k_begin(int c, int sk_ctas, int sk_iters) {
  return c >= sk_ctas ? sk_iters
                      : static_cast<int>(static_cast<u32>(c) * static_cast<u32>(sk_iters) / static_cast<u32>(sk_ctas));
}

enum StreamKKind : int { kWholeTile = 0, kPartialPiece = 1, kFirstPiece = 2 };

// One unit of a CTA's work: K blocks k0 .. k0 + count - 1 of tile `tile`; g0: how many K blocks the CTA's ring
// carried before it (the stage and phase of its first block).
struct StreamKUnit {
  int tile, k0, count, g0, kind;
};

// The q-th unit of CTA c of `ctas` over `tiles` tiles of kb K blocks, the last sk_tiles of them stream-K over the
// first sk_ctas CTAs: false past the CTA's last. The consumers, the copy warp and the epilogue warps each walk it.
FG_DEVICE bool stream_k_unit(int q, int c, int ctas, int tiles, int sk_tiles, int sk_ctas, int kb, StreamKUnit& u) {
  const int dp_tiles = tiles - sk_tiles;
  const int n_dp = dp_tiles > c ? (dp_tiles - c + ctas - 1) / ctas : 0;
  u.k0 = 0;
  if (q < n_dp) {
    u.tile = c + q * ctas;
    u.count = kb;
    u.g0 = q * kb;
    u.kind = kWholeTile;
    return true;
  }
  const int sk_iters = sk_tiles * kb;
  const int ib = stream_k_begin(c, sk_ctas, sk_iters), ie = stream_k_begin(c + 1, sk_ctas, sk_iters);
  int r = q - n_dp;
  int s;  // the tile within the stream-K part
  if (ib % kb != 0 && ib < ie) {
    if (r == 0) {
      s = ib / kb;
      u.tile = dp_tiles + s;
      u.k0 = ib - s * kb;
      u.count = min(ie, (s + 1) * kb) - ib;
      u.g0 = n_dp * kb;
      u.kind = kPartialPiece;
      return true;
    }
    --r;
  }
  const int first = (ib + kb - 1) / kb;  // the first tile whose K block 0 lies in the range
  if (r >= (ie + kb - 1) / kb - first) return false;
  s = first + r;
  u.tile = dp_tiles + s;
  u.count = min(ie, (s + 1) * kb) - s * kb;
  u.g0 = n_dp * kb + s * kb - ib;
  u.kind = u.count < kb ? kFirstPiece : kWholeTile;
  return true;
}

// The stream-K tile (0 .. sk_tiles - 1) whose first piece is CTA c's q-th unit, or -1 when that unit is not a
// first piece: the last unit of a range that ends inside a tile (stream_k_unit, in fewer registers).
FG_DEVICE int stream_k_first_piece(int q, int c, int ctas, int tiles, int sk_tiles, int sk_ctas, int kb) {
  const int dp_tiles = tiles - sk_tiles;
  const int n_dp = dp_tiles > c ? (dp_tiles - c + ctas - 1) / ctas : 0;
  const int sk_iters = sk_tiles * kb;
  const int ib = stream_k_begin(c, sk_ctas, sk_iters), ie = stream_k_begin(c + 1, sk_ctas, sk_iters);
  if (ie % kb == 0 || ie <= ib) return -1;
  const int units = n_dp + (ib % kb != 0 ? 1 : 0) + (ie + kb - 1) / kb - (ib + kb - 1) / kb;
  return q == units - 1 && ie / kb * kb >= ib ? ie / kb : -1;
}

// The later CTAs whose partial pieces complete the first piece of stream-K tile s (tile - (tiles - sk_tiles)) that
// CTA c computes: CTAs c + 1 .. c + the count returned (their ranges start inside the tile).
FG_DEVICE int stream_k_peers(int c, int sk_ctas, int sk_tiles, int kb, int s) {
  const int sk_iters = sk_tiles * kb;
  int p = c + 1;
  while (p < sk_ctas && stream_k_begin(p, sk_ctas, sk_iters) < (s + 1) * kb) ++p;
  return p - c - 1;
}

FG_DEVICE u32* stream_k_flags(u8* ws) { return reinterpret_cast<u32*>(ws); }
// CTA c's slot: the partial piece's 128 x 128 accumulators, row-major (element (r, c) at r x 128 + c).
FG_DEVICE float* stream_k_slot(u8* ws, int c) {
  return reinterpret_cast<float*>(ws + 4 * kStreamKMaxCtas + static_cast<i64>(c) * kStreamKSlotBytes);
}

// Epilogue thread 0 of a first piece's CTA c: wait until the flags of CTAs c + 1 .. c + peers are set, and reset
// them (each flag has this one reader). The epilogue threads' barrier after it orders their slot reads.
FG_DEVICE void stream_k_wait_flags(u8* ws, int c, int peers) {
  u32* flags = stream_k_flags(ws);
  for (int p = c + 1; p <= c + peers; ++p) {
    while (sm90::flag_acquire_gpu(&flags[p]) == 0u) {
    }
    sm90::flag_clear_gpu(&flags[p]);
  }
}

}  // namespace fg
#endif  // FG_NVIDIA
