"""Finding fusable regions in a torch-level FX graph and rewriting them into one call each.

The same graphs come from two places: torch.fx.symbolic_trace of a module (fg.fuse: nn.Linear and activation
modules appear as call_module) and TorchDynamo (fg.backend: F.linear / torch.addmm / F.silu as call_function,
tensor methods as call_method, with example values in node.meta). A region is a GEMM node plus the elementwise
nodes after it that the epilogue IR expresses, cut so that only its result (and at most one intermediate, the
IR's second output) is used outside it.

    sites = find_regions(graph, modules)        # [Site]: fused candidates and refusals, with reasons
    rewrite(graph, site, make_call, replaced)   # the region's nodes replaced by make_call(program, tensors, ints)
"""
from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx
import torch.nn.functional as F

from ..epilogue import DTYPE_NAMES
from .match_a8 import expr_op_node, gemm_a8_of
from .program import NONE, Gemm, Program, Step, C, I, T, V, a8_family

_WINDOW = 48  # nodes scanned past the region's last member before growth stops (graphs are long; regions short)

_GEMM_FUNCS = {F.linear: "linear", torch._C._nn.linear: "linear", torch.addmm: "addmm", torch.mm: "mm",
               torch.matmul: "mm", operator.matmul: "mm"}
_GEMM_METHODS = {"mm": "mm", "matmul": "mm", "__matmul__": "mm"}

# function / method -> step op (arguments: the tensor first, like the op)
_FUNC_STEPS = {
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub", operator.mul: "mul",
    torch.mul: "mul", operator.truediv: "div", torch.div: "div", torch.true_divide: "div", operator.neg: "neg",
    torch.neg: "neg", torch.relu: "relu", F.relu: "relu", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid",
    torch.tanh: "tanh", F.tanh: "tanh", torch.exp: "exp", torch.abs: "abs", operator.abs: "abs",
    torch.square: "square", torch.sqrt: "sqrt", torch.rsqrt: "rsqrt", F.silu: "silu", F.gelu: "gelu",
    F.leaky_relu: "leaky_relu", torch.clamp: "clamp", torch.clip: "clamp", torch.pow: "pow", operator.pow: "pow",
    torch.maximum: "maximum", torch.minimum: "minimum", F.dropout: "dropout",
}
_METHOD_STEPS = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "true_divide": "div", "neg": "neg", "relu": "relu",
    "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "abs": "abs", "square": "square", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "clamp": "clamp", "clip": "clamp", "pow": "pow", "to": "cast", "float": "cast",
    "half": "cast", "bfloat16": "cast", "view": "reshape", "reshape": "reshape", "contiguous": "identity",
    "maximum": "maximum", "minimum": "minimum",
}
_MODULE_STEPS = {torch.nn.ReLU: "relu", torch.nn.SiLU: "silu", torch.nn.Sigmoid: "sigmoid", torch.nn.Tanh: "tanh",
                 torch.nn.GELU: "gelu", torch.nn.LeakyReLU: "leaky_relu", torch.nn.Identity: "identity",
                 torch.nn.Dropout: "dropout"}
_METHOD_CASTS = {"float": "fp32", "half": "fp16", "bfloat16": "bf16"}


@dataclasses.dataclass
class Site:
    """One GEMM in the graph: fused (program set) or not (reason set)."""
    name: str                        # the GEMM node (or module path) it was found at
    ops: list                        # the step ops of the region, in order
    program: Program | None = None
    reason: str = ""
    nodes: list = dataclasses.field(default_factory=list)      # region nodes, in graph order
    outputs: list = dataclasses.field(default_factory=list)    # nodes whose values leave the region
    tensors: list = dataclasses.field(default_factory=list)    # input nodes (or values), T(j) order
    ints: list = dataclasses.field(default_factory=list)       # int inputs, I(j) order
    insert_after: torch.fx.Node | None = None


class _NotAStep(Exception):
    pass


class _Inputs:
    """A region's outside inputs in first-use order: T(j) for tensors (nodes, or attribute names), I(j) for ints."""

    def __init__(self):
        self.tensors, self.ints = [], []

    def tensor(self, x) -> tuple:
        if x not in self.tensors:
            self.tensors.append(x)
        return T(self.tensors.index(x))

    def int(self, x) -> tuple:
        if isinstance(x, int) and not isinstance(x, bool):
            return C(x)
        if not isinstance(x, torch.fx.Node):
            raise _NotAStep(f"reshape size {x!r}")
        self.ints.append(x)
        return I(len(self.ints) - 1)


