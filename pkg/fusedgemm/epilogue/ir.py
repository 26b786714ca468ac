"""The epilogue IR: an expression over the GEMM accumulator, evaluated per output element (row m, column n).

    leaves   acc                     the accumulator (fp32; int8 GEMMs convert their exact int32 sum once)
             gate, up                the accumulators of a column pair (2j, 2j + 1): a *paired* expression
             m_vec(name[, default])  a vector [M] indexed by the output row (per-token scale)
             n_vec(name[, default])  a vector [N] indexed by the output column (bias, per-channel scale)
             scalar(name)            one fp32 value given at run time (alpha, beta, a quantization scale)
             aux(name)               an [M, N] tensor (a residual, C for beta * C), any row stride
             1.5                     a compile-time constant
    unary    relu silu sigmoid gelu (tanh approximation) gelu_erf tanh exp neg abs square sqrt rsqrt
             leaky_relu(x, slope)  clamp(x, lo, hi)
    binary   add sub mul div maximum minimum      (also written a + b, a - b, a * b, a / b, -a)
    cast(x, bf16|fp16|fp32)   a rounding point: x rounded to that type (to reproduce unfused numerics)
    save(x, bf16|fp16|fp32)   x itself; also writes x, rounded to that type, to the second output [M, N]

A paired expression (one that uses gate / up; it may not use acc) combines each adjacent pair of GEMM columns
(gate 2j, up 2j + 1: a gate/up-interleaved weight) into ONE output column j: the GEMM is [M, N], the output,
its n_vec operands (indexed by j), aux operands and save() output are [M, N / 2]. SwiGLU is silu(gate) * up.

An m_vec / n_vec with a default is optional: a call may leave it out and every element reads the default
(the gemm_a8 presets use that for scales and bias). Everything is computed in fp32; the value of the whole
expression is rounded once to the output type. NaN propagates through every op as in torch.

Nodes are immutable and compare structurally; `str(node)` is the canonical text (epilogue/text.py), and
`key(node)` hashes it (same tree -> same key on every machine).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import re

PAIR_LEAVES = ("gate", "up")  # a paired expression's accumulators (see the module docstring)
LEAVES = ("acc", *PAIR_LEAVES, "m_vec", "n_vec", "scalar", "aux", "const")
UNARY = ("relu", "silu", "sigmoid", "gelu", "gelu_erf", "tanh", "exp", "neg", "abs", "square", "sqrt", "rsqrt")
UNARY_WITH_ATTRS = {"leaky_relu": 1, "clamp": 2}  # op -> number of constant attributes after x
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
DTYPE_NODES = ("cast", "save")  # op(x, dtype)
ROUNDING_DTYPES = ("bf16", "fp16", "fp32")
OPS = (*LEAVES, *UNARY, *UNARY_WITH_ATTRS, *BINARY, *DTYPE_NODES)

MAX_NODES = 256
MAX_OPERANDS = {"m_vec": 8, "n_vec": 8, "scalar": 8, "aux": 4}  # per expression; every arch supports these

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class EpilogueError(ValueError):
    """An epilogue expression or its operands are not valid; the message names the node."""


@dataclasses.dataclass(frozen=True, eq=True)
class Node:
    op: str
    args: tuple["Node", ...] = ()
    attrs: tuple = ()  # leaf name (+ default), constant value, op constants, or dtype

    def __hash__(self) -> int:
        # Cached: an expression is a key of the per-call plan cache, hashed on every call.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.op, self.args, self.attrs))
            object.__setattr__(self, "_hash", h)
        return h

    # -- building with Python operators ----------------------------------------------------------------------
    def __add__(self, other):
        return binary("add", self, other)

    def __radd__(self, other):
        return binary("add", other, self)

    def __sub__(self, other):
        return binary("sub", self, other)

    def __rsub__(self, other):
        return binary("sub", other, self)

    def __mul__(self, other):
        return binary("mul", self, other)

    def __rmul__(self, other):
        return binary("mul", other, self)

    def __truediv__(self, other):
        return binary("div", self, other)

    def __rtruediv__(self, other):
        return binary("div", other, self)

    def __neg__(self):
        return unary("neg", self)

    def __str__(self) -> str:
        return format_expr(self)

    def __repr__(self) -> str:
        return f"Epilogue({str(self)!r})"

    # -- walking ---------------------------------------------------------------------------------------------
    def walk(self):
        """Every node, children before parents (post-order)."""
        for a in self.args:
            yield from a.walk()
        yield self

    @property
    def is_leaf(self) -> bool:
        return self.op in LEAVES


def _as_node(x) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise EpilogueError(f"expected an epilogue node or a number, got {type(x).__name__}")
    return const(x)


def _check_name(name, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise EpilogueError(f"{what}: the operand name must be an identifier ([A-Za-z_][A-Za-z0-9_]*), got {name!r}")
    return name


def _finite(v, what: str, allow_inf: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise EpilogueError(f"{what} must be a number, got {type(v).__name__}")
    v = float(v)
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise EpilogueError(f"{what} must be a finite number, got {v}")
    return v


# ---- constructors ----------------------------------------------------------------------------------------------
acc = Node("acc")
gate = Node("gate")  # accumulator of GEMM column 2j (the gate half of output column j)
up = Node("up")  # accumulator of GEMM column 2j + 1


def m_vec(name: str, default: float | None = None) -> Node:
    """[M] operand indexed by the output row; optional (reads `default`) when a default is given."""
    _check_name(name, "m_vec")
    return Node("m_vec", (), (name,) if default is None else (name, _finite(default, f"m_vec({name}) default")))


def n_vec(name: str, default: float | None = None) -> Node:
    """[N] operand indexed by the output column; optional (reads `default`) when a default is given."""
    _check_name(name, "n_vec")
    return Node("n_vec", (), (name,) if default is None else (name, _finite(default, f"n_vec({name}) default")))


def scalar(name: str) -> Node:
    return Node("scalar", (), (_check_name(name, "scalar"),))


def aux(name: str) -> Node:
    return Node("aux", (), (_check_name(name, "aux"),))


def const(value: float) -> Node:
    return Node("const", (), (_finite(value, "a constant") + 0.0,))  # + 0.0: -0.0 -> 0.0 (equal nodes, equal text)


def unary(op: str, x, *attrs) -> Node:
    x = _as_node(x)
    if op in UNARY:
        if attrs:
            raise EpilogueError(f"{op} takes one argument, got {1 + len(attrs)}")
        return Node(op, (x,))
    if op in UNARY_WITH_ATTRS:
        if len(attrs) != UNARY_WITH_ATTRS[op]:
            raise EpilogueError(f"{op} takes x and {UNARY_WITH_ATTRS[op]} constant(s), got {len(attrs)} constant(s)")
        vals = tuple(_finite(a, f"{op}'s constant", allow_inf=(op == "clamp")) for a in attrs)
        return Node(op, (x,), vals)
    raise EpilogueError(f"unknown unary op {op!r}; expected one of {', '.join((*UNARY, *UNARY_WITH_ATTRS))}")


def binary(op: str, a, b) -> Node:
    if op not in BINARY:
        raise EpilogueError(f"unknown binary op {op!r}; expected one of {', '.join(BINARY)}")
    return Node(op, (_as_node(a), _as_node(b)))


def cast(x, dtype: str) -> Node:
    return _dtype_node("cast", x, dtype)


def save(x, dtype: str) -> Node:
    return _dtype_node("save", x, dtype)


def _dtype_node(op: str, x, dtype) -> Node:
    if dtype not in ROUNDING_DTYPES:
        raise EpilogueError(f"{op}: dtype must be one of {', '.join(ROUNDING_DTYPES)}, got {dtype!r}")
    return Node(op, (_as_node(x),), (dtype,))


def _unary_builder(op):
    def build(x, *attrs):
        return unary(op, x, *attrs)

    build.__name__ = op
    build.__doc__ = f"{op}(x{', ...' if op in UNARY_WITH_ATTRS else ''}) as an epilogue node."
    return build


relu, silu, sigmoid, gelu, gelu_erf, tanh, exp, neg, abs, square, sqrt, rsqrt = (  # noqa: A001
    _unary_builder(op) for op in UNARY)
leaky_relu = _unary_builder("leaky_relu")
clamp = _unary_builder("clamp")


def maximum(a, b) -> Node:
    return binary("maximum", a, b)


def minimum(a, b) -> Node:
    return binary("minimum", a, b)


# ---- analysis ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Operand:
    kind: str  # m_vec, n_vec, scalar, aux
    name: str
    default: float | None = None  # m_vec / n_vec only: optional, reads this when absent


def operands(expr: Node) -> dict[str, Operand]:
    """The named operands of `expr`, in first-use order (post-order). Raises on conflicting uses of a name."""
    found: dict[str, Operand] = {}
    for node in expr.walk():
        if node.op not in ("m_vec", "n_vec", "scalar", "aux"):
            continue
        name = node.attrs[0]
        op = Operand(node.op, name, node.attrs[1] if len(node.attrs) > 1 else None)
        prev = found.get(name)
        if prev is None:
            found[name] = op
        elif prev != op:
            raise EpilogueError(f"operand {name!r} is used as {_leaf_text(prev)} and as {_leaf_text(op)}; "
                                "one name is one operand")
    return found


def _leaf_text(op: Operand) -> str:
    return f"{op.kind}({op.name}" + ("" if op.default is None else f", {op.default!r}") + ")"


def saved_node(expr: Node) -> Node | None:
    """The one save(...) node of `expr`, or None."""
    saves = [n for n in expr.walk() if n.op == "save"]
    return saves[0] if saves else None


def is_paired(expr: Node) -> bool:
    """Whether `expr` combines column pairs (uses gate / up): its output has half the GEMM's columns."""
    return any(n.op in PAIR_LEAVES for n in expr.walk())


