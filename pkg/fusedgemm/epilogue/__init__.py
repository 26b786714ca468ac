"""fusedgemm.epilogue: the epilogue IR (expressions over the GEMM accumulator), its canonical text, a float64
reference evaluator, the named presets and the C++ code generator.

    import fusedgemm.epilogue as E
    e = E.parse("silu(acc * n_vec(scale) + n_vec(bias)) + aux(residual)")
    str(e), E.key(e)                      # canonical text, stable key
    E.evaluate(e, acc, {"scale": s, "bias": b, "residual": r})     # float64 oracle
    e2 = E.gelu(E.acc + E.n_vec("bias")) * E.scalar("alpha")      # built in Python
"""
from .evaluate import TORCH_DTYPES, evaluate, evaluate_outputs, round_to
from .ir import (EpilogueError, Node, Operand, abs, acc, aux, binary, cast, clamp, const, exp, gelu, gelu_erf,  # noqa: A004
                 key, leaky_relu, m_vec, maximum, minimum, n_vec, neg, operands, relu, rsqrt, save, saved_node,
                 scalar, sigmoid, silu, sqrt, square, tanh, unary, validate)
from .presets import preset
from .text import format_expr, parse

__all__ = ["EpilogueError", "Node", "Operand", "abs", "acc", "aux", "binary", "cast", "clamp", "const", "evaluate",
           "evaluate_outputs", "exp", "format_expr", "gelu", "gelu_erf", "key", "leaky_relu", "m_vec", "maximum",
           "minimum", "n_vec", "neg", "operands", "parse", "preset", "relu", "round_to", "rsqrt", "save",
           "saved_node", "scalar", "sigmoid", "silu", "sqrt", "square", "tanh", "unary", "validate"]
