"""8-bit GEMM nodes of a torch-level FX graph, for match.py (the regions and program_a8.py's kinds):

    torch._scaled_mm(a_fp8, w.t(), scale_a=, scale_b=, bias=, out_dtype=bf16|fp16|fp32, use_fast_accum=)
    torch._int_mm(a_int8, w.t())                  (int32; the scales follow as elementwise steps)
    torch.ops.fusedgemm.gemm_a8 / gemm_a8_expr    (fg.gemm_a8 calls as torch.compile records them)
    a Linear8 module (fg.fuse: A8Tracer keeps it a leaf, so it is one call_module node)

gemm_a8_of(node, modules) -> None (not an 8-bit GEMM), (kind, args, alpha, beta) as match.gemm_of returns, or a
str: why this 8-bit GEMM is not taken (the site's reason in the report).
"""
from __future__ import annotations

import operator

import torch
import torch.fx

from ..epilogue import ir, parse, saved_node
from ..nn.linear8 import Linear8
from .kinds_a8 import OUT_NAMES

_SCALED_MM = (torch._scaled_mm, torch.ops.aten._scaled_mm.default)
_INT_MM = (torch._int_mm, torch.ops.aten._int_mm.default)
_TRANSPOSES = {torch.t: "t", torch.ops.aten.t.default: "t"}


class A8Tracer(torch.fx.Tracer):
    """fg.fuse's tracer: Linear8 modules stay leaves (one call_module node the matcher takes as a GEMM) rather than
    being traced into quantize_rows and gemm_a8 calls, which do not take proxies. Buffers are get_attr nodes (an
    fp8 weight is often one), so the traced graph reads the module's buffer, not a constant taken at trace time."""

    proxy_buffer_attributes = True

    def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
        return isinstance(m, Linear8) or super().is_leaf_module(m, qualname)


_8BIT = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8)


def has_a8(mod: torch.nn.Module) -> bool:
    """Whether fg.fuse should trace `mod` for 8-bit GEMMs: a Linear8 in it, or an 8-bit parameter / buffer (the
    weight of a torch._scaled_mm / torch._int_mm call)."""
    return (any(isinstance(m, Linear8) for m in mod.modules())
            or any(t.dtype in _8BIT for t in (*mod.parameters(), *mod.buffers())))


def _transposed_weight(b):
    """W when b is a node computing W.t() (or W.transpose(0, 1) / W.T), else None."""
    if not isinstance(b, torch.fx.Node) or len(b.all_input_nodes) != 1:
        return None
    src = b.args[0] if b.args else None
    if b.op == "call_method" and b.target == "t" and len(b.args) == 1:
        return src
    if b.op == "call_function" and b.target in _TRANSPOSES and len(b.args) == 1:
        return src
    if b.op == "call_method" and b.target == "transpose" and sorted(b.args[1:]) in ([0, 1], [-2, -1], [-1, 0],
                                                                                   [-2, 1]):
        return src
    if b.op == "call_function" and b.target is getattr and b.args[1:] in (("T",), ("mT",)):
        return src
    return None


def _args(node, names, defaults):
    a, kw = list(node.args), dict(node.kwargs)
    out = {}
    for i, name in enumerate(names):
        out[name] = a[i] if i < len(a) else kw.pop(name, defaults.get(name))
    return out, kw


def _scaled_mm(node):
    v, extra = _args(node, ("self", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype",
                            "use_fast_accum"), {"use_fast_accum": False})
    if extra:
        return f"torch._scaled_mm with {sorted(extra)}"
    if v["scale_result"] is not None:
        return "torch._scaled_mm with scale_result (an fp8 result): write the cast to fp8 after it instead"
    out = v["out_dtype"]
    if out not in (torch.bfloat16, torch.float16, torch.float32):
        return (f"torch._scaled_mm with out_dtype={out} (gemm_a8's fused fp8 store is a cast after a bf16 / fp16 / "
                "fp32 result)")
    if not isinstance(v["use_fast_accum"], bool):
        return "torch._scaled_mm with a use_fast_accum that is not a constant"
    w = _transposed_weight(v["mat2"])
    form = "b" if w is None else "w"
    kind = f"scaled_mm:{OUT_NAMES[out]}:{form}" + (":fast_accum" if v["use_fast_accum"] else "")
    return kind, [v["self"], v["mat2"] if w is None else w, v["scale_a"], v["scale_b"], v["bias"]], 1.0, 1.0