def validate(expr: Node) -> Node:
    """Structural checks that do not depend on the call: size, operand names, at most one save, acc not mixed
    with gate / up."""
    if not isinstance(expr, Node):
        raise EpilogueError(f"expected an epilogue expression (fusedgemm.epilogue node or text), got "
                            f"{type(expr).__name__}")
    nodes = list(expr.walk())
    if len(nodes) > MAX_NODES:
        raise EpilogueError(f"epilogue has {len(nodes)} nodes, at most {MAX_NODES} are supported")
    ops = operands(expr)
    for kind, limit in MAX_OPERANDS.items():
        names = [o.name for o in ops.values() if o.kind == kind]
        if len(names) > limit:
            raise EpilogueError(f"epilogue uses {len(names)} {kind} operands ({', '.join(names)}); at most {limit}")
    if any(n.op == "acc" for n in nodes) and any(n.op in PAIR_LEAVES for n in nodes):
        raise EpilogueError(f"epilogue {expr} mixes acc with gate / up: a paired expression (gate, up) produces one "
                            "output per column pair and has no per-column acc; write it with gate and up only")
    saves = [n for n in nodes if n.op == "save"]
    if len(saves) > 1:
        raise EpilogueError(f"epilogue has {len(saves)} save(...) nodes; at most one second output is supported")
    if saves and any(n.op == "save" for n in saves[0].args[0].walk()):
        raise EpilogueError("save(...) inside save(...)")
    return expr


