"""v_mfma_* semantics (fusedgemm.testing.emulator.mfma) against AMD's matrix instruction calculator and exact
integer arithmetic.

Expected layouts are NOT computed by the module under test:
  * CALC_CDNA3: the "Matrix element to register mapping" formulas that AMD's matrix instruction calculator
    (github.com/ROCm/amd_matrix_instruction_calculator, matrix_calculator.py at commit
    2ef91896bcdc4d26624f952e5c905c787cd9bc9e, `-a CDNA3 -i <mnemonic> -d`) prints for every dense CDNA3 MFMA,
    copied verbatim as text and evaluated here. `lane` / `GPR` formulas; "R.[hi : lo]" = bits hi..lo of the
    lane's register R of the operand.
  * CALC_POINTS: single answers of the calculator's --get-register mode with CBSZ / ABID / BLGP set.
  * CDNA4_HAND: the gfx950-only forms (the calculator has no CDNA4 tables at that commit), written by hand from
    the CDNA4 ISA's operand description: the CDNA3 rule with twice the values per lane in the same lane order
    (and for f8f6f4 the 32 values of a lane packed densely, 8 / 6 / 4 bits each); cross-checked again against
    IREE's MMA layout tables (IREE below, test_gfx950_layouts_match_iree_tables).
The operands are then packed and D unpacked by this file's own packer from those formulas, and D must equal
A @ B + C exactly for random integer-valued matrices (so any layout error is an exact mismatch).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from fusedgemm.testing.emulator import mfma, numerics

# (M, N, K, blocks), (A lane, A GPR), (B lane, B GPR), (C/D lane, C/D GPR) -- the calculator's text, verbatim.
CALC_CDNA3 = {
    'v_mfma_f32_16x16x8_xf32': ((16, 16, 8, 1),
        ('16 * floor(k / 2) + i', '(k % 2)'),
        ('16 * floor(k / 2) + j', '(k % 2)'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_32x32x4_xf32': ((32, 32, 4, 1),
        ('32 * floor(k / 2) + i', '(k % 2)'),
        ('32 * floor(k / 2) + j', '(k % 2)'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_32x32x1_2b_f32': ((32, 32, 1, 2),
        ('32 * block + i', '0'),
        ('32 * block + j', '0'),
        ('(32 * floor(i / 4)) % 64 + j', '16 * block + 4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_16x16x1_4b_f32': ((16, 16, 1, 4),
        ('16 * block + i', '0'),
        ('16 * block + j', '0'),
        ('16 * floor(i / 4) + j', '4 * block + (i % 4)')),
    'v_mfma_f32_4x4x1_16b_f32': ((4, 4, 1, 16),
        ('4 * block + i', '0'),
        ('4 * block + j', '0'),
        ('4 * block + j', 'i')),
    'v_mfma_f32_32x32x2_f32': ((32, 32, 2, 1),
        ('32 * k + i', '0'),
        ('32 * k + j', '0'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_16x16x4_f32': ((16, 16, 4, 1),
        ('16 * k + i', '0'),
        ('16 * k + j', '0'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_32x32x4_2b_f16': ((32, 32, 4, 2),
        ('32 * block + i', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('32 * block + j', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('(32 * floor(i / 4)) % 64 + j', '16 * block + 4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_16x16x4_4b_f16': ((16, 16, 4, 4),
        ('16 * block + i', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * block + j', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(i / 4) + j', '4 * block + (i % 4)')),
    'v_mfma_f32_4x4x4_16b_f16': ((4, 4, 4, 16),
        ('4 * block + i', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('4 * block + j', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('4 * block + j', 'i')),
    'v_mfma_f32_32x32x8_f16': ((32, 32, 8, 1),
        ('32 * floor(k / 4) + i', '(floor(k / 2) % 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('32 * floor(k / 4) + j', '(floor(k / 2) % 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_16x16x16_f16': ((16, 16, 16, 1),
        ('16 * floor(k / 4) + i', '(floor(k / 2) % 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(k / 4) + j', '(floor(k / 2) % 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_i32_32x32x4_2b_i8': ((32, 32, 4, 2),
        ('32 * block + i', '0.[8*k+7 : 8*k]'),
        ('32 * block + j', '0.[8*k+7 : 8*k]'),
        ('(32 * floor(i / 4)) % 64 + j', '16 * block + 4 * floor(i / 8) + (i % 4)')),
    'v_mfma_i32_16x16x4_4b_i8': ((16, 16, 4, 4),
        ('16 * block + i', '0.[8*k+7 : 8*k]'),
        ('16 * block + j', '0.[8*k+7 : 8*k]'),
        ('16 * floor(i / 4) + j', '4 * block + (i % 4)')),
    'v_mfma_i32_4x4x4_16b_i8': ((4, 4, 4, 16),
        ('4 * block + i', '0.[8*k+7 : 8*k]'),
        ('4 * block + j', '0.[8*k+7 : 8*k]'),
        ('4 * block + j', 'i')),
    'v_mfma_i32_32x32x16_i8': ((32, 32, 16, 1),
        ('32 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('32 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_i32_16x16x32_i8': ((16, 16, 32, 1),
        ('16 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_32x32x4_2b_bf16': ((32, 32, 4, 2),
        ('32 * block + i', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('32 * block + j', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('(32 * floor(i / 4)) % 64 + j', '16 * block + 4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_16x16x4_4b_bf16': ((16, 16, 4, 4),
        ('16 * block + i', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * block + j', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(i / 4) + j', '4 * block + (i % 4)')),
    'v_mfma_f32_4x4x4_16b_bf16': ((4, 4, 4, 16),
        ('4 * block + i', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('4 * block + j', 'floor(k / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('4 * block + j', 'i')),
    'v_mfma_f32_32x32x8_bf16': ((32, 32, 8, 1),
        ('32 * floor(k / 4) + i', '(floor(k / 2) % 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('32 * floor(k / 4) + j', '(floor(k / 2) % 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_16x16x16_bf16': ((16, 16, 16, 1),
        ('16 * floor(k / 4) + i', '(floor(k / 2) % 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(k / 4) + j', '(floor(k / 2) % 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_16x16x32_bf8_bf8': ((16, 16, 32, 1),
        ('16 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_16x16x32_bf8_fp8': ((16, 16, 32, 1),
        ('16 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_16x16x32_fp8_bf8': ((16, 16, 32, 1),
        ('16 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_16x16x32_fp8_fp8': ((16, 16, 32, 1),
        ('16 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_32x32x16_bf8_bf8': ((32, 32, 16, 1),
        ('32 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('32 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_32x32x16_bf8_fp8': ((32, 32, 16, 1),
        ('32 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('32 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_32x32x16_fp8_bf8': ((32, 32, 16, 1),
        ('32 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('32 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_32x32x16_fp8_fp8': ((32, 32, 16, 1),
        ('32 * floor(k / 8) + i', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('32 * floor(k / 8) + j', '(floor(k / 4) % 2).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
}

# gfx950-only forms, by hand (see module docstring). f8f6f4: GPR given for fp8; fp6 / fp4 pack densely.
CDNA4_HAND = {
    'v_mfma_f32_16x16x32_f16': ((16, 16, 32, 1),
        ('16 * floor(k / 8) + i', 'floor((k % 8) / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(k / 8) + j', 'floor((k % 8) / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_16x16x32_bf16': ((16, 16, 32, 1),
        ('16 * floor(k / 8) + i', 'floor((k % 8) / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(k / 8) + j', 'floor((k % 8) / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_32x32x16_f16': ((32, 32, 16, 1),
        ('32 * floor(k / 8) + i', 'floor((k % 8) / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('32 * floor(k / 8) + j', 'floor((k % 8) / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_32x32x16_bf16': ((32, 32, 16, 1),
        ('32 * floor(k / 8) + i', 'floor((k % 8) / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('32 * floor(k / 8) + j', 'floor((k % 8) / 2).[16*(k % 2)+15 : 16*(k % 2)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_i32_16x16x64_i8': ((16, 16, 64, 1),
        ('16 * floor(k / 16) + i', 'floor((k % 16) / 4).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(k / 16) + j', 'floor((k % 16) / 4).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_i32_32x32x32_i8': ((32, 32, 32, 1),
        ('32 * floor(k / 16) + i', 'floor((k % 16) / 4).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('32 * floor(k / 16) + j', 'floor((k % 16) / 4).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
    'v_mfma_f32_16x16x128_f8f6f4': ((16, 16, 128, 1),
        ('16 * floor(k / 32) + i', 'floor((k % 32) / 4).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(k / 32) + j', 'floor((k % 32) / 4).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('16 * floor(i / 4) + j', '(i % 4)')),
    'v_mfma_f32_32x32x64_f8f6f4': ((32, 32, 64, 1),
        ('32 * floor(k / 32) + i', 'floor((k % 32) / 4).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('32 * floor(k / 32) + j', 'floor((k % 32) / 4).[8*(k % 4)+7 : 8*(k % 4)]'),
        ('(32 * floor(i / 4)) % 64 + j', '4 * floor(i / 8) + (i % 4)')),
}
CDNA4_HAND['v_mfma_scale_f32_16x16x128_f8f6f4'] = CDNA4_HAND['v_mfma_f32_16x16x128_f8f6f4']
CDNA4_HAND['v_mfma_scale_f32_32x32x64_f8f6f4'] = CDNA4_HAND['v_mfma_f32_32x32x64_f8f6f4']

# Single answers of the calculator's --get-register mode (commit as above), with broadcast modifiers:
# (mnemonic, operand, block, row-or-k, k-or-col, cbsz, abid, blgp) -> (GPR, lane, lo bit, hi bit).
#   e.g. `-a CDNA3 -i v_mfma_f32_16x16x4_4b_f16 -A -g -I 3 -K 2 -b 2 --cbsz 2 --abid 1` -> A[3][2].B2 = v1{19}.[15:0]
CALC_POINTS = [
    ("v_mfma_f32_16x16x4_4b_f16", "A", 2, 3, 2, 0, 0, 0, (1, 35, 0, 15)),
    ("v_mfma_f32_16x16x4_4b_f16", "A", 2, 3, 2, 2, 1, 0, (1, 19, 0, 15)),
    ("v_mfma_f32_16x16x4_4b_f16", "B", 1, 2, 3, 0, 0, 3, (1, 35, 0, 15)),
    ("v_mfma_f32_32x32x4_2b_f16", "A", 1, 5, 3, 1, 0, 0, (1, 5, 16, 31)),
    ("v_mfma_f32_4x4x4_16b_bf16", "A", 13, 2, 1, 3, 5, 0, (0, 54, 16, 31)),
    ("v_mfma_i32_16x16x4_4b_i8", "A", 3, 9, 3, 2, 2, 0, (0, 41, 24, 31)),
    ("v_mfma_f32_32x32x2_f32", "B", 0, 1, 7, 0, 0, 1, (0, 7, 0, 31)),
    ("v_mfma_f32_16x16x4_f32", "B", 0, 0, 7, 0, 0, 2, (0, 39, 0, 31)),
    ("v_mfma_f32_16x16x4_f32", "B", 0, 3, 7, 0, 0, 3, (0, 7, 0, 31)),
    ("v_mfma_f32_16x16x1_4b_f32", "B", 2, 0, 5, 0, 0, 5, (0, 21, 0, 31)),
    ("v_mfma_f32_4x4x1_16b_f32", "B", 9, 0, 1, 0, 0, 7, (0, 53, 0, 31)),
    ("v_mfma_i32_32x32x4_2b_i8", "B", 0, 2, 30, 0, 0, 6, (0, 46, 16, 23)),
    ("v_mfma_f32_32x32x4_2b_bf16", "B", 0, 2, 3, 0, 0, 4, (1, 3, 0, 15)),
]

ALL_LAYOUTS = {**CALC_CDNA3, **CDNA4_HAND}
GFX942_ONLY = {"v_mfma_f32_16x16x8_xf32", "v_mfma_f32_32x32x4_xf32"}
FMT_BITS = {"f32": 32, "xf32": 32, "f16": 16, "bf16": 16, "i8": 8, "fp8": 8, "bf8": 8, "fp6": 6, "bf6": 6, "fp4": 4}
F8F6F4 = ["fp8", "bf8", "fp6", "bf6", "fp4"]


# ---- an independent reading of the formulas ---------------------------------------------------------------------
def _ev(expr: str, **v) -> np.ndarray:
    """Evaluate one of the calculator's formulas (floor, /, %, *, +) on integer arrays, broadcast to their shape."""
    arrays = {k: np.asarray(x, dtype=np.float64) for k, x in v.items()}
    value = eval(expr, {"__builtins__": {}}, {"floor": np.floor, **arrays})
    return np.broadcast_to(np.rint(value).astype(np.int64), np.broadcast_shapes(*(a.shape for a in arrays.values())))


