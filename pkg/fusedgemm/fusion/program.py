"""A fused region as a small program: one GEMM, then elementwise steps on its output -- what the fusion pass
cuts out of a model's graph and what the runtime either lowers to one kernel or runs as the original torch ops.

    program = Program(gemm=Gemm("linear", (T(0), T(1), NONE)),                       # F.linear(x, w)
                      steps=(Step("silu", (V(0),)), Step("mul", (V(1), C(0.5)))),     # silu(y) * 0.5
                      outputs=(2,))
    execute(program, [x, w], [])          # the same torch calls the model made: the unfused (eager) meaning
    lowering.lower(program, tensors, ints, "fp32")  # -> Lowered: a fused call + its epilogue expression, or Refused

Values: V(0) is the GEMM's output, V(i) the output of steps[i - 1]; T(j) the region's j-th tensor input, I(j) its
j-th int input (a reshape size), C(x) a constant. A program is a pure function of its inputs, serialised to one
short text (`dumps` / `loads`) so a torch.library op can carry it as a string argument. Here too: what every
lowering shares (Operands, Lowered, lower_steps); lowering.py and program_a8.py build on it.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import operator

import torch
import torch.nn.functional as F

from ..epilogue import DTYPE_NAMES, TORCH_DTYPES, ir
from .kinds_a8 import A8_FAMILIES, a8_family, execute_a8  # noqa: F401  (the 8-bit kinds)

# ---- values ----------------------------------------------------------------------------------------------------


def V(i: int) -> tuple:  # noqa: N802 -- the short names keep programs readable
    return ("v", i)


def T(j: int) -> tuple:  # noqa: N802
    return ("t", j)


def I(j: int) -> tuple:  # noqa: N802, E743
    return ("i", j)


def C(x: float) -> tuple:  # noqa: N802
    return ("c", x)


NONE = ("n", None)


@dataclasses.dataclass(frozen=True)
class Gemm:
    kind: str          # "linear" (x, w [N, K], bias|NONE) | "mm" (x, w [K, N]) | "addmm" (c, x, w [K, N])
    #                    | "glu:<act>" (x, w_gate, b_gate|NONE, w_up, b_up|NONE): act(x Wg^T + bg) * (x Wu^T + bu)
    #                    | "glu_gate_up:<act>" (x, w [2I, K], b [2I]|NONE): h = x W^T + b; act(h[..., :I]) * h[..., I:]
    #                    | "glu_up_gate:<act>" (the same weights, the activation on the second half):
    #                      act(h[..., I:]) * h[..., :I]
    #                    | an 8-bit GEMM: scaled_mm / int_mm / gemm_a8 / gemm_a8_expr / linear8 (program_a8.py)
    args: tuple
    alpha: float = 1.0  # addmm only
    beta: float = 1.0


@dataclasses.dataclass(frozen=True)
class Step:
    op: str            # a key of STEP_OPS
    args: tuple        # values
    attrs: tuple = ()  # constants of the op (clamp bounds, gelu approximation, cast dtype, pow exponent)


@dataclasses.dataclass(frozen=True)
class Program:
    gemm: Gemm
    steps: tuple
    outputs: tuple     # value indices: the result, then optionally one intermediate also used outside the region

    def dumps(self) -> str:
        return json.dumps([self.gemm.kind, self.gemm.args, self.gemm.alpha, self.gemm.beta,
                           [[s.op, s.args, s.attrs] for s in self.steps], self.outputs], separators=(",", ":"))


@functools.lru_cache(maxsize=1024)
def loads(text: str) -> Program:
    kind, args, alpha, beta, steps, outputs = json.loads(text)
    tup = lambda xs: tuple(tuple(x) for x in xs)  # noqa: E731
    return Program(Gemm(kind, tup(args), alpha, beta),
                   tuple(Step(op, tup(a), tuple(at)) for op, a, at in steps), tuple(outputs))


# ---- the steps: torch meaning and IR meaning ---------------------------------------------------------------------



def _pow_ir(x, e):
    table = {1.0: lambda: x, 2.0: lambda: ir.unary("square", x), 3.0: lambda: ir.unary("square", x) * x,
             0.5: lambda: ir.unary("sqrt", x), -0.5: lambda: ir.unary("rsqrt", x), -1.0: lambda: 1.0 / x}
    if float(e) not in table:
        raise Refused(f"pow with exponent {e} (the epilogue takes 1, 2, 3, 0.5, -0.5, -1)")
    return table[float(e)]()


def _clamp_ir(x, lo, hi):
    if lo is not None and hi is not None:
        return ir.unary("clamp", x, float(lo), float(hi))
    if lo is not None:
        return ir.maximum(x, float(lo))
    return ir.minimum(x, float(hi)) if hi is not None else x


def _cast_ir(x, name):
    return x if name == "fp32" else ir.cast(x, name)


# op -> (torch function of (values..., *attrs), IR builder of (nodes..., *attrs))
STEP_OPS = {
    "add": (operator.add, lambda a, b: a + b),  # operator.*: a constant may stand on either side
    "sub": (operator.sub, lambda a, b: a - b),
    "mul": (operator.mul, lambda a, b: a * b),
    "div": (operator.truediv, lambda a, b: a / b),
    "maximum": (torch.maximum, ir.maximum),
    "minimum": (torch.minimum, ir.minimum),
    "neg": (torch.neg, lambda a: -a),
    "relu": (torch.relu, lambda a: ir.unary("relu", a)),
    "silu": (F.silu, lambda a: ir.unary("silu", a)),
    "sigmoid": (torch.sigmoid, lambda a: ir.unary("sigmoid", a)),
    "tanh": (torch.tanh, lambda a: ir.unary("tanh", a)),
    "exp": (torch.exp, lambda a: ir.unary("exp", a)),
    "abs": (torch.abs, lambda a: ir.unary("abs", a)),
    "square": (torch.square, lambda a: ir.unary("square", a)),
    "sqrt": (torch.sqrt, lambda a: ir.unary("sqrt", a)),
    "rsqrt": (torch.rsqrt, lambda a: ir.unary("rsqrt", a)),
    "gelu": (lambda a, approx: F.gelu(a, approximate=approx),
             lambda a, approx: ir.unary("gelu" if approx == "tanh" else "gelu_erf", a)),
    "leaky_relu": (F.leaky_relu, lambda a, slope: ir.unary("leaky_relu", a, float(slope))),
    "clamp": (torch.clamp, _clamp_ir),
    "pow": (torch.pow, _pow_ir),
    "cast": (lambda a, name: a.to(TORCH_DTYPES[name]), _cast_ir),
    "identity": (lambda a: a, lambda a: a),
    # to_fp8(x, "float8_e4m3fn" | "float8_e4m3fnuz"): the region's fp8 output (an 8-bit GEMM's saturating store)
    "to_fp8": (lambda a, name: a.to(getattr(torch, name)), None),
    # reshape(x, *sizes): sizes are values (ints); the epilogue sees the same [M, N] elements (last dim kept)
    "reshape": (lambda a, *sizes: a.reshape(_flat_sizes(sizes)), None),
}


def _flat_sizes(sizes) -> list:
    """Reshape sizes with any tuple among them spliced in (a traced `x.size()[:-1] + (n,)` is one value)."""
    out = []
    for s in sizes:
        out.extend(s) if isinstance(s, (tuple, list, torch.Size)) else out.append(s)
    return out


def glu_form(kind: str) -> str:
    """The gated form of a GEMM kind: "pair" (two weights), "gate_up" / "up_gate" (one merged [2I, K] weight,
    the gate half first / second), or "" (not gated)."""
    family = kind.partition(":")[0]
    return {"glu": "pair", "glu_gate_up": "gate_up", "glu_up_gate": "up_gate"}.get(family, "")


GLU_ACTIVATIONS = {"silu": F.silu, "gelu": lambda t: F.gelu(t, approximate="tanh"), "gelu_erf": F.gelu,
                   "relu": torch.relu}  # names as fg.swiglu takes them

class Refused(Exception):
    """The region cannot be one kernel for these inputs; the message says why (it runs unfused)."""


# ---- the unfused meaning --------------------------------------------------------------------------------------


def _value(ref, vals, tensors, ints):
    kind, x = ref
    if kind == "v":
        return vals[x]
    if kind == "t":
        return tensors[x]
    if kind == "i":
        return ints[x]
    return x  # "c" constant, "n" None


def execute(program: Program, tensors, ints=(), *, all_values: bool = False):
    """Run the region as the torch calls it was made of (on any device, meta included). Returns the outputs
    (a list), or every value with all_values."""
    g = program.gemm
    a = [_value(r, (), tensors, ints) for r in g.args]
    if g.kind == "linear":
        y = F.linear(a[0], a[1], a[2])
    elif g.kind == "mm":
        y = torch.matmul(a[0], a[1])
    elif g.kind == "addmm":
        y = torch.addmm(a[0], a[1], a[2], beta=g.beta, alpha=g.alpha)
    elif g.kind.startswith("glu:"):
        y = GLU_ACTIVATIONS[g.kind[4:]](F.linear(a[0], a[1], a[2])) * F.linear(a[0], a[3], a[4])
    elif a8_family(g.kind):
        y = execute_a8(g, a)
    elif glu_form(g.kind):
        first, second = F.linear(a[0], a[1], a[2]).chunk(2, dim=-1)
        gate, up = (first, second) if glu_form(g.kind) == "gate_up" else (second, first)
        y = GLU_ACTIVATIONS[g.kind.partition(":")[2]](gate) * up
    else:
        raise ValueError(f"unknown GEMM kind {g.kind!r}")
    vals = [y]
    for s in program.steps:
        fn = STEP_OPS[s.op][0]
        vals.append(fn(*(_value(r, vals, tensors, ints) for r in s.args), *s.attrs))
    return vals if all_values else [vals[i] for i in program.outputs]


# ---- lowering to one kernel --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Lowered:
    """What matmul_fused needs for a signature; the tensors come per call from `bind`."""
    a: int                 # index of A among the region's tensors
    b: int                 # index of B
    layout: str            # "nk" or "kn"
    transpose_b: bool      # B is passed as b.t() (a [K, N] view of an [N, K] weight) with layout "nk"
    expr: ir.Node
    operands: dict         # operand name -> (tensor index, kind: "n_vec" | "m_vec" | "aux" | "scalar")
    out_dtype: torch.dtype
    out_shape: tuple       # of the main output (the region's final shape)
    saved_shape: tuple | None
    glu: str = ""          # a gated GEMM (fg.swiglu with this activation): a = x, b = w_gate (pair) or the merged
    #                        weight; expr unused
    glu_form: str = ""     # "pair" | "gate_up" | "up_gate" (see glu_form): which of GLU_ARGS the operands name
    a8: object = None      # an 8-bit GEMM: program_a8.A8Call (gemm_a8 over a preshuffled weight; a, b, expr,
    #                        operands, out_* as above, b the weight's index)


def _meta(t):
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") if isinstance(t, torch.Tensor) \
        else t


class Operands:
    """The region's tensors the epilogue reads, each as one IR leaf named t<j>: name -> (tensor index, kind), kind
    "scalar" | "n_vec" | "m_vec" | "aux" (what the runtime binds)."""

    def __init__(self, tensors, n: int):
        self.tensors, self.n, self.found = tensors, n, {}

    def __call__(self, j: int, shape, kind: str | None = None) -> ir.Node:
        """The leaf of tensor j used against a value of `shape` (its kind read off the shapes unless given)."""
        t, n = self.tensors[j], self.n
        name = f"t{j}"
        if not isinstance(t, torch.Tensor):
            raise Refused(f"input {j} is not a tensor")
        if t.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise Refused(f"operand {tuple(t.shape)} {t.dtype} (the epilogue reads bf16 / fp16 / fp32)")
        if kind is not None:
            pass
        elif t.numel() == 1:
            kind = "scalar"
        elif t.dim() <= len(shape) and t.shape[-1] == n and all(d == 1 for d in t.shape[:-1]) and n > 1:
            kind = "n_vec"
        elif tuple(t.shape) == tuple(shape):
            kind = "aux"
        elif t.dim() == len(shape) and tuple(t.shape[:-1]) == tuple(shape[:-1]) and t.shape[-1] == 1:
            kind = "m_vec"
        else:
            raise Refused(f"operand of shape {tuple(t.shape)} broadcasts against [{', '.join(map(str, shape))}] "
                          "in a way the epilogue does not express ([N], [M, 1], [M, N] or one value)")
        if self.found.get(name, (j, kind))[1] != kind:
            raise Refused(f"input {j} is used with two shapes")
        self.found[name] = (j, kind)
        return {"scalar": ir.scalar, "n_vec": ir.n_vec, "m_vec": ir.m_vec, "aux": ir.aux}[kind](name)


def rounded(node: ir.Node, v, rounding: str) -> ir.Node:
    """node with eager's rounding point when rounding == "eager" and its eager value v is 16-bit."""
    if rounding == "eager" and v.dtype in (torch.bfloat16, torch.float16):
        return ir.cast(node, DTYPE_NAMES[v.dtype])
    return node


