// AMD CDNA3 / CDNA4 (gfx942, gfx950) buffer loads: a 128-bit V# resource descriptor over [base, base + bytes) and
// 16-byte loads through it (buffer_load_dwordx4 ... offen). The hardware's range check does the masking: a load
// whose offset is at or past `bytes` returns zeros and touches no memory, so a kernel masks ragged rows by the
// descriptor's size and a ragged K chunk by an offset past it (kBufferOob), with a v_cndmask rather than a branch.
// The descriptor must be uniform over the wave (SGPRs): built from kernel arguments and block ids only.
#pragma once
#include "../platform.hpp"

namespace fg {
namespace arch {

typedef unsigned int u32x4 __attribute__((ext_vector_type(4)));

// Word 3 of the V#: DATA_FORMAT = 32 bits (what hipBLASLt / CK use on gfx90a-gfx950 for untyped buffer loads).
constexpr int kBufferWord3 = 0x00020000;
// An offset past every descriptor of ours (callers keep `bytes` <= kBufferOob): its loads return zeros. Not
// 2^31, which the compiler materialises as v_bfrev_b32 (not modelled by the emulator); offset + 16 stays < 2^32.
constexpr u32 kBufferOob = 0x7ffffff0u;

struct BufferRsrc {
  __amdgpu_buffer_rsrc_t r;
};

// bytes: the size of the window; <= kBufferOob.
FG_DEVICE BufferRsrc make_buffer(const void* base, u32 bytes) {
  return BufferRsrc{__builtin_amdgcn_make_buffer_rsrc(const_cast<void*>(base), static_cast<short>(0),
                                                      static_cast<int>(bytes), kBufferWord3)};
}

// The 16 bytes at byte offset `offset` of the window; zeros where offset >= its size.
FG_DEVICE Vec16 buffer_load_vec16(const BufferRsrc& rsrc, u32 offset) {
  const u32x4 v = __builtin_amdgcn_raw_buffer_load_b128(rsrc.r, static_cast<int>(offset), 0, 0);
  return Vec16{{v[0], v[1], v[2], v[3]}};
}

// The 16 bytes at offset + wave_offset: wave_offset is uniform over the wave (an SGPR: the instruction's soffset,
// so advancing a loop-invariant per-lane offset costs no vector instruction). The range check sees `offset` alone
// (CDNA3 / CDNA4 ISA, buffer addressing: soffset is not range-checked), so a caller keeps every access whose
// `offset` is in range inside the window with wave_offset added, and masks with offset = kBufferOob (which stays
// below 2^32 with any wave_offset < 2^31 added).
FG_DEVICE Vec16 buffer_load_vec16(const BufferRsrc& rsrc, u32 offset, u32 wave_offset) {
  const u32x4 v = __builtin_amdgcn_raw_buffer_load_b128(rsrc.r, static_cast<int>(offset),
                                                        static_cast<int>(wave_offset), 0);
  return Vec16{{v[0], v[1], v[2], v[3]}};
}

// The 4 bytes at offset + wave_offset (as buffer_load_vec16's: the range check sees `offset` alone), as a float.
FG_DEVICE float buffer_load_f32(const BufferRsrc& rsrc, u32 offset, u32 wave_offset) {
  return __builtin_bit_cast(float, __builtin_amdgcn_raw_buffer_load_b32(rsrc.r, static_cast<int>(offset),
                                                                        static_cast<int>(wave_offset), 0));
}

// s_waitcnt vmcnt(n), the other counters untouched (gfx9 encoding: vmcnt in bits 3:0 and 15:14, expcnt 6:4,
// lgkmcnt 11:8). For loads the compiler cannot track: its own waits follow the registers a load writes, and a load
// into LDS writes none.
template <int kCount>
FG_DEVICE void wait_vmcnt() {
  static_assert(kCount >= 0 && kCount < 64, "vmcnt: 6 bits");
  __builtin_amdgcn_s_waitcnt((kCount & 15) | ((kCount >> 4) << 14) | 0x0F70);
}

// Loads from a buffer straight into LDS, 16 bytes a lane (buffer_load_dwordx4 ... lds): gfx950 only. gfx942 has
// the dword form alone, four instructions (and four M0 writes) where a 16-byte load and a ds_write_b128 do the
// same, so its kernels keep the copy through registers. Lane l's 16 bytes land at lds_wave + 16 l (lds_wave: the
// wave's base, uniform; the compiler puts it in M0); addressing and range check as buffer_load_vec16's: past the
// window the zeros the range check returns are what lands in LDS (the ISA's out-of-range rule, and the emulator's;
// the first thing to confirm on hardware for the ragged-K tests). The bytes are written when the load completes,
// counted in vmcnt: the issuing wave waits (wait_vmcnt) before a barrier hands them to other waves.
#if defined(__gfx950__)
constexpr bool kLoadsToLdsVec16 = true;
FG_DEVICE void buffer_load_vec16_to_lds(const BufferRsrc& rsrc, Vec16* lds_wave, u32 offset, u32 wave_offset) {
  __builtin_amdgcn_raw_ptr_buffer_load_lds(rsrc.r, (__attribute__((address_space(3))) void*)lds_wave, 16,
                                           static_cast<int>(offset), static_cast<int>(wave_offset), 0, 0);
}
#else
constexpr bool kLoadsToLdsVec16 = false;
// Declared, never defined: a call outside `if constexpr (kLoadsToLdsVec16)` fails to link.
__device__ void buffer_load_vec16_to_lds(const BufferRsrc& rsrc, Vec16* lds_wave, u32 offset, u32 wave_offset);
#endif

// Lane n's value of each row of 16 lanes, in every lane of that row (DPP row_newbcast:n, CDNA2 and later: one VALU
// move). n must fold to a constant (an unrolled loop's index): the DPP control is an immediate.
FG_DEVICE float row_broadcast(int n, float v) {
  const int x = __builtin_bit_cast(int, v);
  int r = x;
  switch (n) {
#define FG_ROW_NEWBCAST(k) \
  case k:                  \
    r = __builtin_amdgcn_update_dpp(x, x, 0x150 + k, 0xf, 0xf, false); \
    break;
    FG_ROW_NEWBCAST(0) FG_ROW_NEWBCAST(1) FG_ROW_NEWBCAST(2) FG_ROW_NEWBCAST(3)
    FG_ROW_NEWBCAST(4) FG_ROW_NEWBCAST(5) FG_ROW_NEWBCAST(6) FG_ROW_NEWBCAST(7)
    FG_ROW_NEWBCAST(8) FG_ROW_NEWBCAST(9) FG_ROW_NEWBCAST(10) FG_ROW_NEWBCAST(11)
    FG_ROW_NEWBCAST(12) FG_ROW_NEWBCAST(13) FG_ROW_NEWBCAST(14) FG_ROW_NEWBCAST(15)
#undef FG_ROW_NEWBCAST
    default:
      break;
  }
  return __builtin_bit_cast(float, r);
}

}  // namespace arch
}  // namespace fg