WIDTHS = {}


def _loc(lane_expr: str, gpr_expr: str, **v):
    """-> (lane, bit position in the lane's concatenated dwords) for the elements v (arrays); records the
    formula's element width in WIDTHS[gpr_expr]."""
    lane = _ev(lane_expr, **v)
    if ".[" in gpr_expr:
        reg_e, bits_e = gpr_expr.split(".[")
        hi_e, lo_e = bits_e.rstrip("]").split(":")
        reg, lo, hi = _ev(reg_e, **v), _ev(lo_e, **v), _ev(hi_e, **v)
        width = np.unique(hi - lo + 1)
        assert width.size == 1
        WIDTHS[gpr_expr] = int(width[0])
    else:
        reg, lo = _ev(gpr_expr, **v), np.zeros_like(lane)
        WIDTHS[gpr_expr] = 32
    return np.broadcast_to(lane, reg.shape), 32 * reg + lo


def _grid(*n):
    return np.meshgrid(*[np.arange(x) for x in n], indexing="ij")


def _operand_pos(name, which, width):
    """(lane, bitpos) arrays over [blocks, M, K] (A), [blocks, K, N] (B) or [blocks, M, N] (D)."""
    (M, N, K, nb), fa, fb, fd = ALL_LAYOUTS[name]
    if which == "A":
        b, i, k = _grid(nb, M, K)
        lane, pos = _loc(*fa, block=b, i=i, k=k)
    elif which == "B":
        b, k, j = _grid(nb, K, N)
        lane, pos = _loc(*fb, block=b, k=k, j=j)
    else:
        b, i, j = _grid(nb, M, N)
        lane, pos = _loc(*fd, block=b, i=i, j=j)
    return lane, pos


