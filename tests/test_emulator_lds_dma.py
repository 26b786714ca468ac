"""Loads straight into LDS in the emulator (testing/emulator/isa_mem.py compile_lds_dma): `buffer_load_dword ... lds`
(gfx942 and gfx950), gfx950's `buffer_load_dwordx4 ... lds` and `global_load_lds_dwordx4`, through the real
assembler. Lane l's bytes land at M0 + the instruction offset + l * (4 or 16); the buffer's range check gives zeros;
lanes outside EXEC write nothing; and an LDS access to the bytes before an s_waitcnt vmcnt retires the load is a
hazard."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("msgpack")
import torch  # noqa: E402

from fusedgemm.testing.emulator.errors import HazardError  # noqa: E402
from fusedgemm.testing.emulator.memory import Memory  # noqa: E402
from fusedgemm.testing.emulator.snippet import run_snippet  # noqa: E402

LANE = np.arange(64)
M0 = 124
RAW = 0x00027000  # dword 3 of a raw buffer descriptor (as the package's arch/cdna_buffer.hpp makes them)


def _buffer(mem, t, num):
    p = mem.register(t, "src")
    return {4: p & 0xFFFFFFFF, 5: p >> 32, 6: num, 7: RAW}


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_buffer_load_dword_to_lds(arch):
    """One dword a lane at M0 + offset + 4 l: offset:16 moves both the memory and the LDS address; dwords past
    num_records load zeros; lane 63, off in EXEC, leaves its LDS bytes as they were (0)."""
    mem = Memory()
    src = torch.arange(100, 164, dtype=torch.int32)
    s = _buffer(mem, src, 40 * 4) | {M0: 256}
    w = run_snippet(["v_lshlrev_b32_e32 v1, 2, v0", "buffer_load_dword v1, s[4:7], 0 offen offset:16 lds",
                     "s_waitcnt vmcnt(0)", "s_mov_b64 exec, -1", "v_lshlrev_b32_e32 v3, 2, v0",
                     "v_add_u32_e32 v3, 0x110, v3",
                     "ds_read_b32 v2, v3", "s_waitcnt lgkmcnt(0)"],
                    arch, s=s, v={0: LANE}, exec_mask=(1 << 63) - 1, memory=mem, lds_bytes=1024)
    want = np.where(LANE * 4 + 16 + 4 <= 160, LANE + 104, 0)
    want[63] = 0
    assert (w.v[2].view(np.int32) == want).all()


def test_buffer_load_dwordx4_to_lds_gfx950():
    """gfx950's 16-byte form: lane l's four dwords at M0 + 16 l (soffset moves the memory address only)."""
    mem = Memory()
    src = torch.arange(0, 300, dtype=torch.int32)
    s = _buffer(mem, src, 300 * 4) | {M0: 64, 2: 8}
    w = run_snippet(["v_lshlrev_b32_e32 v1, 4, v0", "buffer_load_dwordx4 v1, s[4:7], s2 offen lds",
                     "s_waitcnt vmcnt(0)", "v_add_u32_e32 v3, 64, v1", "ds_read_b128 v[4:7], v3",
                     "s_waitcnt lgkmcnt(0)"],
                    "gfx950", s=s, v={0: LANE}, memory=mem, lds_bytes=2048)
    got = np.stack([w.v[4 + j].view(np.int32) for j in range(4)], 1)
    assert (got == (LANE[:, None] * 4 + 2 + np.arange(4)[None, :])).all()


def test_global_load_lds_dwordx4_gfx950():
    """global_load_lds_dwordx4 with an SGPR base: lane l's 16 bytes at M0 + offset + 16 l."""
    mem = Memory()
    src = torch.arange(1000, 1300, dtype=torch.int32)
    p = mem.register(src, "src")
    w = run_snippet(["v_lshlrev_b32_e32 v1, 4, v0", "global_load_lds_dwordx4 v1, s[4:5] offset:32",
                     "s_waitcnt vmcnt(0)", "v_add_u32_e32 v3, 32, v1", "ds_read_b128 v[4:7], v3",
                     "s_waitcnt lgkmcnt(0)"],
                    "gfx950", s={4: p & 0xFFFFFFFF, 5: p >> 32, M0: 0}, v={0: LANE}, memory=mem, lds_bytes=2048)
    got = np.stack([w.v[4 + j].view(np.int32) for j in range(4)], 1)
    assert (got == 1000 + LANE[:, None] * 4 + 8 + np.arange(4)[None, :]).all()


@pytest.mark.parametrize("access", ["ds_read_b32 v2, v3", "ds_write_b32 v3, v0"])
def test_lds_access_before_the_wait_is_a_hazard(access):
    """A wave that reads (or overwrites) the bytes of its own load to LDS before s_waitcnt vmcnt retires it: a
    HazardError naming the load; with the wait the same read returns the data."""
    mem = Memory()
    src = torch.arange(64, dtype=torch.int32)
    s = _buffer(mem, src, 64 * 4) | {M0: 0}
    load = ["v_lshlrev_b32_e32 v1, 2, v0", "buffer_load_dword v1, s[4:7], 0 offen lds", "v_mov_b32_e32 v3, v1"]
    with pytest.raises(HazardError, match="buffer_load_dword v1, s\\[4:7\\], 0 offen lds.*s_waitcnt vmcnt"):
        run_snippet(load + [access], "gfx942", s=s, v={0: LANE}, memory=mem, lds_bytes=512)
    w = run_snippet(load + ["s_waitcnt vmcnt(0)", "ds_read_b32 v2, v3", "s_waitcnt lgkmcnt(0)"], "gfx942", s=s,
                    v={0: LANE}, memory=mem, lds_bytes=512)
    assert (w.v[2] == LANE).all()
