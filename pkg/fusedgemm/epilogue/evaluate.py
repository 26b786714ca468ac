"""The float64 oracle of an epilogue expression (torch on the CPU): what every kernel is tested against."""
from __future__ import annotations

import math

import torch

from . import ir

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}  # torch dtype -> the IR's name of it
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0}


def round_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x rounded once to `dtype` (fp8: saturating to the largest finite value, NaN stays NaN), as float64."""
    if dtype in FP8_MAX:
        m = FP8_MAX[dtype]
        x = torch.where(x.isnan(), x, x.clamp(-m, m))
    return x.to(dtype).to(torch.float64)


def _gelu_tanh(y):
    return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))


_UNARY = {
    "relu": lambda y: torch.where(y < 0, torch.zeros_like(y), y),  # NaN propagates, like torch.relu
    "silu": lambda y: y * torch.sigmoid(y),
    "sigmoid": torch.sigmoid,
    "gelu": _gelu_tanh,
    "gelu_erf": lambda y: 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0))),
    "tanh": torch.tanh,
    "exp": torch.exp,
    "neg": torch.neg,
    "abs": torch.abs,
    "square": lambda y: y * y,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
}
_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
           "minimum": torch.minimum}


def _operand_value(op: ir.Operand, operands: dict, m: int, n: int, device=None) -> torch.Tensor:
    """The operand as a float64 tensor broadcastable to [M, N] (on the CPU, or `device`)."""
    v = operands.get(op.name)
    if v is None:
        if op.default is None:
            raise ir.EpilogueError(f"{op.kind}({op.name}) has no value: pass operands[{op.name!r}]")
        return torch.tensor(op.default, dtype=torch.float64, device=device)
    if op.kind == "scalar":
        if isinstance(v, torch.Tensor):
            if v.numel() != 1:
                raise ir.EpilogueError(f"scalar({op.name}) must be a number or a 1-element tensor, got shape "
                                       f"{tuple(v.shape)}")
            return v.detach().to(device or "cpu", torch.float64).reshape(())
        return torch.tensor(float(v), dtype=torch.float64, device=device)
    t = v.detach().to(device or "cpu", torch.float64)
    if op.kind == "aux":
        if tuple(t.shape) != (m, n):
            raise ir.EpilogueError(f"aux({op.name}) must be [M={m}, N={n}], got {tuple(t.shape)}")
        return t
    length = m if op.kind == "m_vec" else n
    if t.numel() == 1:
        t = t.reshape(1).expand(length)
    elif tuple(t.shape) != (length,):
        raise ir.EpilogueError(f"{op.kind}({op.name}) must be [{'M' if op.kind == 'm_vec' else 'N'}={length}] "
                               f"or hold one value, got {tuple(t.shape)}")
    return t[:, None] if op.kind == "m_vec" else t[None, :]


def evaluate_outputs(expr: ir.Node, acc: torch.Tensor, operands: dict | None = None, *,
                     compute_dtype: torch.dtype = torch.float64, device=None):
    """-> (value of expr [M, N], value of its save(...) node rounded to the save dtype, or None), as float64.

    A paired expression (gate / up) takes the GEMM accumulator [M, 2I] in interleaved order (column 2j the gate,
    2j + 1 the up of output column j) and returns [M, I]; its operands are then sized by I.

    compute_dtype=torch.float32 evaluates every op in fp32 instead (what torch's own fp32 arithmetic gives: the
    tests measure a kernel's error against the float64 value relative to that). device: evaluate there instead
    of on the CPU (matmul_fused's unfused fp32 path runs its epilogue this way)."""
    ir.validate(expr)
    operands = dict(operands or {})
    known = ir.operands(expr)
    extra = sorted(set(operands) - set(known))
    if extra:
        raise ir.EpilogueError(f"operands {extra} are not used by the epilogue {expr}")
    cd = compute_dtype
    a = acc.detach().to(device or "cpu", torch.float64).to(cd)
    if a.dim() != 2:
        raise ir.EpilogueError(f"acc must be [M, N], got {tuple(a.shape)}")
    paired = ir.is_paired(expr)
    if paired:
        if a.shape[1] % 2:
            raise ir.EpilogueError(f"a paired epilogue (gate / up) needs an even number of accumulator columns, got "
                                   f"acc of shape {tuple(a.shape)}")
        pair = {"gate": a[:, 0::2], "up": a[:, 1::2]}
    m, n = a.shape[0], a.shape[1] // 2 if paired else a.shape[1]
    leaf = {name: _operand_value(op, operands, m, n, device).to(cd) for name, op in known.items()}
    saved = []

    def ev(node: ir.Node) -> torch.Tensor:
        op = node.op
        if op == "acc":
            return a
        if op in ir.PAIR_LEAVES:
            return pair[op]
        if op == "const":
            return torch.tensor(node.attrs[0], dtype=torch.float64, device=a.device).to(cd)
        if op in ("m_vec", "n_vec", "scalar", "aux"):
            return leaf[node.attrs[0]]
        if op in _UNARY:
            return _UNARY[op](ev(node.args[0]))
        if op == "leaky_relu":
            x = ev(node.args[0])
            return torch.where(x < 0, x * node.attrs[0], x)
        if op == "clamp":
            x = ev(node.args[0])
            lo, hi = node.attrs
            return torch.minimum(torch.maximum(x, torch.tensor(lo, dtype=cd, device=a.device)),
                                 torch.tensor(hi, dtype=cd, device=a.device))
        if op in _BINARY:
            return _BINARY[op](ev(node.args[0]), ev(node.args[1]))
        if op == "cast":
            return round_to(ev(node.args[0]), TORCH_DTYPES[node.attrs[0]]).to(cd)
        if op == "save":
            x = ev(node.args[0])
            saved.append(round_to(x.expand(m, n), TORCH_DTYPES[node.attrs[0]]))
            return x
        raise ir.EpilogueError(f"unknown op {op!r}")

    out = ev(expr).expand(m, n).to(torch.float64)
    return out, (saved[0] if saved else None)


def evaluate(expr: ir.Node, acc: torch.Tensor, operands: dict | None = None, *,
             out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The expression on every element of acc [M, N], in float64; rounded once to out_dtype if given."""
    out, _saved = evaluate_outputs(expr, acc, operands)
    return out if out_dtype is None else round_to(out, out_dtype)