def lower_steps(program: Program, vals, env0: ir.Node, operand: Operands, rounding: str, fp8_out: bool = False):
    """The region's steps over the GEMM's term env0 -> (the epilogue expression, the result's (meta) value, the
    second output's shape or None). fp8_out: the result may be a to_fp8 step (an 8-bit GEMM's fp8 store)."""
    y0 = vals[0]
    n = y0.shape[-1]
    m = math.prod(y0.shape[:-1])
    env = [env0]
    fp8 = set()  # values that are the fp8 cast (or a reshape of it)
    for i, s in enumerate(program.steps):
        v = vals[i + 1]
        if s.op == "reshape":
            if v.shape[-1] != n or v.numel() != m * n:
                raise Refused(f"a reshape to {tuple(v.shape)} changes the last dimension ({n})")
            env.append(env[s.args[0][1]])
            if s.args[0][1] in fp8:
                fp8.add(i + 1)
            continue
        if any(r[0] == "v" and r[1] in fp8 for r in s.args):
            raise Refused(f"{s.op} of the fp8 value (a cast to fp8 is fused only as the region's result)")
        if s.op == "to_fp8":
            if not fp8_out:
                raise Refused(f"a cast to {v.dtype} (matmul_fused writes bf16 / fp16 / fp32)")
            env.append(env[s.args[0][1]])
            fp8.add(i + 1)
            continue
        if s.op == "cast" and v.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise Refused(f"a cast to {v.dtype} (fused outputs are bf16 / fp16 / fp32)")
        if not v.dtype.is_floating_point:
            raise Refused(f"{s.op} gives {v.dtype} (the epilogue computes in fp32)")
        args = []
        for r in s.args:
            if r[0] == "v":
                args.append(env[r[1]])
            elif r[0] == "t":
                args.append(operand(r[1], v.shape))
            elif r[0] == "c":
                args.append(ir.const(float(r[1])))
            else:
                raise Refused(f"{s.op} takes a {r[0]!r} argument")
        env.append(rounded(STEP_OPS[s.op][1](*args, *s.attrs), v, rounding))
    out_v = vals[program.outputs[0]]
    if out_v.shape[-1] != n or out_v.numel() != m * n:
        raise Refused(f"the result {tuple(out_v.shape)} is not the GEMM's [M, N] elements")
    if out_v.dtype not in DTYPE_NAMES and not (fp8_out and program.outputs[0] in fp8):
        raise Refused(f"result dtype {out_v.dtype}")
    expr = env[program.outputs[0]]
    saved_shape = None
    if len(program.outputs) > 1:
        s_i = program.outputs[1]
        sv = vals[s_i]
        if sv.numel() != m * n or sv.dtype not in DTYPE_NAMES:
            raise Refused(f"the second output {tuple(sv.shape)} {sv.dtype} is not [M, N] bf16 / fp16 / fp32")
        expr = _replace_once(expr, env[s_i], ir.save(env[s_i], DTYPE_NAMES[sv.dtype]))
        saved_shape = tuple(sv.shape)
    try:
        ir.validate(expr)
    except ir.EpilogueError as exc:
        raise Refused(f"epilogue: {exc}") from None
    return expr, out_v, saved_shape


def _replace_once(expr: ir.Node, target: ir.Node, new: ir.Node) -> ir.Node:
    """expr with the first occurrence of `target` (in evaluation order) replaced: the IR has one save() node,
    whose value is its argument, so the other occurrences stay as they are."""
    done = [False]

    def rebuild(node):
        if done[0]:
            return node
        if node == target:
            done[0] = True
            return new
        return node if not node.args else dataclasses.replace(node, args=tuple(rebuild(a) for a in node.args))
    out = rebuild(expr)
    if not done[0]:
        raise Refused("the intermediate used outside the region is not part of the result")
    return out


