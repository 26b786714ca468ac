"""Instruction unit tests of the AMD emulator (fusedgemm.testing.emulator): each instruction, assembled by the
package's clang for the arch, executed on one wave, against values worked out from the ISA's definition."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("msgpack")
from fusedgemm.testing.emulator.errors import UnknownInstruction  # noqa: E402
from fusedgemm.testing.emulator.snippet import run_snippet  # noqa: E402
from fusedgemm.testing.emulator.wave import POISON  # noqa: E402

ARCHES = ["gfx942", "gfx950"]
LANE = np.arange(64)


def f32(x):
    return np.asarray(x, np.float32)


def bits(x):
    return f32(x).view(np.uint32)


def vf(w, r):
    return w.v[r].view(np.float32)


@pytest.fixture(params=ARCHES)
def arch(request):
    return request.param


def test_salu_arith_and_scc(arch):
    w = run_snippet(["s_add_u32 s4, s0, s1", "s_addc_u32 s5, s2, s3"], arch,
                    s={0: 0xFFFFFFFF, 1: 2, 2: 7, 3: 1})
    assert (w.s[4], w.s[5]) == (1, 9)  # the carry of the low add went into the high add
    w = run_snippet(["s_lshl_b64 s[4:5], s[0:1], 4", "s_ashr_i32 s6, s2, 4", "s_mul_hi_i32 s7, s2, s3",
                     "s_bfe_u32 s8, s3, 0x40004"], arch, s={0: 0x8000000F, 1: 0x1, 2: -256, 3: 0x12345678})
    assert (w.s[5] << 32 | w.s[4]) == (0x1_8000000F << 4) & (2**64 - 1)
    assert w.s[6] == (-16) & 0xFFFFFFFF
    assert w.s[7] == ((-256 * 0x12345678) >> 32) & 0xFFFFFFFF
    assert w.s[8] == (0x12345678 >> 4) & 0xF
    w = run_snippet(["s_cmp_lt_i32 s0, s1", "s_cselect_b32 s2, 11, 22"], arch, s={0: -5, 1: 3})
    assert w.s[2] == 11 and w.scc == 1
    w = run_snippet(["s_cmp_lt_u32 s0, s1", "s_cselect_b32 s2, 11, 22"], arch, s={0: -5, 1: 3})
    assert w.s[2] == 22 and w.scc == 0
    w = run_snippet(["s_movk_i32 s0, 0x8001", "s_mov_b64 s[2:3], -1"], arch)
    assert w.s[0] == 0xFFFF8001 and (w.s[2], w.s[3]) == (0xFFFFFFFF, 0xFFFFFFFF)


def test_saveexec_and_branches(arch):
    # lanes 0..9 take the then-branch; EXEC is restored after
    w = run_snippet(["v_cmp_gt_u32_e32 vcc, 10, v0", "s_and_saveexec_b64 s[4:5], vcc",
                     "s_cbranch_execz .Lskip", "v_mov_b32_e32 v1, 7", ".Lskip:", "s_or_b64 exec, exec, s[4:5]",
                     "v_add_u32_e32 v1, 1, v1"], arch, v={0: LANE, 1: 100})
    assert (w.v[1] == np.where(LANE < 10, 8, 101)).all()
    assert w.exec_int() == 2**64 - 1
    w = run_snippet(["s_mov_b64 exec, 0", "s_cbranch_execz .Lout", "s_mov_b32 s0, 1", ".Lout:"], arch, s={0: 5})
    assert w.s[0] == 5
    # a counted loop
    w = run_snippet(["s_mov_b32 s0, 0", ".Lloop:", "s_add_i32 s0, s0, 3", "s_cmp_lt_i32 s0, 20",
                     "s_cbranch_scc1 .Lloop"], arch)
    assert w.s[0] == 21


def test_valu_float(arch):
    a = f32(np.linspace(-3, 5, 64))
    b = f32(np.linspace(0.25, 7, 64))
    c = f32(np.linspace(1, -1, 64))
    w = run_snippet(["v_add_f32_e32 v4, v1, v2", "v_mul_f32_e32 v5, v1, v2", "v_fma_f32 v6, v1, v2, v3",
                     "v_fmac_f32_e32 v3, v1, v2", "v_max_f32_e32 v7, v1, v2", "v_sub_f32_e64 v8, |v1|, -v2",
                     "v_fmaak_f32 v9, v1, v2, 0x40400000", "v_fmamk_f32 v10, v1, 0x40400000, v2"],
                    arch, v={1: a, 2: b, 3: c})
    assert (vf(w, 4) == a + b).all() and (vf(w, 5) == a * b).all()
    exact = (a.astype(np.float64) * b + c).astype(np.float32)
    assert (vf(w, 6) == exact).all() and (vf(w, 3) == exact).all()
    assert (vf(w, 7) == np.maximum(a, b)).all()
    assert (vf(w, 8) == np.abs(a) + b).all()
    assert (vf(w, 9) == (a.astype(np.float64) * b + 3).astype(np.float32)).all()
    assert (vf(w, 10) == (a.astype(np.float64) * 3 + b).astype(np.float32)).all()


def test_fma_single_rounding():
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is a float32 tie; + 2^-60 lies above it, so the one rounding goes up.
    # Rounding through float64 first would drop 2^-60 and round the tie to even (down).
    a = f32(1 + 2**-12)
    c = f32(2**-60)
    w = run_snippet(["v_fma_f32 v3, v1, v1, v4", "v_fma_f32 v5, v1, v1, -v4"], "gfx942", v={1: a, 4: c})
    assert vf(w, 3)[0] == np.float32(1 + 2**-11 + 2**-23)
    assert vf(w, 5)[0] == np.float32(1 + 2**-11)


def test_valu_integer(arch):
    x = (LANE * 0x01010101 + 12345).astype(np.uint32)
    y = (LANE * 7 + 3).astype(np.uint32)
    w = run_snippet(["v_mul_lo_u32 v3, v1, v2", "v_mul_hi_u32 v4, v1, v2", "v_bfe_u32 v5, v1, 8, 5",
                     "v_lshl_add_u32 v6, v1, 3, v2", "v_add3_u32 v7, v1, v2, 5", "v_ashrrev_i32_e32 v8, 4, v1",
                     "v_lshl_or_b32 v9, v2, 16, v2", "v_and_or_b32 v10, v1, s0, v2", "v_or3_b32 v11, v1, v2, 1"],
                    arch, v={1: x, 2: y}, s={0: 0xFF})
    x64, y64 = x.astype(np.uint64), y.astype(np.uint64)
    assert (w.v[3] == (x64 * y64 & 0xFFFFFFFF)).all()
    assert (w.v[4] == (x64 * y64 >> np.uint64(32))).all()
    assert (w.v[5] == (x >> 8) & 31).all()
    assert (w.v[6] == ((x << 3) + y)).all()
    assert (w.v[7] == x + y + 5).all()
    assert (w.v[8] == (x.view(np.int32) >> 4).view(np.uint32)).all()
    assert (w.v[9] == ((y << 16) | y)).all()
    assert (w.v[10] == ((x & 0xFF) | y)).all()
    assert (w.v[11] == (x | y | 1)).all()


def test_valu_64bit(arch):
    lo = (LANE * 0x10000001).astype(np.uint32)
    hi = (LANE + 5).astype(np.uint32)
    w = run_snippet(["v_lshl_add_u64 v[4:5], v[0:1], 2, v[2:3]", "v_mad_u64_u32 v[6:7], s[0:1], v0, v1, v[2:3]",
                     "v_mad_i64_i32 v[8:9], s[0:1], v1, s4, v[2:3]", "v_mov_b64_e32 v[10:11], v[0:1]"],
                    arch, v={0: lo, 1: hi, 2: hi, 3: lo}, s={4: -3})
    a = lo.astype(np.uint64) | hi.astype(np.uint64) << np.uint64(32)
    c = hi.astype(np.uint64) | lo.astype(np.uint64) << np.uint64(32)
    m64 = np.uint64(2**64 - 1)
    got = lambda r: w.v[r].astype(np.uint64) | w.v[r + 1].astype(np.uint64) << np.uint64(32)  # noqa: E731
    assert (got(4) == ((a << np.uint64(2)) + c) & m64).all()
    assert (got(6) == lo.astype(np.uint64) * hi.astype(np.uint64) + c).all()
    assert (got(8) == (hi.astype(np.int64) * -3).view(np.uint64) + c).all()
    assert (got(10) == a).all()


def test_vcmp_cndmask_and_exec_masking(arch):
    a = f32(np.linspace(-2, 2, 64))
    w = run_snippet(["v_cmp_gt_f32_e32 vcc, 0, v1", "v_cndmask_b32_e64 v2, v1, -v1, vcc",
                     "v_cmp_ngt_f32_e64 s[4:5], v1, 0", "v_mov_b32_e32 v3, 1.0"], arch, v={1: a, 3: 9},
                    exec_mask=(1 << 32) - 1)
    assert (vf(w, 2)[:32] == np.abs(a[:32])).all()
    assert (w.v[2][32:] == POISON).all()  # inactive lanes are not written
    assert (vf(w, 3)[:32] == 1).all() and (w.v[3][32:] == 9).all()
    want = sum(1 << i for i in range(32) if not a[i] > 0)
    assert (w.s[4] | w.s[5] << 32) == want


def test_sdwa_and_bf16_rounding(arch):
    x = bits(np.linspace(-1e3, 1e3, 64))
    w = run_snippet(["v_mov_b32_e32 v2, 64", "v_or_b32_sdwa v3, v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD "
                     "src0_sel:WORD_1 src1_sel:DWORD", "v_cvt_f16_f32_e32 v4, v1", "v_cvt_f32_f16_e32 v5, v4"],
                    arch, v={1: x})
    assert (w.v[3] == ((x >> 16) | 64)).all()
    h = x.view(np.float32).astype(np.float16)
    assert (w.v[4] == h.view(np.uint16)).all()  # the high half is zeroed
    assert (vf(w, 5) == h.astype(np.float32)).all()


def test_packed_f32_and_fma_mix(arch):
    a, b = f32(LANE * 0.5), f32(LANE * -0.25 + 1)
    w = run_snippet(["v_pk_add_f32 v[4:5], v[0:1], v[2:3]", "v_pk_mul_f32 v[6:7], v[0:1], v[2:3] op_sel_hi:[0,1]",
                     "v_fma_mixlo_f16 v8, v0, v1, 0 op_sel_hi:[0,0,0]"], arch,
                    v={0: a, 1: b, 2: b, 3: a, 8: 0xABCD0000})
    assert (vf(w, 4) == a + b).all() and (vf(w, 5) == b + a).all()
    assert (vf(w, 6) == a * b).all() and (vf(w, 7) == a * a).all()  # op_sel_hi 0: the high result reads src0.lo
    h = (a.astype(np.float64) * b).astype(np.float16).view(np.uint16)
    assert (w.v[8] == (0xABCD0000 | h.astype(np.uint32))).all()


def test_transcendental_and_division(arch):
    x = f32(np.linspace(-4, 4, 64))
    y = f32(np.linspace(0.5, 9, 64))
    w = run_snippet(["v_exp_f32_e32 v2, v0", "v_rcp_f32_e32 v3, v1"], arch, v={0: x, 1: y})
    assert np.allclose(vf(w, 2), np.exp2(x.astype(np.float64)), rtol=2**-22)
    assert np.allclose(vf(w, 3), 1 / y.astype(np.float64), rtol=2**-22)
    # the compiler's IEEE division sequence (as in quantize_rows): correctly rounded x / y
    seq = ["v_div_scale_f32 v2, s[4:5], v1, v1, v0", "v_div_scale_f32 v3, vcc, v0, v1, v0", "v_rcp_f32_e32 v4, v2",
           "v_fma_f32 v5, -v2, v4, 1.0", "v_fmac_f32_e32 v4, v5, v4", "v_mul_f32_e32 v5, v3, v4",
           "v_fma_f32 v6, -v2, v5, v3", "v_fmac_f32_e32 v5, v6, v4", "v_fma_f32 v2, -v2, v5, v3",
           "v_div_fmas_f32 v2, v2, v4, v5", "v_div_fixup_f32 v2, v2, v1, v0"]
    w = run_snippet(seq, arch, v={0: x, 1: y})
    assert (vf(w, 2) == x / y).all()


def test_lds_and_waitcnt_poison(arch):
    lanes = LANE.astype(np.uint32)
    w = run_snippet(["v_lshlrev_b32_e32 v1, 2, v0", "ds_write_b32 v1, v0 offset:16", "s_waitcnt lgkmcnt(0)",
                     "ds_read_b32 v2, v1 offset:16", "v_mov_b32_e32 v3, v2", "s_waitcnt lgkmcnt(0)",
                     "v_mov_b32_e32 v4, v2"], arch, v={0: lanes}, lds_bytes=512)
    assert (w.v[4] == lanes).all()
    assert (w.v[3] == POISON).all()  # read before the wait: poison, as a too-weak wait must


def test_readlane_bpermute(arch):
    lanes = LANE.astype(np.uint32)
    w = run_snippet(["v_readfirstlane_b32 s0, v1", "v_readlane_b32 s1, v1, 5", "v_lshlrev_b32_e32 v2, 2, v0",
                     "v_xor_b32_e32 v2, 4, v2", "ds_bpermute_b32 v3, v2, v1", "s_waitcnt lgkmcnt(0)"], arch,
                    v={0: lanes, 1: lanes * 10}, exec_mask=~1 & (2**64 - 1))
    assert w.s[0] == 10 and w.s[1] == 50
    assert (w.v[3][2:] == (lanes ^ 1)[2:] * 10).all()
    assert w.v[3][1] == 0  # lane 1 reads lane 0, whose EXEC bit is off


def test_unknown_instruction_is_an_error(arch):
    with pytest.raises(UnknownInstruction, match="v_sin_f32"):
        run_snippet(["v_sin_f32_e32 v1, v0"], arch)


def test_byte_and_bit_ops(arch):
    x = (LANE * 0x01020304 + 0x80706050).astype(np.uint32)
    y = (LANE * 0x11111111 + 0x0A0B0C0D).astype(np.uint32)
    sel = np.uint32(0x0C070400)  # bytes: S1.b0, S0.b0, S0.b3, 0x00
    w = run_snippet(["v_perm_b32 v3, v1, v2, s0", "v_max3_u32 v4, v1, v2, s1", "v_cvt_f32_ubyte0_e32 v5, v1",
                     "v_lshlrev_b16_e32 v6, 4, v1", "v_lshlrev_b64 v[8:9], 36, v[10:11]", "v_pk_max_u16 v7, v1, v2"],
                    arch, v={1: x, 2: y, 10: x, 11: y}, s={0: sel, 1: 7})
    b = lambda v, i: (v >> np.uint32(8 * i)) & np.uint32(0xFF)  # noqa: E731
    assert (w.v[3] == (b(y, 0) | b(x, 0) << 8 | b(x, 3) << 16)).all()
    assert (w.v[4] == np.maximum(np.maximum(x, y), 7)).all()
    assert (vf(w, 5) == (x & 0xFF).astype(np.float32)).all()
    assert (w.v[6] == ((x << 4) & 0xFFFF)).all()
    v64 = x.astype(np.uint64) | y.astype(np.uint64) << np.uint64(32)
    shifted = v64 << np.uint64(36)
    assert (w.v[8] == (shifted & np.uint64(0xFFFFFFFF))).all() and (w.v[9] == (shifted >> np.uint64(32))).all()
    lo = np.maximum(x & 0xFFFF, y & 0xFFFF)
    hi = np.maximum(x >> 16, y >> 16)
    assert (w.v[7] == (lo | hi << 16)).all()


def test_bitop3_gfx950():
    x = (LANE * 0x01234567).astype(np.uint32)
    y = (LANE * 0x89ABCDEF + 5).astype(np.uint32)
    z = (LANE * 0x13579BDF + 9).astype(np.uint32)
    # truth tables over (S0, S1, S2) = (0xF0, 0xCC, 0xAA): 0x80 = S0 & S1 & S2, 0xEC = (S0 & S2) | S1
    w = run_snippet(["v_bitop3_b32 v4, v1, v2, v3 bitop3:0x80", "v_bitop3_b32 v5, v1, v2, v3 bitop3:0xec"], "gfx950",
                    v={1: x, 2: y, 3: z})
    assert (w.v[4] == (x & y & z)).all()
    assert (w.v[5] == ((x & z) | y)).all()


def test_conversions(arch):
    x = f32(np.linspace(-70000.5, 70000.5, 64))
    w = run_snippet(["v_cvt_i32_f32_e32 v2, v1", "v_cvt_u32_f32_e32 v3, v1", "v_rndne_f32_e32 v4, v1",
                     "v_cvt_pk_f16_f32 v5, v1, v6" if arch == "gfx950" else "v_pack_b32_f16 v5, v7, v8",
                     "v_cmp_o_f32_e64 s[10:11], v1, v9"], arch,
                    v={1: x, 6: f32(2.5), 7: 0x3C00, 8: 0xC000, 9: f32(np.where(LANE % 3 == 0, np.nan, 1))})
    assert (w.v[2].view(np.int32) == np.trunc(x).astype(np.int32)).all()
    assert (w.v[3] == np.where(x > 0, np.trunc(x), 0).astype(np.uint32)).all()
    assert (vf(w, 4) == np.rint(x)).all()
    if arch == "gfx950":
        h = x.astype(np.float16).view(np.uint16).astype(np.uint32)  # RNE; beyond the f16 range: inf
        assert (w.v[5] == (h | (np.uint32(np.float16(2.5).view(np.uint16)) << 16))).all()
    else:
        assert (w.v[5] == 0xC0003C00).all()
    assert (w.s[10] | w.s[11] << 32) == sum(1 << i for i in range(64) if i % 3)


def test_sdwa_forms(arch):
    x = (LANE * 0x00030007 + 0x12345678).astype(np.uint32)
    y = (LANE * 0x00050003 + 0x0F0F0F0F).astype(np.uint32)
    h = f32(np.linspace(-3, 3, 64)).astype(np.float16).view(np.uint16).astype(np.uint32) << 16
    w = run_snippet(["v_max_u32_sdwa v3, v1, v2 dst_sel:WORD_1 dst_unused:UNUSED_PAD src0_sel:BYTE_1 src1_sel:WORD_0",
                     "v_and_b32_sdwa v4, v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_3 src1_sel:DWORD",
                     "v_cvt_f32_f16_sdwa v5, v6 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1",
                     "v_cmp_gt_u32_e32 vcc, 32, v0",
                     "v_cndmask_b32_sdwa v7, v1, v2, vcc dst_sel:WORD_1 dst_unused:UNUSED_PAD src0_sel:WORD_1 "
                     "src1_sel:WORD_0"], arch, v={0: LANE, 1: x, 2: y, 6: h})
    m = np.maximum((x >> 8) & 0xFF, y & 0xFFFF)
    assert (w.v[3] == ((m & 0xFFFF) << 16)).all()
    assert (w.v[4] == ((x >> 24) & y)).all()
    assert (vf(w, 5) == (h >> 16).astype(np.uint16).view(np.float16).astype(np.float32)).all()
    sel = np.where(LANE < 32, y & 0xFFFF, x >> 16)
    assert (w.v[7] == sel << 16).all()


def test_scalar_misc(arch):
    w = run_snippet(["s_abs_i32 s2, s0", "s_brev_b32 s3, s1", "s_lshl2_add_u32 s4, s1, s0", "s_bitcmp1_b32 s1, 4",
                     "s_cselect_b32 s5, 1, 2", "s_min_i32 s6, s0, s1", "s_orn2_b64 s[8:9], s[0:1], s[0:1]"],
                    arch, s={0: -20, 1: 0x10})
    assert w.s[2] == 20 and w.s[3] == 0x08000000 and w.s[4] == (0x40 - 20) & 0xFFFFFFFF
    assert w.s[5] == 1 and w.s[6] == (-20) & 0xFFFFFFFF and (w.s[8], w.s[9]) == (0xFFFFFFFF, 0xFFFFFFFF)


def test_memory_forms(arch):
    import torch

    from fusedgemm.testing.emulator.memory import Memory

    mem = Memory()
    buf = torch.arange(64, dtype=torch.int32)
    out = torch.zeros(64 * 4, dtype=torch.int32)
    pb, po = mem.register(buf, "buf"), mem.register(out, "out")
    kern = torch.tensor([pb & 0xFFFFFFFF, pb >> 32, po & 0xFFFFFFFF, po >> 32, 7, 8, 9, 10], dtype=torch.int64)
    pk = mem.register(kern.to(torch.int32), "args")
    w = run_snippet(["s_load_dwordx8 s[4:11], s[0:1], 0x0", "s_waitcnt lgkmcnt(0)",
                     "v_lshlrev_b32_e32 v1, 2, v0", "global_load_dword v2, v1, s[4:5] offset:4",
                     "s_waitcnt vmcnt(0)", "v_lshlrev_b32_e32 v10, 4, v0", "v_mov_b32_e32 v3, s8",
                     "v_mov_b32_e32 v4, s9", "v_mov_b32_e32 v5, s10", "global_store_dwordx3 v10, v[2:4], s[6:7]",
                     "global_store_short_d16_hi v10, v5, s[6:7] offset:12", "ds_write_b96 v10, v[2:4]",
                     "s_waitcnt lgkmcnt(0)", "ds_read_b96 v[6:8], v10", "s_waitcnt lgkmcnt(0) vmcnt(0)"],
                    arch, s={0: pk & 0xFFFFFFFF, 1: pk >> 32}, v={0: np.where(LANE < 63, LANE, 62)},
                    exec_mask=(1 << 63) - 1, memory=mem, lds_bytes=1024)
    got = out.view(64, 4).numpy()
    assert (got[:63, 0] == np.arange(1, 64)).all() and (got[:63, 1] == 7).all() and (got[:63, 2] == 8).all()
    assert (got[:63, 3] == 0).all()  # the high half of 9 is 0
    assert (got[63] == 0).all()  # lane 63 is off
    assert (w.v[6][:63] == np.arange(1, 64)).all() and (w.v[8][:63] == 8).all()


def test_out_of_bounds_is_a_fault(arch):
    import torch

    from fusedgemm.testing.emulator.errors import MemoryFault
    from fusedgemm.testing.emulator.memory import Memory

    mem = Memory()
    p = mem.register(torch.zeros(16, dtype=torch.int32), "small")
    with pytest.raises(MemoryFault, match=r"global_load_dword v2, v1, s\[4:5\].*0x"):
        run_snippet(["v_lshlrev_b32_e32 v1, 2, v0", "global_load_dword v2, v1, s[4:5]"], arch,
                    s={4: p & 0xFFFFFFFF, 5: p >> 32}, v={0: LANE}, memory=mem)


def test_buffer_descriptor_range_check(arch):
    """buffer_* through a V#: in-range dwords load, out-of-range ones return 0; out-of-range stores are dropped."""
    import torch

    from fusedgemm.testing.emulator.memory import Memory

    mem = Memory()
    src = torch.arange(100, 164, dtype=torch.int32)
    dst = torch.full((64,), -1, dtype=torch.int32)
    ps, pd = mem.register(src, "src"), mem.register(dst, "dst")
    num = 40 * 4  # num_records: 40 dwords of the 64 are in range
    desc = {4: ps & 0xFFFFFFFF, 5: ps >> 32, 6: num, 7: 0x00027000, 8: pd & 0xFFFFFFFF, 9: pd >> 32, 10: num,
            11: 0x00027000}
    w = run_snippet(["v_lshlrev_b32_e32 v1, 2, v0", "buffer_load_dword v2, v1, s[4:7], 0 offen",
                     "s_waitcnt vmcnt(0)", "buffer_store_dword v2, v1, s[8:11], 0 offen offset:16"], arch,
                    s=desc, v={0: LANE}, memory=mem)
    want = np.where(LANE < 40, LANE + 100, 0)
    assert (w.v[2].view(np.int32) == want).all()
    got = dst.numpy()
    assert (got[4:40] == want[:36]).all()  # lane i stored at dword i + 4 while i * 4 + 16 + 4 <= num
    assert (got[:4] == -1).all() and (got[40:] == -1).all()


