"""The mechanical HIP -> CUDA rename: one table for cuda_src/ (ci/hipify.py) and for generated sources.

hip_src is the one kernel source; cuda_src is this rename applied to every file. A translation unit that is
generated at run time (HIP-flavoured C++ like hip_src) goes through the same rename before nvcc/NVRTC sees it.
The rename covers what hipify-perl would touch in our sources: hip* API identifiers and the runtime headers.
Kernel code uses only constructs with a 1:1 CUDA counterpart.

Imports nothing but `re`, so ci/hipify.py can load this file without importing the package (and torch).
"""
from __future__ import annotations

import re

# (pattern, replacement), applied in order.
RENAMES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"<hip/hip_runtime\.h>"), "<cuda_runtime.h>"),
    (re.compile(r"<hip/hip_fp16\.h>"), "<cuda_fp16.h>"),
    (re.compile(r"<hip/hip_bf16\.h>"), "<cuda_bf16.h>"),
    (re.compile(r"\bhip([A-Z][A-Za-z0-9_]*)"), r"cuda\1"),
    (re.compile(r"\bHIP_([A-Z][A-Z0-9_]*)\b"), r"CUDA_\1"),
]
# File suffixes that change with the rename (headers keep theirs).
SUFFIXES = {".hip": ".cu"}


def convert(text: str) -> str:
    """HIP source text -> CUDA source text."""
    for pattern, repl in RENAMES:
        text = pattern.sub(repl, text)
    return text
