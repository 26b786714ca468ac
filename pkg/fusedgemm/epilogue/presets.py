"""gemm_a8's named epilogues as IR expressions.

    <act>(acc * (scalar(alpha) * m_vec(scale_a, 1.0) * n_vec(scale_b, 1.0)) + n_vec(bias, 0.0))

One expression per activation serves the name with and without `bias_`: scales and bias are optional operands
(absent: 1 and 0), so `silu` and `bias_silu` run the same kernel. The scale product is grouped so that
alpha * scale_a is computed once per row and the rest is one multiply and one fused multiply-add per element.

The ahead-of-time kernels include the presets as generated C++ functors; `python -m fusedgemm.epilogue.presets
write-header` rewrites that header in the checkout (`write-header --check` only compares). Nothing is written on
import or with --help.
"""
from __future__ import annotations

import difflib

from . import ir

ACTIVATIONS = ("none", "relu", "silu", "gelu", "gelu_erf")
EPILOGUES = ("none", "bias", "bias_relu", "bias_silu", "bias_gelu", "bias_gelu_erf", "relu", "silu", "gelu",
             "gelu_erf")


def did_you_mean(name, choices) -> str:
    """'; did you mean 'silu'?' when `name` is close to one of `choices`, else ''."""
    close = difflib.get_close_matches(str(name).lower(), list(choices), n=2)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def activation_name(op: str, name, choices) -> str:
    """An activation= argument as its lower-case name: None means 'none' (identity); matched
    case-insensitively ('SiLU'); anything else is an error naming `op`, with a suggestion."""
    if name is None:
        return "none"
    if not isinstance(name, str):
        raise TypeError(f"{op}: activation must be a name or None, got {type(name).__name__}")
    low = name.lower()
    if low not in choices:
        raise ValueError(f"{op}: unknown activation {name!r}{did_you_mean(name, choices)} (expected one of "
                         f"{', '.join(choices)}, or an epilogue expression)")
    return low


def parse_name(name: str) -> tuple[bool, str]:
    """'bias_silu' -> (True, 'silu'); 'gelu' -> (False, 'gelu'); 'bias' -> (True, 'none'). Case-insensitive;
    None means 'none'."""
    if name is None:
        name = "none"
    if not isinstance(name, str) or name.lower() not in EPILOGUES:
        raise ValueError(f"unknown epilogue {name!r}{did_you_mean(name, EPILOGUES) if isinstance(name, str) else ''}; "
                         f"expected one of {', '.join(EPILOGUES)} or an epilogue expression (fusedgemm.epilogue)")
    name = name.lower()
    if name == "bias":
        return True, "none"
    if name.startswith("bias_"):
        return True, name[len("bias_"):]
    return False, name


def preset_name(uses_bias: bool, act: str) -> str:
    """(True, 'silu') -> 'bias_silu'; (True, 'none') -> 'bias'; (False, act) -> act."""
    if uses_bias:
        return "bias" if act == "none" else f"bias_{act}"
    return act


def resolve(op: str, epilogue) -> tuple[bool, str] | ir.Node:
    """epilogue= of gemm_a8 and matmul_fused: None (identity), a preset name (case-insensitive) -> (uses_bias,
    activation); an expression (node) or expression text (parsed here) -> the node."""
    if epilogue is None or isinstance(epilogue, ir.Node):
        return (False, "none") if epilogue is None else epilogue
    if not isinstance(epilogue, str):
        raise TypeError(f"{op}: epilogue must be a preset name, an epilogue expression (fusedgemm.epilogue) or its "
                        f"text, or None, got {type(epilogue).__name__}")
    if epilogue.strip().lower() in EPILOGUES:
        return parse_name(epilogue.strip())
    from .text import parse

    try:
        return parse(epilogue)
    except ir.EpilogueError as e:
        hint = did_you_mean(epilogue, EPILOGUES) or "."
        raise ValueError(f"{op}: unknown epilogue {epilogue!r}: not a preset name ({', '.join(EPILOGUES)}){hint} "
                         f"Text that is not a preset name is parsed as an epilogue expression "
                         f"(fusedgemm.epilogue.parse), which failed: {e}") from None


def preset_for_activation(act: str) -> ir.Node:
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; expected one of {', '.join(ACTIVATIONS)}")
    scale = ir.scalar("alpha") * ir.m_vec("scale_a", 1.0) * ir.n_vec("scale_b", 1.0)
    y = ir.acc * scale + ir.n_vec("bias", 0.0)
    return y if act == "none" else ir.unary(act, y)


def preset(name: str) -> ir.Node:
    """The expression of a named gemm_a8 epilogue (with or without bias: the same expression)."""
    return preset_for_activation(parse_name(name)[1])


# The element types of the presets' tensor operands: fp32 scales, a bias whose type (fp32 / bf16 / fp16) is
# read at run time, so one kernel serves every bias dtype.
OPERAND_DTYPES = {"scale_a": "f32", "scale_b": "f32", "bias": "dyn"}
PRESETS_HEADER = "hip_src/include/fusedgemm/epilogue_presets.hpp"


def struct_name(act: str) -> str:
    return "EpiloguePreset" + "".join(w.capitalize() for w in act.split("_"))


def spec_for_activation(act: str):
    from .codegen import EpilogueSpec

    return EpilogueSpec.of(preset_for_activation(act), OPERAND_DTYPES)


def render_presets_header() -> str:
    """The text of hip_src/include/fusedgemm/epilogue_presets.hpp (generated; a CPU test checks it is fresh)."""
    from .codegen import render_functor

    body = "".join(render_functor(spec_for_activation(act), struct_name(act)) + "\n" for act in ACTIVATIONS)
    return ("// GENERATED by `python -m fusedgemm.epilogue.presets` from pkg/fusedgemm/epilogue/presets.py: the gemm_a8\n"
            "// preset epilogues as epilogue-slot functors (epilogue.hpp). Do not edit.\n"
            "#pragma once\n#include \"epilogue.hpp\"\n\nnamespace fg {\n\n" + body + "}  // namespace fg\n")


def main(argv=None) -> int:
    """python -m fusedgemm.epilogue.presets write-header [--check]: (re)write, or check, the generated header.
    Nothing is written on import, without a subcommand, or with --help."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m fusedgemm.epilogue.presets",
                                     description="The gemm_a8 preset epilogues (fusedgemm.epilogue.presets).")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write-header", help=f"write {PRESETS_HEADER} (generated from this module) in the checkout")
    w.add_argument("--check", action="store_true", help="write nothing: exit 1 if the header is stale")
    w.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[3],
                   help="the checkout holding hip_src/ (default: the one this module is in)")
    args = parser.parse_args(argv)
    path = args.root / PRESETS_HEADER
    text = render_presets_header()
    if args.check:
        fresh = path.is_file() and path.read_text() == text
        print(f"{'fresh' if fresh else 'stale'}: {path}")
        return 0 if fresh else 1
    path.write_text(text)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
