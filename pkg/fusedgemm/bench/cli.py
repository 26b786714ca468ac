"""Command-line pieces every `python -m fusedgemm.bench` subcommand shares: one spelling of each dtype.

A dtype option accepts torch's name and the short ones (`bfloat16` / `bf16`, `float16` / `fp16` / `f16` / `half`,
`float32` / `fp32` / `f32` / `float`, ...) and hands the subcommand the short name, which is also what every table and
JSON file prints. Imports nothing heavy, so `--help` stays fast.
"""
from __future__ import annotations

import argparse

# short name (printed) -> every spelling accepted on the command line (case-insensitive)
SPELLINGS = {
    "bf16": ("bf16", "bfloat16", "torch.bfloat16"),
    "fp16": ("fp16", "f16", "float16", "half", "torch.float16"),
    "fp32": ("fp32", "f32", "float32", "float", "torch.float32"),
    "tf32": ("tf32",),
    "fp8": ("fp8", "e4m3", "float8_e4m3fn", "float8_e4m3fnuz", "torch.float8_e4m3fn", "torch.float8_e4m3fnuz"),
    "int8": ("int8", "i8", "torch.int8"),
}
_CANONICAL = {s: short for short, names in SPELLINGS.items() for s in names}


def dtype_name(text: str) -> str:
    """The short name of any accepted spelling ('bfloat16' -> 'bf16'); ValueError for an unknown one."""
    short = _CANONICAL.get(str(text).strip().lower())
    if short is None:
        raise ValueError(f"unknown dtype {text!r}; known: {', '.join(SPELLINGS)}")
    return short


def torch_dtype(short: str):
    """The torch dtype of a short name (tf32 -> torch.float32: fp32 storage, TF32 math; fp8 needs the device's
    variant, so it is not resolved here)."""
    import torch

    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32,
             "int8": torch.int8}
    if short not in table:
        raise ValueError(f"no single torch dtype for {short!r}")
    return table[short]


def add_dtype(p: argparse.ArgumentParser, flag: str, choices, default: str, help: str) -> None:
    """Add a dtype option taking any spelling of `choices` (short names) and storing the short name."""
    choices = list(choices)

    def parse(text: str) -> str:
        try:
            short = dtype_name(text)
        except ValueError:
            short = None
        if short not in choices:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {text!r} (choose from {', '.join(choices)}; torch names such as "
                f"{SPELLINGS[choices[0]][-1].replace('torch.', '')} are accepted too)")
        return short

    spelled = "; ".join(f"{c} = {'/'.join(n for n in SPELLINGS[c] if not n.startswith('torch.'))}" for c in choices
                        if len(SPELLINGS[c]) > 1)
    p.add_argument(flag, type=parse, default=default, metavar="{" + ",".join(choices) + "}",
                   help=f"{help} (default {default}" + (f"; also spelled {spelled}" if spelled else "") + ")")