def _const(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _NotAStep(f"a {type(x).__name__} argument")
    return float(x)


def _meta_value(node):
    return node.meta.get("example_value", node.meta.get("val")) if isinstance(node, torch.fx.Node) else None


def _called(node: torch.fx.Node, funcs: dict, methods: dict):
    """funcs[target] of a call_function node, methods[target] of a call_method one; None otherwise."""
    if node.op == "call_function":
        return funcs.get(node.target)
    if node.op == "call_method":
        return methods.get(node.target)
    return None


def gemm_of(node: torch.fx.Node, modules: dict):
    """-> (kind, [x, w, bias-or-c], alpha, beta) when `node` is a GEMM the kernels may take, else None.
    Weight and bias of an nn.Linear module are returned as their qualified attribute names (str). 8-bit GEMMs
    (torch._scaled_mm, torch._int_mm, fg.gemm_a8's ops, Linear8): match_a8.py."""
    g8 = gemm_a8_of(node, modules)
    if g8 is not None:
        return g8 if isinstance(g8, tuple) else None
    if node.op == "call_module" and type(modules.get(node.target)) is torch.nn.Linear and len(node.args) == 1:
        mod = modules[node.target]
        return "linear", [node.args[0], f"{node.target}.weight",
                          None if mod.bias is None else f"{node.target}.bias"], 1.0, 1.0
    kind = _called(node, _GEMM_FUNCS, _GEMM_METHODS)
    if kind is None:
        return None
    a, kw = list(node.args), dict(node.kwargs)
    if kind == "linear":
        x = a[0] if a else kw.get("input")
        w = a[1] if len(a) > 1 else kw.get("weight")
        b = a[2] if len(a) > 2 else kw.get("bias")
        return ("linear", [x, w, b], 1.0, 1.0) if len(a) + len(kw) <= 3 else None
    if kind == "mm":
        if len(a) != 2 or kw:
            return None
        return "mm", [a[0], a[1]], 1.0, 1.0
    if len(a) != 3 or set(kw) - {"beta", "alpha"}:
        return None
    try:
        return "addmm", [a[0], a[1], a[2]], _const(kw.get("alpha", 1.0)), _const(kw.get("beta", 1.0))
    except _NotAStep:
        return None


def step_of(node: torch.fx.Node, modules: dict):
    """-> (op, args (nodes / constants), attrs) for an elementwise node the epilogue expresses; raises _NotAStep
    with the reason otherwise."""
    a, kw = list(node.args), dict(node.kwargs)
    if node.op == "call_module":
        mod = modules.get(node.target)
        op = _MODULE_STEPS.get(type(mod))
        if op is None or len(a) != 1 or kw:
            raise _NotAStep(f"module {type(mod).__name__}")
        if op == "gelu":
            return "gelu", a, (mod.approximate,)
        if op == "leaky_relu":
            return "leaky_relu", a, (float(mod.negative_slope),)
        if op == "dropout":
            if mod.p != 0.0:
                raise _NotAStep(f"Dropout(p={mod.p}) (random in training mode)")
            return "identity", a, ()
        return op, a, ()
    if node.op == "call_function":
        op = _FUNC_STEPS.get(node.target)
    elif node.op == "call_method":
        op = _METHOD_STEPS.get(node.target)
    else:
        op = None
    if op is None:
        raise _NotAStep(f"{node.op} {getattr(node.target, '__name__', node.target)}")
    kw.pop("inplace", None)
    if op in ("add", "sub"):
        alpha = kw.pop("alpha", 1)
        if kw or len(a) != 2:
            raise _NotAStep(f"{op} with {sorted(kw)}")
        if alpha != 1:
            raise _NotAStep(f"{op} with alpha={alpha}")
        return op, a, ()
    if op == "div":
        if kw.get("rounding_mode") is not None or len(a) != 2:
            raise _NotAStep("div with a rounding mode")
        return op, a, ()
    if op in ("mul", "maximum", "minimum"):
        if kw or len(a) != 2:
            raise _NotAStep(f"{op} with {sorted(kw)}")
        if op != "mul" and not all(isinstance(x, torch.fx.Node) for x in a):
            raise _NotAStep(f"{op} with a constant")
        return op, a, ()
    if op == "gelu":
        return "gelu", a[:1], (kw.get("approximate", a[1] if len(a) > 1 else "none"),)
    if op == "leaky_relu":
        return "leaky_relu", a[:1], (_const(kw.get("negative_slope", a[1] if len(a) > 1 else 0.01)),)
    if op == "clamp":
        lo = kw.get("min", a[1] if len(a) > 1 else None)
        hi = kw.get("max", a[2] if len(a) > 2 else None)
        return "clamp", a[:1], (None if lo is None else _const(lo), None if hi is None else _const(hi))
    if op == "pow":
        e = kw.get("exponent", a[1] if len(a) > 1 else None)
        return "pow", a[:1], (_const(e),)
    if op == "dropout":
        p = kw.get("p", a[1] if len(a) > 1 else 0.5)
        training = kw.get("training", a[2] if len(a) > 2 else True)
        if training is not False and p != 0.0:
            raise _NotAStep("dropout in training mode")
        return "identity", a[:1], ()
    if op == "cast":
        if node.target in _METHOD_CASTS:
            if len(a) != 1 or kw:
                raise _NotAStep(f".{node.target}() with arguments")
            return "cast", a, (_METHOD_CASTS[node.target],)
        dtype = kw.pop("dtype", None)
        rest = [x for x in a[1:] if not isinstance(x, torch.dtype)]
        dts = [x for x in a[1:] if isinstance(x, torch.dtype)]
        dtype = dtype or (dts[0] if dts else None)
        if rest or kw or dtype is None:
            raise _NotAStep(".to() of a device or with options")
        if dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):  # an 8-bit GEMM's fp8 store (program_a8.py)
            return "to_fp8", a[:1], (str(dtype).rpartition(".")[2],)
        if dtype not in DTYPE_NAMES:
            raise _NotAStep(f"a cast to {dtype}")
        return "cast", a[:1], (DTYPE_NAMES[dtype],)
    if op == "reshape":
        sizes = a[1:]
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = list(sizes[0])
        if kw or not sizes:
            raise _NotAStep("view / reshape with options")
        return "reshape", [a[0], *sizes], ("sizes",)
    if kw or len(a) != 1:
        raise _NotAStep(f"{op} with extra arguments")
    return op, a, ()


