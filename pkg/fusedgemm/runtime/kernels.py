"""Kernel signatures as the host sees them: parameter names, C types, and the packed-buffer layout.

The layout follows the C ABI of the kernel parameter block (each argument at the next offset aligned to
its size). The same bytes go to cuLaunchKernel / hipModuleLaunchKernel through the `extra` buffer, and a
CPU test checks every layout against the code objects' own metadata.
"""
from __future__ import annotations

import dataclasses
import struct

_CTYPES = {"ptr": ("Q", 8), "i64": ("q", 8), "i32": ("i", 4), "f32": ("f", 4)}


@dataclasses.dataclass(frozen=True)
class Signature:
    params: tuple[tuple[str, str], ...]  # (name, ctype) in kernel order

    @property
    def offsets(self) -> tuple[int, ...]:
        offs, pos = [], 0
        for _name, ctype in self.params:
            size = _CTYPES[ctype][1]
            pos = (pos + size - 1) // size * size
            offs.append(pos)
            pos += size
        return tuple(offs)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(_CTYPES[c][1] for _n, c in self.params)

    @property
    def struct(self) -> struct.Struct:
        fmt, pos = "<", 0
        for (_name, ctype), off in zip(self.params, self.offsets):
            fmt += "x" * (off - pos) + _CTYPES[ctype][0]
            pos = off + _CTYPES[ctype][1]
        return struct.Struct(fmt)


GEMM_A8 = Signature((
    ("a", "ptr"), ("b", "ptr"), ("out", "ptr"), ("bias", "ptr"), ("scale_a", "ptr"), ("scale_b", "ptr"),
    ("M", "i32"), ("N", "i32"), ("K", "i32"), ("bias_kind", "i32"), ("scale_a_stride", "i32"),
    ("scale_b_stride", "i32"), ("alpha", "f32"),
))

# Must match `enum BiasKind` in hip_src/include/fusedgemm/epilogue.hpp.
BIAS_KIND = {None: 0, "float32": 1, "bfloat16": 2, "float16": 3}

GEMM_A8_IN = {"fp8": "fp8", "int8": "i8"}
GEMM_A8_OUT = {"bfloat16": "bf16", "float16": "f16"}
GEMM_A8_ACTS = ("none", "relu", "silu", "gelu", "gelu_erf")


@dataclasses.dataclass(frozen=True)
class TileConfig:
    name: str
    block_m: int
    block_n: int
    warps: int


# Must match the Config* aliases in hip_src/include/fusedgemm/gemm_a8.hpp and FG_GEMM_A8_CONFIG lines.
GEMM_A8_CONFIGS = {
    "m16n16k8": TileConfig("m16n16k8", 16, 16, 8),
    "m64n16k8": TileConfig("m64n16k8", 64, 16, 8),
    "m128n128": TileConfig("m128n128", 128, 128, 8),
}


def gemm_a8_kernel_name(in_kind: str, out_dtype: str, act: str, config: str) -> str:
    return f"fg_gemm_a8_{GEMM_A8_IN[in_kind]}_{GEMM_A8_OUT[out_dtype]}_{act}_{config}"


def gemm_a8_kernel_names() -> list[str]:
    return [gemm_a8_kernel_name(i, o, a, c) for c in GEMM_A8_CONFIGS for i in GEMM_A8_IN for o in GEMM_A8_OUT
            for a in GEMM_A8_ACTS]


BMM_TINY = Signature((
    ("a", "ptr"), ("b", "ptr"), ("c", "ptr"), ("batch", "i32"), ("m", "i32"), ("n", "i32"), ("k", "i32"),
    ("sab", "i64"), ("sam", "i32"), ("sak", "i32"), ("sbb", "i64"), ("sbk", "i32"), ("sbn", "i32"),
    ("tx", "i32"), ("ty", "i32"), ("elems", "i32"),
))
BMM_TINY_DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
BMM_TINY_MICROTILES = (1, 2, 4, 8)  # R: each thread computes an R x R block of C
BMM_TINY_MAX_DIM = 64
BMM_TINY_MAX_THREADS = 256  # kBmmTinyMaxThreads in hip_src/include/fusedgemm/bmm_tiny.hpp


def bmm_tiny_kernel_name(dtype: str, r: int) -> str:
    return f"fg_bmm_tiny_{BMM_TINY_DTYPES[dtype]}_r{r}"


def bmm_tiny_kernel_names() -> list[str]:
    return [bmm_tiny_kernel_name(d, r) for d in BMM_TINY_DTYPES for r in BMM_TINY_MICROTILES]
