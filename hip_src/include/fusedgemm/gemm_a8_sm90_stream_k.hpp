// Stream-K schedule of the persistent sm_90a kernels (gemm_a8_sm90_persistent.hpp): which tiles and K blocks each
// CTA computes, and the hand-over of partial tiles between CTAs through a global workspace.
//
// Why: a persistent grid of P CTAs over T tiles lasts ceil(T / P) tile times for T / P of work. With T < P (M =
// 256: qkv has 96 tiles on 132 SMs) a third of the SMs idle for the whole kernel; with T > P the last wave does.
// The schedule: the first sk_tiles tiles (in tile_of's order) are the stream-K part, sk_tiles x kb K blocks cut
// into P equal contiguous ranges (CTA c: [c sk_iters / P, (c + 1) sk_iters / P)); the other T - sk_tiles tiles
// are whole tiles c + sk_tiles, c + sk_tiles + P, ... after it. The host picks sk_tiles (plan/stream_k.py, which
// mirrors this file): 0 (every tile whole: the plain persistent kernel), all T when T < P, else the last partial
// wave plus one whole wave, so each range holds between one and two tiles' K blocks.
//
// A CTA's range starts either at a tile's K block 0 or inside a tile. Inside, its first unit is a *partial*
// piece of that tile (K blocks from the range's start to the tile's or the range's end): the CTA writes it as
// fp32 / int32 to its own workspace slot and sets its flag. Every other unit starts at K block 0 of a tile: a
// whole tile, or the tile's first piece, whose CTA (the *finisher*) waits for the flags of the later CTAs whose
// ranges start inside that tile, adds their slots in CTA order (deterministic), resets the flags to 0 for the
// next launch, and parks the tile for the epilogue warps as usual. A partial piece is a range's first unit and
// a first piece its last, so a finisher's peers wrote their slots at their start: it seldom waits.
// Every CTA writes at most one slot, so the workspace is P slots of one 128 x 128 tile of 4-byte accumulators
// plus P flags; flags start at 0 (the host zeroes the workspace once) and finishers leave them at 0.
// Deadlock freedom: a CTA only waits for higher-numbered CTAs' first units, which wait for nothing.
#pragma once
#include "gemm_a8_sm90_common.hpp"