_GLU_ACTS = {"silu": "silu", "relu": "relu"}


def _glu_act(node, modules) -> str | None:
    try:
        op, args, attrs = step_of(node, modules)
    except _NotAStep:
        return None
    if op == "gelu":
        return "gelu" if attrs[0] == "tanh" else "gelu_erf"
    return _GLU_ACTS.get(op)


def find_gated_pairs(graph: torch.fx.Graph, modules: dict, order: dict) -> list[Site]:
    """act(linear(x, Wg, bg)) * linear(x, Wu, bu) -- SwiGLU / GeGLU MLPs written as two linears -- each as one
    Site of kind glu:<act> (fg.swiglu: one GEMM over the interleaved weight). Every intermediate must be used only
    inside the pattern."""
    sites = []
    for mul in graph.nodes:
        try:
            op, args, _ = step_of(mul, modules)
        except _NotAStep:
            continue
        if op != "mul" or not all(isinstance(a, torch.fx.Node) for a in args):
            continue
        for act_node, up in (args, args[::-1]):
            act = _glu_act(act_node, modules)
            if act is None or len(act_node.all_input_nodes) != 1:
                continue
            gate = act_node.all_input_nodes[0]
            g, u = gemm_of(gate, modules), gemm_of(up, modules)
            if not (g and u and g[0] == "linear" and u[0] == "linear" and g[1][0] is u[1][0]):
                continue
            if len(gate.users) != 1 or len(act_node.users) != 1 or len(up.users) != 1 or gate is up:
                continue
            inputs = _Inputs()
            refs = tuple(NONE if x is None else inputs.tensor(x)
                         for x in (g[1][0], g[1][1], g[1][2], u[1][1], u[1][2]))
            program = Program(Gemm(f"glu:{act}", refs), (), (0,))
            name = gate.target if gate.op == "call_module" else gate.name
            sites.append(Site(name, [f"glu:{act}"], program, nodes=sorted([gate, up, act_node, mul], key=order.get),
                              outputs=[mul], tensors=inputs.tensors, insert_after=mul.prev))
            break
    return sites


# ---- one merged gate_up GEMM, split in halves: Phi-3's MLP, vLLM's merged column-parallel layer -------------------

_SPLIT_FUNCS = {torch.chunk: "chunk", torch.split: "split"}
_SPLIT_METHODS = {"chunk": "chunk", "split": "split"}