# ---- canonical text (the parser is text.py) ---------------------------------------------------------------
INFIX = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "div": ("/", 2)}  # op -> (symbol, precedence)


def _prec(node: Node) -> int:
    if node.op in INFIX:
        return INFIX[node.op][1]
    return 3


def _num(v: float) -> str:
    return repr(float(v))


def format_expr(node: Node) -> str:
    op = node.op
    if op in ("acc", *PAIR_LEAVES):
        return op
    if op == "const":
        return _num(node.attrs[0])
    if op in ("m_vec", "n_vec"):
        return f"{op}({node.attrs[0]}" + (f", {_num(node.attrs[1])})" if len(node.attrs) > 1 else ")")
    if op in ("scalar", "aux"):
        return f"{op}({node.attrs[0]})"
    if op in INFIX:
        sym, p = INFIX[op]
        a, b = node.args
        left = format_expr(a)
        right = format_expr(b)
        if _prec(a) < p:
            left = f"({left})"
        if _prec(b) <= p:
            right = f"({right})"
        return f"{left} {sym} {right}"
    parts = [format_expr(a) for a in node.args]
    if op in DTYPE_NODES:
        parts.append(node.attrs[0])
    else:
        parts += [_num(v) for v in node.attrs]
    return f"{op}({', '.join(parts)})"


KEY_VERSION = "fgepi1"


def key(expr: Node) -> str:
    """A stable 16-hex-digit key of the canonical text (same tree -> same key across processes/machines)."""
    return hashlib.sha256(f"{KEY_VERSION}:{expr}".encode()).hexdigest()[:16]
