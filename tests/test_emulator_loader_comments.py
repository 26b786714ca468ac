"""The emulator loader's decoding of the assembler's `-show-encoding` output (loader.decode_listing): an instruction
line that carries its source line's comment before "; encoding:" (the register allocator's "Reload Reuse" on AGPR
copies, gfx950's grouped block-scaled whole-K kernel) is an instruction like any other, and an encoding line the
loader cannot parse is an error, never a dropped instruction (a dropped one shifts every pc after it). Text only:
no assembler, no GPU."""
from __future__ import annotations

import pytest

from fusedgemm.testing.emulator.errors import LoadError
from fusedgemm.testing.emulator.loader import decode_listing, resolved_bytes

# As clang -cc1as -show-encoding prints a gfx950 listing with spill comments (bytes from the real kernel).
LISTING = """\
k:
\ts_mov_b64 exec, s[2:3]                  ; encoding: [0x02,0x01,0xfe,0xbe]
\tv_accvgpr_write_b32 a111, v33\t;  Reload Reuse ; encoding: [0x6f,0x40,0xd9,0xd3,0x21,0x01,0x00,0x18]
\tv_accvgpr_read_b32 v7, a111\t;  Reload Reuse ; encoding: [0x07,0x40,0xd8,0xd3,0x6f,0x01,0x00,0x18]
\ts_cbranch_vccnz .LBB0_1                 ; encoding: [A,A,0x87,0xbf]
                                        ;   fixup A - offset: 0, value: .LBB0_1, kind: fixup_si_sopp_br
\ts_mov_b64 s[2:3], exec                  ; encoding: [0x7e,0x01,0x82,0xbe]
.LBB0_1:
\ts_endpgm                                ; encoding: [0x00,0x00,0x81,0xbf]
"""


def test_commented_instructions_are_decoded():
    instrs = decode_listing(LISTING, "k")
    assert [i.mnemonic for i in instrs] == ["s_mov_b64", "v_accvgpr_write_b32", "v_accvgpr_read_b32",
                                           "s_cbranch_vccnz", "s_mov_b64", "s_endpgm"]
    assert [i.pc for i in instrs] == [0, 4, 12, 20, 24, 28]
    write = instrs[1]
    assert write.text == "v_accvgpr_write_b32 a111, v33" and write.operands == ["a111", "v33"]
    assert write.modifiers == [] and len(write.encoding) == 8
    # The branch skips one 4-byte instruction: simm16 1 (counted with the 8-byte AGPR moves before it in place).
    assert instrs[3].target == ".LBB0_1" and instrs[3].target_index == 5
    assert resolved_bytes(instrs)[20:24] == bytes([0x01, 0x00, 0x87, 0xbf])


def test_unparsed_encoding_line_is_an_error():
    bad = LISTING.replace("\ts_endpgm ", "\t1s_endpgm ")
    with pytest.raises(LoadError, match="cannot parse the assembler's encoding line"):
        decode_listing(bad, "k")