def test_dpp(arch):
    """DPP lane movement (CDNA3 ISA, "DPP"): each lane reads the source lane the control names; a source
    outside the row / wave (or EXEC-disabled) gives 0 with bound_ctrl, else the lane is not written."""
    src = (LANE + 100).astype(np.uint32)
    w = run_snippet(["v_mov_b32_dpp v2, v1 quad_perm:[3,2,1,0] row_mask:0xf bank_mask:0xf",
                     "v_mov_b32_dpp v3, v1 row_shr:1 row_mask:0xf bank_mask:0xf",
                     "v_mov_b32_dpp v4, v1 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0",
                     "v_mov_b32_dpp v5, v1 row_ror:3 row_mask:0xf bank_mask:0xf",
                     "v_mov_b32_dpp v6, v1 row_mirror row_mask:0xf bank_mask:0xf",
                     "v_mov_b32_dpp v7, v1 row_bcast:15 row_mask:0xa bank_mask:0xf",
                     "v_add_u32_dpp v8, v1, v1 wave_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0"],
                    arch, v={1: src, 3: 7, 5: 7, 7: 7})
    row, i = LANE & ~15, LANE & 15
    assert (w.v[2] == ((LANE & ~3) + (3 - (LANE & 3)) + 100)).all()
    assert (w.v[3] == np.where(i >= 1, LANE - 1 + 100, 7)).all()  # no bound_ctrl: row starts keep their value
    assert (w.v[4] == np.where(i >= 1, LANE - 1 + 100, 0)).all()
    assert (w.v[5] == row + (i - 3) % 16 + 100).all()
    assert (w.v[6] == row + 15 - i + 100).all()
    want7 = np.where(((LANE >> 4) & 1) == 1, row - 1 + 100, 7)  # rows 1 and 3 (row_mask 0xa) get lane 16r - 1
    assert (w.v[7] == want7).all()
    assert (w.v[8] == np.where(LANE >= 1, LANE - 1 + 100, 0) + src).all()
