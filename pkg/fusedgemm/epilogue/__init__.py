"""fusedgemm.epilogue: the epilogue IR (expressions over the GEMM accumulator), its canonical text, a float64
reference evaluator, the named presets and the C++ code generator.

    import fusedgemm.epilogue as E
    e = E.parse("silu(acc * n_vec(scale) + n_vec(bias)) + aux(residual)")
    str(e), E.key(e)                      # canonical text, stable key
    E.evaluate(e, acc, {"scale": s, "bias": b, "residual": r})     # float64 oracle
    e2 = E.gelu(E.acc + E.n_vec("bias")) * E.scalar("alpha")      # built in Python
    E.silu(E.gate) * E.up                 # paired: SwiGLU over a gate/up-interleaved weight, output N / 2
"""
from .evaluate import DTYPE_NAMES, TORCH_DTYPES, evaluate, evaluate_outputs, round_to
from .ir import (EpilogueError, Node, Operand, abs, acc, aux, binary, cast, clamp, const, exp, gate, gelu,  # noqa: A004
                 gelu_erf, is_paired, key, leaky_relu, m_vec, maximum, minimum, n_vec, neg, operands, relu, rsqrt, save, saved_node,
                 scalar, sigmoid, silu, sqrt, square, tanh, unary, up, validate)
from .presets import preset
from .text import format_expr, parse

__all__ = ["DTYPE_NAMES", "TORCH_DTYPES", "EpilogueError", "Node", "Operand", "abs", "acc", "aux", "binary", "cast", "clamp", "const", "evaluate",
           "evaluate_outputs", "exp", "format_expr", "gate", "gelu", "gelu_erf", "is_paired", "key", "leaky_relu", "m_vec", "maximum",
           "minimum", "n_vec", "neg", "operands", "parse", "preset", "relu", "round_to", "rsqrt", "save",
           "saved_node", "scalar", "sigmoid", "silu", "sqrt", "square", "tanh", "unary", "up", "validate"]