def _split_args(node):
    """-> (name, size, dim) of a chunk / split node (size: chunks, or split_size / sections), else None."""
    name = _called(node, _SPLIT_FUNCS, _SPLIT_METHODS)
    if name is None:
        return None
    a, kw = list(node.args), dict(node.kwargs)
    size = a[1] if len(a) > 1 else kw.get("chunks", kw.get("split_size", kw.get("split_size_or_sections")))
    return name, size, a[2] if len(a) > 2 else kw.get("dim", 0)


def _slice_bounds(node, h, ndim):
    """-> (start, stop) of `h[..., start:stop]` on the last dim (or `h[:, :, start:stop]`, every other dim whole,
    when h's rank is known), else None."""
    if not (node.op == "call_function" and node.target is operator.getitem and node.args[0] is h):
        return None
    idx = node.args[1]
    if not isinstance(idx, tuple) or not idx or not isinstance(idx[-1], slice):
        return None
    whole = slice(None)
    lead = idx[:-1]
    if not (lead == (Ellipsis,) or (ndim is not None and len(idx) == ndim and all(x == whole for x in lead))):
        return None
    last = idx[-1]
    return (last.start, last.stop) if last.step in (None, 1) else None


def _weight_rows(w, modules):
    """Rows of a GEMM's weight ([N, K]): an attribute name, a get_attr node, or a node with an example value."""
    if isinstance(w, str) or (isinstance(w, torch.fx.Node) and w.op == "get_attr"):
        path, _, attr = (w if isinstance(w, str) else w.target).rpartition(".")
        t = getattr(modules.get(path), attr, None)
    else:
        t = _meta_value(w)
    return t.shape[0] if isinstance(t, torch.Tensor) and t.dim() == 2 else None