#if defined(FG_NVIDIA)
namespace fg {

constexpr int kStreamKMaxCtas = 1024;          // flags at the workspace's start (4 KB), then the slots
constexpr int kStreamKSlotBytes = 128 * 128 * 4;  // one 128 x 128 tile of fp32 / int32 accumulators

// The first K block (of the stream-K part's sk_iters) of CTA c's range. The host keeps P x sk_iters < 2^31.
FG_DEVICE int stream_k_begin(int c, int ctas, int sk_iters) {
  return static_cast<int>(static_cast<u32>(c) * static_cast<u32>(sk_iters) / static_cast<u32>(ctas));
}

// One unit of a CTA's work: K blocks k0 .. k0 + count - 1 of tile `tile`; g0: how many K blocks the CTA's ring
// carried before it (the stage and phase of its first block).
struct StreamKUnit {
  int tile, k0, count, g0;
};

// The q-th unit of CTA c that starts at K block 0 (a whole tile or a tile's first piece): the units the
// consumers park and the epilogue warps store, in order. false past the CTA's last.
FG_DEVICE bool stream_k_park_unit(int q, int c, int ctas, int tiles, int sk_tiles, int kb, StreamKUnit& u) {
  const int sk_iters = sk_tiles * kb;
  const int ib = stream_k_begin(c, ctas, sk_iters), ie = stream_k_begin(c + 1, ctas, sk_iters);
  const int first = (ib + kb - 1) / kb;  // the first tile whose K block 0 lies in the range
  const int sk_units = (ie + kb - 1) / kb - first;
  u.k0 = 0;
  if (q < sk_units) {
    u.tile = first + q;
    u.count = min(ie, (u.tile + 1) * kb) - u.tile * kb;
    u.g0 = u.tile * kb - ib;
    return true;
  }
  const int d = q - sk_units;
  u.tile = sk_tiles + c + d * ctas;
  u.count = kb;
  u.g0 = ie - ib + d * kb;
  return u.tile < tiles;
}

// CTA c's partial piece, the unit its range starts with when it starts inside a tile: false if none.
FG_DEVICE bool stream_k_partial_unit(int c, int ctas, int sk_tiles, int kb, StreamKUnit& u) {
  const int sk_iters = sk_tiles * kb;
  const int ib = stream_k_begin(c, ctas, sk_iters), ie = stream_k_begin(c + 1, ctas, sk_iters);
  if (ib % kb == 0 || ib >= ie) return false;
  u.tile = ib / kb;
  u.k0 = ib - u.tile * kb;
  u.count = min(ie, (u.tile + 1) * kb) - ib;
  u.g0 = 0;
  return true;
}

FG_DEVICE u32* stream_k_flags(u8* ws) { return reinterpret_cast<u32*>(ws); }
FG_DEVICE uint4* stream_k_slot(u8* ws, int c) {
  return reinterpret_cast<uint4*>(ws + 4 * kStreamKMaxCtas + static_cast<i64>(c) * kStreamKSlotBytes);
}

// A partial piece's accumulators into CTA c's slot (16-byte vectors, consumer thread t's j-th vector at
// j x threads + t: a warp's store is 512 contiguous bytes), then its flag, after a barrier of the consumers.
template <class Cfg, class Acc, int kAcc>
FG_DEVICE void stream_k_publish(const Acc (&acc)[kAcc], u8* ws, int c, int t) {
  static_assert(kAcc % 4 == 0 && sizeof(Acc) == 4 && kAcc * Cfg::kConsumerThreads * 4 <= kStreamKSlotBytes, "slot");
  uint4* slot = stream_k_slot(ws, c);
#pragma unroll
  for (int j = 0; j < kAcc; j += 4) {
    uint4 v;
    v.x = __builtin_bit_cast(u32, acc[j]);
    v.y = __builtin_bit_cast(u32, acc[j + 1]);
    v.z = __builtin_bit_cast(u32, acc[j + 2]);
    v.w = __builtin_bit_cast(u32, acc[j + 3]);
    slot[(j / 4) * Cfg::kConsumerThreads + t] = v;
  }
  sm90::named_barrier_sync(3, Cfg::kConsumerThreads);
  if (t == 0) sm90::flag_release_gpu(&stream_k_flags(ws)[c], 1u);
}

// A finisher's tile (K block 0 on, in CTA c): wait for the later CTAs whose ranges start inside the tile, then
// add their slots in CTA order. tile_end: the K block (of the stream-K part) after the tile's last.
template <class Cfg, class Acc, int kAcc>
FG_DEVICE void stream_k_gather(Acc (&acc)[kAcc], u8* ws, int c, int ctas, int sk_iters, int tile_end, int t) {
  u32* flags = stream_k_flags(ws);
  if (t == 0) {
    for (int p = c + 1; p < ctas; ++p) {
      const int b = stream_k_begin(p, ctas, sk_iters);
      if (b >= tile_end) break;
      if (b == stream_k_begin(p + 1, ctas, sk_iters)) continue;  // an empty range
      while (sm90::flag_acquire_gpu(&flags[p]) == 0u) {
      }
      sm90::flag_clear_gpu(&flags[p]);
    }
  }
  sm90::named_barrier_sync(3, Cfg::kConsumerThreads);
  for (int p = c + 1; p < ctas; ++p) {
    const int b = stream_k_begin(p, ctas, sk_iters);
    if (b >= tile_end) break;
    if (b == stream_k_begin(p + 1, ctas, sk_iters)) continue;
    const uint4* slot = stream_k_slot(ws, p);
#pragma unroll
    for (int j = 0; j < kAcc; j += 4) {
      const uint4 v = sm90::ld_global_cg_v4(&slot[(j / 4) * Cfg::kConsumerThreads + t]);
      acc[j] += __builtin_bit_cast(Acc, v.x);
      acc[j + 1] += __builtin_bit_cast(Acc, v.y);
      acc[j + 2] += __builtin_bit_cast(Acc, v.z);
      acc[j + 3] += __builtin_bit_cast(Acc, v.w);
    }
  }
}

}  // namespace fg
#endif  // FG_NVIDIA
