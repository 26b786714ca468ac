"""The canonical text form of an epilogue expression, and its parser.

    silu(acc * (scalar(alpha) * m_vec(scale_a, 1.0)) + n_vec(bias))
    clamp(gelu(acc + aux(residual)), -6.0, 6.0)
    save(acc + n_vec(bias), bf16) * 0.5

`format_expr` writes + - * / infix with the fewest parentheses that keep the tree (left-associative), every
other op as a call, constants as Python's shortest round-tripping float repr. `parse` reads that form and
also the function spellings add(a, b), mul(a, b), ... and unary minus; parse(format_expr(e)) == e and
format_expr(parse(t)) == t for every canonical t.
"""
from __future__ import annotations

import re

from . import ir

_INFIX = ir.INFIX
_SYMBOL_OP = {sym: op for op, (sym, _p) in _INFIX.items()}
format_expr = ir.format_expr


# ---- parser ----------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|"
                    r"(?P<sym>[-+*/(),]))")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                break
            m = _TOKEN.match(text, pos)
            if not m:
                self.fail(f"unexpected character {text[pos]!r}", pos)
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0

    def fail(self, msg: str, pos: int | None = None):
        if pos is None:
            pos = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        raise ir.EpilogueError(f"cannot parse epilogue at column {pos + 1}: {msg}\n  {self.text}\n  {' ' * pos}^")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value) or (kind is not None and tok[0] != kind):
            want = repr(value) if value is not None else (kind or "more input")
            self.fail(f"expected {want}, got {'the end' if tok is None else repr(tok[1])}")
        self.i += 1
        return tok[1]

    def parse(self) -> ir.Node:
        node = self.expr()
        if self.peek() is not None:
            self.fail(f"unexpected {self.peek()[1]!r} after a complete expression")
        return node

    def expr(self) -> ir.Node:
        node = self.term()
        while self.peek() is not None and self.peek()[1] in "+-":
            op = _SYMBOL_OP[self.take()]
            node = ir.binary(op, node, self.term())
        return node

    def term(self) -> ir.Node:
        node = self.unary()
        while self.peek() is not None and self.peek()[1] in "*/":
            op = _SYMBOL_OP[self.take()]
            node = ir.binary(op, node, self.unary())
        return node

    def unary(self) -> ir.Node:
        tok = self.peek()
        if tok is not None and tok[1] == "-":
            self.take()
            nxt = self.peek()
            if nxt is not None and nxt[0] == "num":
                return ir.const(-float(self.take()))
            return ir.unary("neg", self.unary())
        return self.primary()

    def number(self) -> float:
        """A signed number argument (constants of leaky_relu / clamp, defaults); inf where allowed."""
        sign = 1.0
        if self.peek() is not None and self.peek()[1] == "-":
            self.take()
            sign = -1.0
        tok = self.peek()
        if tok is not None and tok[0] == "name" and tok[1] == "inf":
            self.take()
            return sign * float("inf")
        return sign * float(self.take(kind="num"))

    def primary(self) -> ir.Node:
        tok = self.peek()
        if tok is None:
            self.fail("expected an operand, got the end")
        kind, value, pos = tok
        if kind == "num":
            self.take()
            return ir.const(float(value))
        if value == "(":
            self.take()
            node = self.expr()
            self.take(")")
            return node
        if kind != "name":
            self.fail(f"expected an operand, got {value!r}")
        self.take()
        if value in ("acc", *ir.PAIR_LEAVES):
            return getattr(ir, value)
        if self.peek() is None or self.peek()[1] != "(":
            self.fail(f"unknown name {value!r} (operands are written m_vec(name), n_vec(name), scalar(name), "
                      "aux(name); the accumulator is acc, or gate / up in a paired expression)", pos)
        self.take("(")
        node = self.call(value, pos)
        self.take(")")
        return node

    def call(self, op: str, pos: int) -> ir.Node:
        if op in ("m_vec", "n_vec"):
            name = self.take(kind="name")
            default = None
            if self.peek() is not None and self.peek()[1] == ",":
                self.take(",")
                default = self.number()
            return getattr(ir, op)(name, default)
        if op in ("scalar", "aux"):
            return getattr(ir, op)(self.take(kind="name"))
        if op in ir.UNARY:
            return ir.unary(op, self.expr())
        if op in ir.UNARY_WITH_ATTRS:
            x = self.expr()
            attrs = []
            for _ in range(ir.UNARY_WITH_ATTRS[op]):
                self.take(",")
                attrs.append(self.number())
            return ir.unary(op, x, *attrs)
        if op in ir.BINARY:
            a = self.expr()
            self.take(",")
            return ir.binary(op, a, self.expr())
        if op in ir.DTYPE_NODES:
            x = self.expr()
            self.take(",")
            dtype = self.take(kind="name")
            return ir.cast(x, dtype) if op == "cast" else ir.save(x, dtype)
        self.fail(f"unknown op {op!r}; expected one of {', '.join(o for o in ir.OPS if o not in ('const',))}", pos)


def parse(text: str) -> ir.Node:
    """Epilogue text -> expression (validated). Raises EpilogueError pointing at the offending column."""
    if not isinstance(text, str):
        raise ir.EpilogueError(f"expected epilogue text (str), got {type(text).__name__}")
    return ir.validate(_Parser(text).parse())