def _halves(h, rows, ndim):
    """-> (first half, second half, the chunk / split node or None) of the merged GEMM output h, where h's only
    use is to be cut in two equal halves on its last dim; raises _NotAStep with the reason otherwise."""
    users = list(h.users)
    cut = next((u for u in users if _split_args(u) is not None), None)
    if rows is None:
        raise _NotAStep("the merged weight's shape is unknown")
    if cut is None:
        half = None if rows % 2 else rows // 2
        parts = {}
        for u in users:
            bounds = _slice_bounds(u, h, ndim)
            if bounds is None:
                raise _NotAStep(f"h has another user ({u.name})")
            k = {(None, half): 0, (0, half): 0, (half, None): 1, (half, rows): 1}.get(bounds)
            if half is None or k is None:
                raise _NotAStep(f"a slice [{bounds[0]}:{bounds[1]}] of its {rows} columns is not one half")
            if k in parts:
                raise _NotAStep(f"h has another user ({u.name})")
            parts[k] = u
        if len(parts) != 2:
            raise _NotAStep("only one half of h is used")
        return parts[0], parts[1], None
    if len(users) != 1:
        raise _NotAStep(f"h has another user ({next(u for u in users if u is not cut).name})")
    name, size, dim = _split_args(cut)
    if not (dim == -1 or (ndim is not None and dim == ndim - 1)):
        raise _NotAStep(f"{name} on dim {dim} of a {ndim}-D h, not the last" if ndim is not None else
                        f"{name} on dim {dim} (only dim=-1 is known to be the last here)")
    even = rows % 2 == 0 and rows > 0
    if name == "chunk":
        halves = size == 2
    elif isinstance(size, (list, tuple)):  # split([I, I])
        halves = list(size) == [rows // 2] * 2
    else:  # split(I)
        halves = size == rows // 2
    if not (even and halves):
        raise _NotAStep(f"{name}({size}) of {rows} columns is not two equal halves")
    parts = {}
    for u in cut.users:
        k = u.args[1] if u.op == "call_function" and u.target is operator.getitem else None
        if k not in (0, 1) or isinstance(k, bool) or k in parts:
            raise _NotAStep(f"the {name} result has another user ({u.name})")
        parts[k] = u
    if len(parts) != 2:
        raise _NotAStep(f"only one half of the {name} is used")
    return parts[0], parts[1], cut


def _combine(first, second, modules):
    """-> (act, mul, act node, gate-half index) for act(one half) * the other half, both halves used only there;
    raises _NotAStep otherwise."""
    for half in (first, second):
        if len(half.users) != 1:
            raise _NotAStep(f"the half {half.name} has another user")
    for k, (gate, up) in enumerate(((first, second), (second, first))):
        act_node = next(iter(gate.users))
        act = _glu_act(act_node, modules)
        if act is None or act_node.all_input_nodes != [gate]:
            continue
        mul = next(iter(up.users))
        try:
            op, args, _ = step_of(mul, modules)
        except _NotAStep:
            continue
        if op != "mul" or set(args) != {act_node, up} or len(args) != 2:
            continue
        if len(act_node.users) != 1:
            raise _NotAStep(f"the activation {act_node.name} has another user")
        return act, mul, act_node, k
    raise _NotAStep("the halves are not combined as act(gate) * up")


def find_merged_gated(graph: torch.fx.Graph, modules: dict, order: dict) -> tuple[list[Site], dict]:
    """h = linear(x, W [2I, K], b [2I]); gate, up = h.chunk(2, -1) (or split / h[..., :I], h[..., I:]);
    act(gate) * up -- a SwiGLU MLP with one merged gate_up weight (gate rows first) -- each as one Site of kind
    glu_gate_up:<act> (glu_up_gate:<act> when the activation is on the second half). -> (sites, {GEMM node:
    why it was not taken}) for GEMMs whose output is cut in halves but not in a form this takes."""
    sites, refused = [], {}
    for h in graph.nodes:
        g = gemm_of(h, modules)
        if g is None or g[0] != "linear":
            continue
        ndim = getattr(_meta_value(h), "ndim", None)
        pieces = [p for u in h.users for p in (u.users if _split_args(u) is not None else
                                                [u] if _slice_bounds(u, h, ndim) is not None else [])]
        if not any(_glu_act(u, modules) for p in pieces for u in p.users):
            continue  # not cut in pieces with an activation after one: q / k / v slices, say
        try:
            first, second, cut = _halves(h, _weight_rows(g[1][1], modules), ndim)
            act, mul, act_node, gate_half = _combine(first, second, modules)
        except _NotAStep as why:
            refused[h] = str(why)
            continue
        inputs = _Inputs()
        refs = tuple(NONE if x is None else inputs.tensor(x) for x in g[1])
        program = Program(Gemm(f"glu_{('gate_up', 'up_gate')[gate_half]}:{act}", refs), (), (0,))
        nodes = [n for n in (h, cut, first, second, act_node, mul) if n is not None]
        sites.append(Site(h.target if h.op == "call_module" else h.name, [f"glu:{act}"], program,
                          nodes=sorted(nodes, key=order.get), outputs=[mul], tensors=inputs.tensors,
                          insert_after=mul.prev))
    return sites, refused


def find_regions(graph: torch.fx.Graph, modules: dict, skip=frozenset()) -> list[Site]:
    """Every GEMM node of the graph as a Site: gated pairs first (find_gated_pairs, find_merged_gated), then each
    other GEMM with its region's program where one can be cut."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    nodes = list(graph.nodes)
    merged, merged_refused = find_merged_gated(graph, modules, order)
    sites = find_gated_pairs(graph, modules, order) + merged
    claimed: set = set(skip)
    for site in sites:
        claimed.update(site.nodes)
    for node in nodes:
        if node in claimed:
            continue
        g = gemm_of(node, modules)
        if g is None:
            why = gemm_a8_of(node, modules)
            if isinstance(why, str):
                sites.append(Site(node.target if node.op == "call_module" else node.name, [],
                                  reason=f"8-bit GEMM: {why}"))
            continue
        site = _grow(node, g, nodes, order, modules, claimed)
        if site.program is not None and g[0].startswith("gemm_a8_expr:"):
            site.nodes.insert(0, expr_op_node(node))  # the op whose output [0] is the GEMM: rewritten away too
        if site.program is None and node in merged_refused:
            site.reason = f"merged gate_up GEMM cut in halves, not a gated pair: {merged_refused[node]}"
        sites.append(site)
        if site.program is not None:
            claimed.update(site.nodes)
    return sites


def _grow(gemm: torch.fx.Node, g, nodes, order, modules, claimed) -> Site:
    kind, gargs, alpha, beta = g
    inside = {gemm: None}    # region node -> (op, args, attrs) (None for the GEMM)
    downstream = set()       # nodes after the GEMM that depend on it but are not in the region
    first_block = ""
    last = order[gemm]
    for nd in nodes[order[gemm] + 1:]:
        if order[nd] - last > _WINDOW:
            break
        deps = nd.all_input_nodes
        if not any(x in inside or x in downstream for x in deps):
            continue
        try:
            if nd in claimed:
                raise _NotAStep("already in another region")
            st = step_of(nd, modules)
            if any(x in downstream for x in deps):
                raise _NotAStep("an input computed outside the region from its values")
        except _NotAStep as why:
            downstream.add(nd)
            if not first_block and any(x in inside for x in deps):
                first_block = f"{nd.name}: {why}"
            continue
        inside[nd] = st
        last = order[nd]
    members = sorted(inside, key=order.get)
    name = gemm.target if gemm.op == "call_module" else gemm.name
    # the result: the latest member whose cut region leaves at most one intermediate used outside
    for out in reversed(members):
        region = _ancestors_within(out, inside)
        if len(region) == 1:
            break
        ext = [n for n in region if n is not out and any(u not in region for u in n.users)]
        if len(ext) > 1:
            continue
        site = _site(gemm, kind, gargs, alpha, beta, region, inside, out, ext, order, name)
        if site is not None:
            return site
    return Site(name, [], reason=("no elementwise op after the GEMM that the epilogue expresses"
                                  + (f" (next: {first_block})" if first_block else "")))


def _ancestors_within(out, inside) -> set:
    region, stack = set(), [out]
    while stack:
        n = stack.pop()
        if n in region:
            continue
        region.add(n)
        stack.extend(x for x in n.all_input_nodes if x in inside)
    return region


def _site(gemm, kind, gargs, alpha, beta, region, inside, out, ext, order, name) -> Site | None:
    members = sorted(region, key=order.get)
    index = {n: i for i, n in enumerate(members)}
    inputs = _Inputs()
    tensors, ints = inputs.tensors, inputs.ints

    def tensor_ref(x):
        if x is None:
            return NONE
        if isinstance(x, torch.fx.Node) and x in index:
            return V(index[x])
        if not isinstance(x, (torch.fx.Node, str)):
            return C(_const(x))
        return inputs.tensor(x)

    try:
        gemm_def = Gemm(kind, tuple(tensor_ref(x) for x in gargs), alpha, beta)
        steps = []
        for n in members[1:]:
            op, args, attrs = inside[n]
            if op == "reshape":
                refs = (tensor_ref(args[0]), *(inputs.int(x) for x in args[1:]))
                steps.append(Step("reshape", refs, ()))
            else:
                steps.append(Step(op, tuple(tensor_ref(x) for x in args), tuple(attrs)))
    except _NotAStep:
        return None
    outputs = (index[out],) + tuple(index[e] for e in ext)
    # the call goes after the last of its inputs; every outside use of its outputs must come later
    input_nodes = [x for x in (*tensors, *ints, *(a for a in gargs if isinstance(a, torch.fx.Node)))
                   if isinstance(x, torch.fx.Node)]
    anchor = max(input_nodes, key=order.get, default=None)
    if anchor is not None and order[anchor] >= order[gemm]:
        for o in (out, *ext):
            if any(u not in region and order[u] <= order[anchor] for u in o.users):
                return None
    ops = [s.op for s in steps]
    if all(op in ("identity", "reshape", "cast") for op in ops):
        return None
    if "to_fp8" in ops:  # the fp8 store: 8-bit GEMMs only, as the region's result (a shorter region otherwise)
        if not a8_family(kind) or any(op not in ("identity", "reshape") for op in ops[ops.index("to_fp8") + 1:]):
            return None
    program = Program(gemm_def, tuple(steps), outputs)
    return Site(name, ops, program, nodes=members, outputs=[out, *ext], tensors=tensors, ints=ints,
                insert_after=anchor if anchor is not None and order[anchor] > order[gemm] else gemm)


def rewrite(graph: torch.fx.Graph, site: Site, make_call, replaced: dict) -> None:
    """Replace the site's region by `make_call(graph, program_text, tensor_args, int_args)` (a node returning a
    list of the region's outputs), inserted after the last of its inputs. `replaced` maps the outputs of regions
    rewritten before (the sites were cut on the original graph) to their new nodes, and gains this site's."""
    def now(x):
        return replaced.get(x, x) if isinstance(x, torch.fx.Node) else x

    with graph.inserting_before(now(site.insert_after).next):  # before one node: new nodes keep their order
        tensor_args = [graph.get_attr(t) if isinstance(t, str) else now(t) for t in site.tensors]
        call = make_call(graph, site.program.dumps(), tensor_args, [now(i) for i in site.ints])
        results = [graph.call_function(operator.getitem, (call, i)) for i in range(len(site.outputs))]
    for node, res in zip(site.outputs, results):
        node.replace_all_uses_with(res)
        replaced[node] = res
    for node in reversed(site.nodes):  # graph order: each node's users inside the region go first
        graph.erase_node(node)