def _dense_pos(name, which, bits):
    """Element positions for `bits`-wide elements: the formula's lane, slot = bitpos // 8 for the 8-bit f8f6f4 table
    re-spaced to `bits` per slot (dense packing), else the formula's own bit position."""
    lane, pos = _operand_pos(name, which, 32)
    if "f8f6f4" in name:
        pos = (pos // 8) * bits
    return lane, pos


def _pack(lane, pos, codes, bits, n_dwords):
    """Scatter codes (same shape as lane/pos) into uint32 [64, n_dwords] by the bit positions, each bit once."""
    stream = np.zeros((64, n_dwords * 32), np.uint8)
    seen = np.zeros_like(stream)
    for t in range(bits):
        stream[lane.ravel(), pos.ravel() + t] = (codes.ravel().astype(np.int64) >> t) & 1
        seen[lane.ravel(), pos.ravel() + t] += 1
    assert seen.max() == 1, "layout maps two elements to one bit"
    return np.packbits(stream.reshape(64, n_dwords, 32), axis=2, bitorder="little").view("<u4")[..., 0]


def _unpack(regs, lane, pos, bits):
    stream = np.unpackbits(regs.astype("<u4").view(np.uint8).reshape(64, -1), axis=1, bitorder="little")
    out = np.zeros(lane.shape, np.int64)
    for t in range(bits):
        out |= stream[lane, pos + t].astype(np.int64) << t
    return out


# ---- independent value <-> code tables for the test's integer-valued inputs -------------------------------------
def _small_float_codes(ebits, mbits, bias, *, fnuz=False):
    """value -> code for the finite non-negative codes of a 1.e.m format (sign bit added by the caller)."""
    table = {}
    for code in range(1 << (ebits + mbits)):
        e, m = code >> mbits, code & ((1 << mbits) - 1)
        if not fnuz and (ebits, mbits) in ((4, 3),) and code == (1 << (ebits + mbits)) - 1:
            continue  # e4m3fn NaN
        if not fnuz and (ebits, mbits) == (5, 2) and e == 31:
            continue  # e5m2 Inf / NaN
        val = m * 2.0 ** (1 - bias - mbits) if e == 0 else (1 + m / 2 ** mbits) * 2.0 ** (e - bias)
        table.setdefault(val, code)
    return table


SMALL = {  # (arch, format) -> (ebits, mbits, bias, fnuz)
    ("gfx942", "fp8"): (4, 3, 8, True), ("gfx942", "bf8"): (5, 2, 16, True),
    ("gfx950", "fp8"): (4, 3, 7, False), ("gfx950", "bf8"): (5, 2, 15, False),
    ("gfx950", "fp6"): (2, 3, 1, False), ("gfx950", "bf6"): (3, 2, 3, False), ("gfx950", "fp4"): (2, 1, 1, False),
}


def _random_values(rng, fmt, shape):
    if fmt == "i8":
        return rng.integers(-128, 128, shape).astype(np.float64)
    if fmt == "fp4":
        return rng.choice([0, 1, 2, 3, 4, 6, -1, -2, -3, -4, -6, 0.5, -1.5], shape).astype(np.float64)
    return rng.integers(-7, 8, shape).astype(np.float64)


def _encode(vals, fmt, arch):
    if fmt in ("f32", "xf32"):
        return vals.astype(np.float32).view(np.uint32).astype(np.int64)
    if fmt == "f16":
        return vals.astype(np.float16).view(np.uint16).astype(np.int64)
    if fmt == "bf16":
        return (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.int64)
    if fmt == "i8":
        return vals.astype(np.int64) & 0xFF
    ebits, mbits, bias, fnuz = SMALL[(arch, fmt)]
    table = _small_float_codes(ebits, mbits, bias, fnuz=fnuz)
    sign = 1 << (ebits + mbits)
    return np.vectorize(lambda v: table[abs(v)] | (sign if v < 0 else 0))(vals).astype(np.int64)


def _decode_f32(regs):
    return regs.astype(np.uint32).view(np.float32)


def _instr_types(name, cbsz=0, blgp=0):
    if "f8f6f4" in name:
        return F8F6F4[cbsz], F8F6F4[blgp], "f32"
    tail = name.split("_")
    acc = tail[2] if tail[1] == "mfma" else tail[3]
    if "fp8" in name or "bf8" in name:
        return tail[-2], tail[-1], acc
    return tail[-1], tail[-1], acc


def _arches(name):
    if name in GFX942_ONLY:
        return ["gfx942"]
    return ["gfx950"] if name in CDNA4_HAND else ["gfx942", "gfx950"]


CASES = [(n, a) for n in ALL_LAYOUTS for a in _arches(n)]


# ---- tests ------------------------------------------------------------------------------------------------------
def test_supported_lists_match_the_tables():
    assert set(mfma.supported("gfx942")) == set(CALC_CDNA3)
    assert set(mfma.supported("gfx950")) == (set(CALC_CDNA3) - GFX942_ONLY) | set(CDNA4_HAND)


@pytest.mark.parametrize("name", sorted(ALL_LAYOUTS))
def test_slot_helpers_match_calculator_formulas(name):
    """mfma.a_slot / b_slot / d_slot over every element equal the calculator's lane / GPR / bit formulas."""
    arch = _arches(name)[-1]
    inf = mfma.info(name, arch)
    at, bt, _ = _instr_types(name)
    for which, fn, bits in (("A", mfma.a_slot, FMT_BITS[at]), ("B", mfma.b_slot, FMT_BITS[bt])):
        lane, pos = _dense_pos(name, which, bits)
        gpr_expr = ALL_LAYOUTS[name][1 if which == "A" else 2][1]
        assert WIDTHS[gpr_expr] == (8 if "f8f6f4" in name else bits)
        b, x, y = _grid(*lane.shape)
        got_lane, slot = fn(inf, b, x, y)
        np.testing.assert_array_equal(got_lane, lane, err_msg=f"{name} {which} lane")
        np.testing.assert_array_equal(slot * bits, pos, err_msg=f"{name} {which} bit position")
    lane, pos = _operand_pos(name, "D", 32)
    b, i, j = _grid(*lane.shape)
    got_lane, reg = mfma.d_slot(inf, b, i, j)
    np.testing.assert_array_equal(got_lane, lane)
    np.testing.assert_array_equal(32 * reg, pos)


@pytest.mark.parametrize("name,arch", CASES)
def test_operand_dwords_match_calculator(name, arch):
    (M, N, K, nb), *_ = ALL_LAYOUTS[name]
    at, bt, _ = _instr_types(name)
    n_a, n_b, n_c = mfma.operand_dwords(name, arch)
    assert n_a * 32 == M * K * nb * FMT_BITS[at] // 64
    assert n_b * 32 == N * K * nb * FMT_BITS[bt] // 64
    assert n_c == M * N * nb // 64


def _run_random(name, arch, seed, cbsz=0, abid=0, blgp=0, *, fmt_a=None, fmt_b=None):
    rng = np.random.default_rng(seed)
    (M, N, K, nb), *_ = ALL_LAYOUTS[name]
    f8 = "f8f6f4" in name
    at, bt, acc = _instr_types(name, cbsz if f8 else 0, blgp if f8 else 0)
    n_a, n_b, n_c = mfma.operand_dwords(name, arch, cbsz if f8 else 0, blgp if f8 else 0)
    A = _random_values(rng, at, (nb, M, K))
    B = _random_values(rng, bt, (nb, K, N))
    C = rng.integers(-1000, 1000, (nb, M, N)).astype(np.float64)
    la, pa = _dense_pos(name, "A", FMT_BITS[at])
    lb, pb = _dense_pos(name, "B", FMT_BITS[bt])
    ld, pd = _operand_pos(name, "D", 32)
    a = _pack(la, pa, _encode(A, at, arch), FMT_BITS[at], n_a)
    b = _pack(lb, pb, _encode(B, bt, arch), FMT_BITS[bt], n_b)
    c_codes = C.astype(np.int32).view(np.uint32) if acc == "i32" else C.astype(np.float32).view(np.uint32)
    c = _pack(ld, pd, c_codes.astype(np.int64), 32, n_c)
    # expected, with the modifiers applied at the register level (calculator semantics, see CALC_POINTS)
    if cbsz and not f8:
        src = (np.arange(nb) // 2 ** cbsz) * 2 ** cbsz + abid
        A = A[src]
    if blgp and not f8:
        L = np.arange(64)
        src = {1: L % 32, 2: 32 + L % 32, 3: (L + 16) % 64}.get(blgp, 16 * (blgp - 4) + L % 16)
        codes = _unpack(b[src], lb, pb, FMT_BITS[bt])
        B = _decode_values(codes, bt, arch)
    expected = np.einsum("bik,bkj->bij", A, B) + C
    args = (a.copy(), b.copy(), c.copy())
    extra = {}
    if "scale" in name:  # scales of 2^0 (E8M0 127) in byte 1 of every lane
        extra = dict(scale_a=np.full(64, 127 << 8, np.uint32), scale_b=np.full(64, 127 << 8, np.uint32),
                     scale_sel_a=1, scale_sel_b=1)
    d = mfma.execute(name, a, b, c, arch=arch, cbsz=cbsz, abid=abid, blgp=blgp, **extra)
    for x, y in zip(args, (a, b, c)):
        np.testing.assert_array_equal(x, y, err_msg="execute modified an input")
    assert d.dtype == np.uint32 and d.shape == (64, n_c)
    got = _unpack(d, ld, pd, 32)
    if acc == "i32":
        want = (expected.astype(np.int64) & 0xFFFFFFFF)
    else:
        want = expected.astype(np.float32).view(np.uint32).astype(np.int64)
    np.testing.assert_array_equal(got, want, err_msg=f"{name} on {arch}: D != A @ B + C")


def _decode_values(codes, fmt, arch):
    if fmt in ("f32", "xf32"):
        return codes.astype(np.uint32).view(np.float32).astype(np.float64)
    if fmt == "f16":
        return codes.astype(np.uint16).view(np.float16).astype(np.float64)
    if fmt == "bf16":
        return (codes.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if fmt == "i8":
        return codes.astype(np.uint8).view(np.int8).astype(np.float64)
    ebits, mbits, bias, fnuz = SMALL[(arch, fmt)]
    inv = {c: v for v, c in _small_float_codes(ebits, mbits, bias, fnuz=fnuz).items()}
    sign = 1 << (ebits + mbits)
    return np.vectorize(lambda c: (-1.0 if c & sign else 1.0) * inv[c & (sign - 1)])(codes)


@pytest.mark.parametrize("name,arch", CASES)
def test_random_integer_matrices_exact(name, arch):
    """Every implemented MFMA on every arch it exists on: random integer-valued A, B, C packed by the calculator's
    layout -> D == A @ B + C bit for bit."""
    for seed in range(2):
        _run_random(name, arch, seed)


MODIFIER_CASES = [(n, a, cb, ab, bl) for n in CALC_CDNA3 for a in _arches(n)
                  if CALC_CDNA3[n][0][3] > 1 or n in ("v_mfma_f32_32x32x2_f32", "v_mfma_f32_16x16x4_f32")
                  for cb, ab, bl in ((0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 6), (1, 1, 0), (2, 3, 5))
                  if cb == 0 or CALC_CDNA3[n][0][3] >= 2 ** cb]


@pytest.mark.parametrize("name,arch,cbsz,abid,blgp", MODIFIER_CASES)
def test_broadcast_modifiers(name, arch, cbsz, abid, blgp):
    _run_random(name, arch, 7, cbsz, abid, blgp)


@pytest.mark.parametrize("point", CALC_POINTS, ids=lambda p: f"{p[0]}-{p[1]}-cbsz{p[5]}-abid{p[6]}-blgp{p[7]}")
def test_calculator_points_one_hot(point):
    """Set only the register bits the calculator names for one A (or B) element to 1.0 (ones elsewhere in the other
    operand): exactly that block's row i (column j) of D becomes 1, through execute()."""
    name, which, blk, x, y, cbsz, abid, blgp, (gpr, lane, lo, hi) = point
    arch = "gfx942"
    (M, N, K, nb), *_ = CALC_CDNA3[name]
    at, bt, acc = _instr_types(name)
    n_a, n_b, n_c = mfma.operand_dwords(name, arch)
    bits = hi - lo + 1
    one = {"f32": 0x3F800000, "f16": 0x3C00, "bf16": 0x3F80, "i8": 1}
    hot = np.zeros((64, n_a if which == "A" else n_b), np.uint32)
    hot[lane, gpr] = np.uint32(one[at] << lo)
    # the other operand: ones in its k == (A point: y, B point: x) slice only, so D[b][i][j] = A'[b][i][k] (or
    # B'[k][j]) of that one k, whatever other logical elements the broadcast feeds from the hot register
    if which == "A":
        lb, pb = _operand_pos(name, "B", FMT_BITS[bt])
        vals = np.zeros((nb, K, N))
        vals[:, y, :] = 1
        other = _pack(lb, pb, _encode(vals, bt, arch), FMT_BITS[bt], n_b)
        a, b = hot, other
    else:
        la, pa = _operand_pos(name, "A", FMT_BITS[at])
        vals = np.zeros((nb, M, K))
        vals[:, :, x] = 1
        other = _pack(la, pa, _encode(vals, at, arch), FMT_BITS[at], n_a)
        a, b = other, hot
    d = mfma.execute(name, a, b, np.zeros((64, n_c), np.uint32), arch=arch, cbsz=cbsz, abid=abid, blgp=blgp)
    ld, pd = _operand_pos(name, "D", 32)
    D = _unpack(d, ld, pd, 32)
    D = D.astype(np.uint32).view(np.float32) if acc == "f32" else D
    sel = D[blk, x, :] if which == "A" else D[blk, :, y]
    np.testing.assert_array_equal(sel, np.ones_like(sel), err_msg=f"{point}")
    assert bits == FMT_BITS[at if which == "A" else bt]


@pytest.mark.parametrize("name,arch", [(n, a) for n, a in CASES if "f8f6f4" in n and "scale" not in n])
@pytest.mark.parametrize("fa", range(5))
@pytest.mark.parametrize("fb", range(5))
def test_f8f6f4_formats(name, arch, fa, fb):
    """cbsz picks A's format, blgp B's (0 fp8 e4m3, 1 bf8 e5m2, 2 fp6 e2m3, 3 bf6 e3m2, 4 fp4 e2m1); fp6 / fp4
    operands pack 32 values densely into 6 / 4 dwords."""
    assert mfma.operand_dwords(name, arch, fa, fb)[:2] == ({0: 8, 1: 8, 2: 6, 3: 6, 4: 4}[fa],
                                                           {0: 8, 1: 8, 2: 6, 3: 6, 4: 4}[fb])
    _run_random(name, arch, 3 + fa * 5 + fb, fa, 0, fb)


def test_matches_fragment_model_16x16():
    """The existing CPU fragment model (fusedgemm.fragment_model.cdna_mfma_16x16: A lane l value i = A[l % 16]
    [kpl*(l//16) + i], D lane l reg e = D[4*(l//16) + e][l % 16]) and execute() agree on every 16x16 atom our
    kernels use."""
    from fusedgemm import fragment_model as fm
    rng = np.random.default_rng(11)
    for name, arch, fmt in (("v_mfma_f32_16x16x32_fp8_fp8", "gfx942", "fp8"),
                            ("v_mfma_i32_16x16x32_i8", "gfx942", "i8"),
                            ("v_mfma_f32_16x16x16_bf16", "gfx942", "bf16"),
                            ("v_mfma_f32_16x16x16_f16", "gfx942", "f16"),
                            ("v_mfma_f32_16x16x8_xf32", "gfx942", "xf32"),
                            ("v_mfma_f32_16x16x128_f8f6f4", "gfx950", "fp8"),
                            ("v_mfma_i32_16x16x64_i8", "gfx950", "i8"),
                            ("v_mfma_f32_16x16x32_bf16", "gfx950", "bf16"),
                            ("v_mfma_f32_16x16x32_f16", "gfx950", "f16"),
                            ("v_mfma_f32_16x16x4_f32", "gfx950", "f32")):
        kpl = mfma.info(name, arch).values_per_lane()
        av = _random_values(rng, fmt, (64, kpl))
        bv = _random_values(rng, fmt, (64, kpl))
        lanes = np.broadcast_to(np.arange(64)[:, None], (64, kpl))
        slots = np.broadcast_to(np.arange(kpl)[None, :], (64, kpl))
        bits = FMT_BITS[fmt]
        n = kpl * bits // 32
        a = _pack(lanes, slots * bits, _encode(av, fmt, arch), bits, n)
        b = _pack(lanes, slots * bits, _encode(bv, fmt, arch), bits, n)
        d = mfma.execute(name, a, b, np.zeros((64, 4), np.uint32), arch=arch)
        want = fm.cdna_mfma_16x16(av, bv)
        got = d.view(np.int32) if fmt == "i8" else _decode_f32(d)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_int8_wraps_to_int32():
    name, arch = "v_mfma_i32_16x16x32_i8", "gfx942"
    a = np.full((64, 2), 0x7F7F7F7F, np.uint32)                    # every A element 127
    b = np.full((64, 2), 0x7F7F7F7F, np.uint32)
    c = np.full((64, 4), 2 ** 31 - 100, np.uint32)
    d = mfma.execute(name, a, b, c, arch=arch).view(np.int32)
    want = np.int64(2 ** 31 - 100) + 32 * 127 * 127
    assert np.all(d == np.int32(((want + 2 ** 31) % 2 ** 32) - 2 ** 31))
    a = np.full((64, 2), 0x80808080, np.uint32)                    # -128 * -128 * 32 + C = -2^31 - ...
    c = np.full((64, 4), np.uint32(2 ** 31), np.uint32)            # C = -2^31
    d = mfma.execute(name, a, a, c, arch=arch).view(np.int32)
    assert np.all(d == np.int32(-2 ** 31 + 32 * 128 * 128))


def test_xf32_truncates_operands():
    """gfx942 xf32 reads 1.8.10 of each fp32 operand, dropping the low 13 mantissa bits (toward zero)."""
    name = "v_mfma_f32_16x16x8_xf32"
    x = np.float32(1.0 + 2.0 ** -10 + 2.0 ** -11 + 2.0 ** -20)      # keeps 1 + 2^-10
    a = np.zeros((64, 2), np.uint32)
    a[0, 0] = x.view(np.uint32)                                    # A[0][0]
    b = np.zeros((64, 2), np.uint32)
    b[0, 0] = np.float32(-1.0).view(np.uint32)                     # B[0][0]
    d = mfma.execute(name, a, b, np.zeros((64, 4), np.uint32), arch="gfx942")
    assert _decode_f32(d)[0, 0] == -(1.0 + 2.0 ** -10)
    d = mfma.execute("v_mfma_f32_16x16x4_f32", a[:, :1], b[:, :1], np.zeros((64, 4), np.uint32), arch="gfx942")
    assert _decode_f32(d)[0, 0] == -x                              # the f32 form is exact


def test_single_rounding_per_instruction():
    """The model: exact products, one RNE rounding of (sum + C) per instruction. C = 2^24, two products of +1:
    exact 2^24 + 2 is representable (sequential fp32 adds would give 2^24)."""
    name = "v_mfma_f32_16x16x4_f32"
    a = np.zeros((64, 1), np.uint32)
    b = np.zeros((64, 1), np.uint32)
    a[[0, 16], 0] = np.float32(1).view(np.uint32)                  # A[0][0], A[0][1]
    b[[0, 16], 0] = np.float32(1).view(np.uint32)                  # B[0][0], B[1][0]
    c = np.zeros((64, 4), np.uint32)
    c[0, 0] = np.float32(2 ** 24).view(np.uint32)                  # C[0][0]
    d = mfma.execute(name, a, b, c, arch="gfx942")
    assert _decode_f32(d)[0, 0] == 2 ** 24 + 2
    c[0, 0] = np.float32(2 ** 24).view(np.uint32)
    a[16, 0] = 0
    d = mfma.execute(name, a, b, c, arch="gfx942")                 # 2^24 + 1: a tie, rounds to even 2^24
    assert _decode_f32(d)[0, 0] == 2 ** 24


def test_specials_propagate():
    name = "v_mfma_f32_16x16x16_f16"
    a = np.zeros((64, 2), np.uint32)
    b = np.zeros((64, 2), np.uint32)
    a[0, 0] = 0x7C00                                               # A[0][0] = +Inf (f16)
    b[0, 0] = 0x3C00                                               # B[0][0] = 1
    b[1, 0] = 0x0000                                               # B[0][1] = 0 -> Inf * 0 = NaN
    c = np.zeros((64, 4), np.uint32)
    d = _decode_f32(mfma.execute(name, a, b, c, arch="gfx942"))
    assert d[0, 0] == np.inf and np.isnan(d[1, 0])
    a[0, 0] = 0x0001                                               # smallest f16 denormal, not flushed
    b[0, 0] = 0x3C00
    d = _decode_f32(mfma.execute(name, a, b, c, arch="gfx942"))
    assert d[0, 0] == np.float32(2.0 ** -24)
    fp8_nan = {"gfx942": 0x80, "gfx950": 0x7F}
    for arch, code in fp8_nan.items():
        a = np.zeros((64, 2), np.uint32)
        a[0, 0] = code
        d = _decode_f32(mfma.execute("v_mfma_f32_16x16x32_fp8_fp8", a, a, np.zeros((64, 4), np.uint32), arch=arch))
        assert np.isnan(d[0, 0]) and d[1, 1] == 0, arch


def test_fp8_formats_follow_the_arch():
    """0x7F is 240 in gfx942's e4m3fnuz, NaN in gfx950's e4m3fn; 0x7E is 224 / 448."""
    a = np.zeros((64, 2), np.uint32)
    b = np.zeros((64, 2), np.uint32)
    a[0, 0] = 0x7E
    b[0, 0] = 0x40                                                 # 1.0 in e4m3fnuz (bias 8): exponent 8
    d = _decode_f32(mfma.execute("v_mfma_f32_16x16x32_fp8_fp8", a, b, np.zeros((64, 4), np.uint32), arch="gfx942"))
    assert d[0, 0] == 224
    b[0, 0] = 0x38                                                 # 1.0 in e4m3fn (bias 7): exponent 7
    d = _decode_f32(mfma.execute("v_mfma_f32_16x16x32_fp8_fp8", a, b, np.zeros((64, 4), np.uint32), arch="gfx950"))
    assert d[0, 0] == 448 * 1.0 and numerics.decode(np.array([0x38]), "e4m3fn")[0] == 1.0


def test_scaled_f8f6f4():
    """v_mfma_scale_*: each lane's E8M0 byte (scale_sel picks it) scales the 32 values that lane holds; the
    unscaled form equals scales of 127 (2^0)."""
    rng = np.random.default_rng(5)
    name, plain = "v_mfma_scale_f32_16x16x128_f8f6f4", "v_mfma_f32_16x16x128_f8f6f4"
    a = rng.integers(0, 2 ** 32, (64, 8), dtype=np.uint64).astype(np.uint32) & np.uint32(0x37373737)
    b = rng.integers(0, 2 ** 32, (64, 8), dtype=np.uint64).astype(np.uint32) & np.uint32(0x37373737)
    c = np.zeros((64, 4), np.uint32)
    ones = np.full(64, 127 << 16, np.uint32)
    ref = mfma.execute(plain, a, b, c, arch="gfx950")
    got = mfma.execute(name, a, b, c, arch="gfx950", scale_a=ones, scale_b=ones, scale_sel_a=2, scale_sel_b=2)
    np.testing.assert_array_equal(got, ref)
    sa = np.full(64, 127, np.uint32)
    sa[16:32] = 128                                                # k in 32..63 of A doubled
    a2 = a.copy()
    a2[16:32] = 0                                                  # ... equals removing them and adding 2x
    part = mfma.execute(plain, a2, b, c, arch="gfx950")
    only = mfma.execute(plain, a - a2, b, c, arch="gfx950")
    got = mfma.execute(name, a, b, c, arch="gfx950", scale_a=sa, scale_b=np.full(64, 127, np.uint32))
    want = _decode_f32(part).astype(np.float64) + 2 * _decode_f32(only).astype(np.float64)
    np.testing.assert_allclose(_decode_f32(got), want, rtol=2 ** -22)
    with pytest.raises(ValueError, match="scale"):
        mfma.execute(name, a, b, c, arch="gfx950")


def test_bad_input_errors():
    z2, z4 = np.zeros((64, 2), np.uint32), np.zeros((64, 4), np.uint32)
    with pytest.raises(ValueError, match=r"v_mfma_f32_16x16x8_xf32.*gfx950"):
        mfma.execute("v_mfma_f32_16x16x8_xf32", z2, z2, z4, arch="gfx950")
    with pytest.raises(ValueError, match=r"v_mfma_f32_16x16x128_f8f6f4.*gfx942"):
        mfma.operand_dwords("v_mfma_f32_16x16x128_f8f6f4", "gfx942")
    with pytest.raises(ValueError, match=r"v_mfma_f32_99x99_bogus.*gfx942"):
        mfma.execute("v_mfma_f32_99x99_bogus", z2, z2, z4, arch="gfx942")
    with pytest.raises(ValueError, match="gfx1100"):
        mfma.supported("gfx1100")
    with pytest.raises(ValueError, match="BLGP"):
        mfma.execute("v_mfma_f32_16x16x32_fp8_fp8", z2, z2, z4, arch="gfx942", blgp=1)
    with pytest.raises(ValueError, match="CBSZ"):
        mfma.execute("v_mfma_f32_16x16x16_bf16", z2, z2, z4, arch="gfx942", cbsz=1)
    with pytest.raises(ValueError, match=r"\[64, 2\]"):
        mfma.execute("v_mfma_f32_16x16x16_bf16", z2[:, :1], z2, z4, arch="gfx942")
    with pytest.raises(ValueError, match="format"):
        mfma.operand_dwords("v_mfma_f32_16x16x128_f8f6f4", "gfx950", cbsz=5)


def test_legacy_aliases():
    assert mfma.info("v_mfma_f32_16x16x16bf16_1k", "gfx942").name == "v_mfma_f32_16x16x16_bf16"
    assert mfma.info("v_mfma_f32_32x32x1f32", "gfx950").name == "v_mfma_f32_32x32x1_2b_f32"


@pytest.mark.slow
def test_calculator_itself_if_available():
    """Re-derive CALC_CDNA3 from the calculator when it can run here (MATRIX_CALCULATOR=path/to/matrix_calculator.py
    with `tabulate` importable); never required."""
    path = os.environ.get("MATRIX_CALCULATOR")
    if not path or not os.path.exists(path):
        pytest.skip("set MATRIX_CALCULATOR to AMD's matrix_calculator.py to run")
    for name, (dims, fa, fb, fd) in CALC_CDNA3.items():
        out = subprocess.run([sys.executable, path, "-a", "CDNA3", "-i", name, "-d"], capture_output=True,
                             text=True, check=False)
        if "No module named" in out.stderr:
            pytest.skip(out.stderr.strip().splitlines()[-1])
        assert f"A[i][k].block Lane: {fa[0]}" in out.stdout
        assert f"A[i][k].block GPR: {fa[1]}" in out.stdout
        assert f"B[k][j].block Lane: {fb[0]}" in out.stdout
        assert f"B[k][j].block GPR: {fb[1]}" in out.stdout
        assert f"C or D[i][j].block Lane: {fd[0]}" in out.stdout
        assert f"C or D[i][j].block GPR: {fd[1]}" in out.stdout


def test_every_mfma_our_kernels_use_is_supported():
    """Every __builtin_amdgcn_mfma_* in hip_src maps to a mnemonic execute() knows on the arch whose header uses it
    (builtin name -> LLVM mnemonic; the scale builtin with zero scales is emitted as the unscaled instruction)."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[1] / "hip_src"
    if not root.exists():
        pytest.skip("no hip_src next to the tests (installed-package run)")
    builtin_to_mnemonic = {
        "mfma_f32_16x16x32_fp8_fp8": "v_mfma_f32_16x16x32_fp8_fp8", "mfma_i32_16x16x32_i8": "v_mfma_i32_16x16x32_i8",
        "mfma_f32_16x16x16bf16_1k": "v_mfma_f32_16x16x16_bf16", "mfma_f32_16x16x16f16": "v_mfma_f32_16x16x16_f16",
        "mfma_f32_16x16x8_xf32": "v_mfma_f32_16x16x8_xf32",
        "mfma_scale_f32_16x16x128_f8f6f4": "v_mfma_f32_16x16x128_f8f6f4",
        "mfma_i32_16x16x64_i8": "v_mfma_i32_16x16x64_i8", "mfma_f32_16x16x32_bf16": "v_mfma_f32_16x16x32_bf16",
        "mfma_f32_16x16x32_f16": "v_mfma_f32_16x16x32_f16", "mfma_f32_16x16x4f32": "v_mfma_f32_16x16x4_f32",
    }
    found = 0
    for arch in ("gfx942", "gfx950"):
        for path in root.rglob(f"*{arch}*"):
            for builtin in re.findall(r"__builtin_amdgcn_(mfma_\w+)\s*\(", path.read_text()):
                assert builtin in builtin_to_mnemonic, f"{path.name}: new MFMA builtin {builtin}: add it here"
                assert mfma.info(builtin_to_mnemonic[builtin], arch).name in mfma.supported(arch)
                found += 1
    assert found >= 10


# A second, independent source for the gfx950-only forms: IREE's MMA intrinsic layout tables
# (github.com/iree-org/iree, compiler/src/iree/compiler/Codegen/Dialect/GPU/IR/IREEGPUAttrs.cpp,
# getSingleSubgroupLayout): {outer, thread, tstrides, element} per operand, copied as numbers.
#   mfmaLhs16xK(k) = {1,1},{16,4},{1,16},{1,k/4}    mfmaRhsKx16(k) = {1,1},{4,16},{16,1},{k/4,1}
#   mfmaLhs32xK(k) = {1,1},{32,2},{1,32},{1,k/2}    mfmaRhsKx32(k) = {1,1},{2,32},{32,1},{k/2,1}
#   mfmaAcc16x16   = {1,1},{4,16},{16,1},{4,1}      mfmaAcc32x32   = {4,1},{2,32},{32,1},{4,1}
IREE = {
    16: (lambda k: ((1, 1), (16, 4), (1, 16), (1, k // 4)), lambda k: ((1, 1), (4, 16), (16, 1), (k // 4, 1)),
         ((1, 1), (4, 16), (16, 1), (4, 1))),
    32: (lambda k: ((1, 1), (32, 2), (1, 32), (1, k // 2)), lambda k: ((1, 1), (2, 32), (32, 1), (k // 2, 1)),
         ((4, 1), (2, 32), (32, 1), (4, 1))),
}


def _iree_positions(layout):
    """{(row, col): (lane, register-element index)} of an IREE layout: index = outer-major, then element."""
    (o0, o1), (t0, t1), (s0, s1), (e0, e1) = layout
    out = {}
    for a in range(o0):
        for b in range(o1):
            for x in range(t0):
                for y in range(t1):
                    for p in range(e0):
                        for q in range(e1):
                            row, col = (a * t0 + x) * e0 + p, (b * t1 + y) * e1 + q
                            out[(row, col)] = (x * s0 + y * s1, (a * o1 + b) * e0 * e1 + p * e1 + q)
    return out


@pytest.mark.parametrize("name", [n for n in CDNA4_HAND if "scale" not in n])
def test_gfx950_layouts_match_iree_tables(name):
    inf = mfma.info(name, "gfx950")
    lhs, rhs, acc = IREE[inf.m]
    for (i, k), (lane, slot) in _iree_positions(lhs(inf.k)).items():
        assert mfma.a_slot(inf, 0, i, k) == (lane, slot), (name, "A", i, k)
    for (k, j), (lane, slot) in _iree_positions(rhs(inf.k)).items():
        assert mfma.b_slot(inf, 0, k, j) == (lane, slot), (name, "B", k, j)
    for (i, j), (lane, reg) in _iree_positions(acc).items():
        assert mfma.d_slot(inf, 0, i, j) == (lane, reg), (name, "D", i, j)