def _gemm_a8_op(node):
    v, _ = _args(node, ("a", "b", "bias", "scale_a", "scale_b", "alpha", "epilogue", "out_dtype"), {})
    if not isinstance(v["alpha"], (int, float)) or isinstance(v["alpha"], bool):
        return "fusedgemm.gemm_a8 with an alpha that is not a constant"
    if v["out_dtype"] not in OUT_NAMES:
        return f"fusedgemm.gemm_a8 with out_dtype={v['out_dtype']}"
    return (f"gemm_a8:{v['epilogue']}:{OUT_NAMES[v['out_dtype']]}",
            [v["a"], v["b"], v["bias"], v["scale_a"], v["scale_b"]], float(v["alpha"]), 1.0)


def _gemm_a8_expr_op(item):
    """The getitem(ys, 0) of a fusedgemm.gemm_a8_expr op node: its result is the GEMM's value."""
    node = item.args[0]
    v, _ = _args(node, ("a", "b", "epilogue", "tensor_names", "tensors", "scalar_names", "scalar_values",
                        "out_dtype"), {})
    if len(node.users) != 1:
        return "fusedgemm.gemm_a8_expr whose outputs are used apart"
    if v["out_dtype"] not in OUT_NAMES:
        return f"fusedgemm.gemm_a8_expr with out_dtype={v['out_dtype']}"

    expr = parse(v["epilogue"])
    if saved_node(expr) is not None:
        return "fusedgemm.gemm_a8_expr with save(...) (two outputs)"
    values = dict(zip([s for s in v["scalar_names"].split(",") if s], v["scalar_values"]))
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values.values()):
        return "fusedgemm.gemm_a8_expr with a Python scalar operand that is not a constant"

    def inline(n):  # Python-number operands are constants of the graph: constants of the expression
        if n.op in ("m_vec", "n_vec", "scalar") and n.attrs[0] in values:
            return ir.const(float(values[n.attrs[0]]))
        return n if not n.args else ir.Node(n.op, tuple(inline(a) for a in n.args), n.attrs)

    text = str(inline(expr))
    names = [s for s in v["tensor_names"].split(",") if s]
    return (f"gemm_a8_expr:{OUT_NAMES[v['out_dtype']]}:{','.join(names)}:{text}",
            [v["a"], v["b"], *v["tensors"]], 1.0, 1.0)


def expr_op_node(node):
    """The fusedgemm.gemm_a8_expr op node behind a GEMM node of kind gemm_a8_expr (removed with its region)."""
    return node.args[0]


def gemm_a8_of(node: torch.fx.Node, modules: dict):
    if node.op == "call_module":
        mod = modules.get(node.target)
        if not isinstance(mod, Linear8):
            return None
        if len(node.args) != 1 or node.kwargs:
            return "Linear8 called with more than x"
        if getattr(mod, "block", None) is not None:
            return "Linear8 with block scales (x quantized per 1 x 128 group): not fused yet, runs as its module"
        return (f"linear8:{mod.activation}", [node.args[0], f"{node.target}.weight", f"{node.target}.weight_scale",
                                             None if mod.bias is None else f"{node.target}.bias"], 1.0, 1.0)
    if node.op != "call_function":
        return None
    t = node.target
    if t in _SCALED_MM:
        return _scaled_mm(node)
    if t in _INT_MM:
        if len(node.args) != 2 or node.kwargs:
            return "torch._int_mm with extra arguments"
        w = _transposed_weight(node.args[1])
        return (f"int_mm:{'b' if w is None else 'w'}", [node.args[0], node.args[1] if w is None else w], 1.0, 1.0)
    ops = getattr(torch.ops, "fusedgemm", None)
    if ops is None:
        return None
    if t in (ops.gemm_a8.default, ops.gemm_a8):
        return _gemm_a8_op(node)
    if (t is operator.getitem and node.args[1] == 0 and isinstance(node.args[0], torch.fx.Node)
            and node.args[0].op == "call_function" and node.args[0].target in (ops.gemm_a8_expr.default,
                                                                              ops.gemm_a8_expr)):
        return _gemm_a8_expr_op(node)
    return None
