"""Epilogue IR -> one C++ functor type for the kernels' epilogue slot (hip_src/include/fusedgemm/epilogue.hpp).

The functor is `template <class Out> struct <name>`: its Params (the kernel argument holding the epilogue's
pointers, strides and scalars), load_row / load_col (the parts of the expression that depend on the row or
the column only, which kernels hoist out of their store loops) and store (the per-element rest, the outputs).

    m_vec/n_vec operands   {ptr, stride (0: one value for all), kind (dyn operands: ElemKind)}; an optional
                           operand (one with a default) may pass a null pointer and reads its default
    scalar operands        {ptr, value}: a null ptr reads value (a Python number); else *ptr (a device
                           scalar, graph-capturable)
    aux operands           {ptr, ld}: element (m, n) at ptr[m * ld + n], typed at compile time
    outputs                {out, ld_out} and, with a save(...) node, {saved, ld_saved}; a group-quantised output
                           (out_group) also {out_scale, ld_scale}: fp32 scales [M, ceil(N / out_group)]

A paired expression (gate / up, ir.is_paired) gives a functor with kPairs = true: load_col(n) reads its
n_vec operands at n >> 1, and store<V> (V even, n even) turns V GEMM columns into V / 2 outputs at column
n / 2 (aux operands and the saved output are indexed by that output column too). Kernels whose lanes hold
one column each pair them up first (portable_gemm.hpp, sm90_gemm_stores.hpp store_swapped).

`EpilogueSpec` is what a code object depends on: the expression, the element types of its tensor operands
and the output's quantisation group (the output type is the functor's template parameter). Its key names the
functor. With out_group (gemm_a8's out_group=128, hip_src/include/fusedgemm/out_groups.hpp) the functor declares
kOutGroup and gives store_code / store_scale; the kernel computes each group's scale from the values.
"""
from __future__ import annotations

import dataclasses
import hashlib

from . import ir

VEC_DTYPES = ("f32", "bf16", "f16", "dyn")  # dyn: any of the three, chosen at run time (the gemm_a8 bias)
AUX_DTYPES = ("f32", "bf16", "f16")
DYN_KINDS = {"f32": 1, "bf16": 2, "f16": 3}  # enum ElemKind in epilogue.hpp
# Output element types: name -> C++ type (the functor's Out) and bytes per element.
OUT_TYPES = {"bf16": ("fg::OutBf16", 2), "fp16": ("fg::OutF16", 2), "fp32": ("fg::OutF32", 4),
             "fp8e4m3fn": ("fg::OutFp8E4M3Fn", 1), "fp8e4m3fnuz": ("fg::OutFp8E4M3Fnuz", 1)}
SAVE_TYPES = {"bf16": "fg::OutBf16", "fp16": "fg::OutF16", "fp32": "fg::OutF32"}
OUT_GROUP = 128  # the one group width of group-quantised outputs


@dataclasses.dataclass(frozen=True)
class EpilogueSpec:
    """An expression with the element types of its vector and aux operands: one functor."""
    expr: ir.Node
    operand_dtypes: tuple[tuple[str, str], ...] = ()  # (name, dtype), sorted; every m_vec / n_vec / aux
    out_group: int = 0  # > 0: fp8 codes + one fp32 scale per row per out_group columns (out_groups.hpp)

    def __post_init__(self):
        ir.validate(self.expr)
        if self.out_group:
            if self.out_group != OUT_GROUP:
                raise ir.EpilogueError(f"out_group must be {OUT_GROUP} (DeepSeek-style 1x128 blocks), got "
                                       f"{self.out_group}")
            if ir.saved_node(self.expr) is not None:
                raise ir.EpilogueError(f"out_group: an expression without save(...), got {self.expr}")
        ops = ir.operands(self.expr)
        given = dict(self.operand_dtypes)
        for name, op in ops.items():
            if op.kind == "scalar":
                continue
            allowed = AUX_DTYPES if op.kind == "aux" else VEC_DTYPES
            dt = given.get(name)
            if dt not in allowed:
                raise ir.EpilogueError(f"{op.kind}({name}): element type must be one of {allowed}, got {dt!r}")
        extra = sorted(set(given) - {n for n, o in ops.items() if o.kind != "scalar"})
        if extra:
            raise ir.EpilogueError(f"element types given for {extra}, which are not tensor operands of {self.expr}")

    @classmethod
    def of(cls, expr: ir.Node, dtypes: dict[str, str] | None = None, out_group: int = 0) -> "EpilogueSpec":
        return cls(expr, tuple(sorted((dtypes or {}).items())), out_group)

    @property
    def key(self) -> str:
        text = f"{ir.KEY_VERSION}:{self.expr}|" + ",".join(f"{n}:{d}" for n, d in self.operand_dtypes)
        if self.out_group:  # (plain outputs keep the keys, and so the kernel names, they always had)
            text += f"|group{self.out_group}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def pairs(self) -> bool:
        """A paired expression (gate, up): outputs [M, N / 2] from a GEMM of N columns."""
        return ir.is_paired(self.expr)

    @property
    def struct_name(self) -> str:
        return f"Epilogue_{self.key}"

    def dtype(self, name: str) -> str:
        return dict(self.operand_dtypes)[name]


# ---- the Params layout (the one definition: C++ struct and Python packing both come from here) -------------
_CTYPE_SIZE = {"ptr": 8, "i64": 8, "i32": 4, "f32": 4}
_CPP = {"ptr": "const void*", "i64": "long long", "i32": "int", "f32": "float"}


def params_layout(spec: EpilogueSpec) -> list[tuple[str, str]]:
    """(field, ctype) in struct order. Every group is 8 bytes wide, so the C layout has no hidden padding."""
    fields = [("out", "ptr"), ("ld_out", "i64")]
    if ir.saved_node(spec.expr) is not None:
        fields += [("saved", "ptr"), ("ld_saved", "i64")]
    if spec.out_group:
        fields += [("out_scale", "ptr"), ("ld_scale", "i64")]
    for name, op in ir.operands(spec.expr).items():
        f = f"op_{name}"
        if op.kind == "scalar":
            fields += [(f + "_ptr", "ptr"), (f, "f32"), (f + "_pad", "i32")]
        elif op.kind == "aux":
            fields += [(f, "ptr"), (f + "_ld", "i64")]
        else:
            fields += [(f, "ptr"), (f + "_stride", "i32"), (f + "_kind", "i32")]
    return fields


def params_offsets(fields: list[tuple[str, str]]) -> tuple[list[int], int]:
    offs, pos = [], 0
    for _f, ct in fields:
        size = _CTYPE_SIZE[ct]
        pos = -(-pos // size) * size
        offs.append(pos)
        pos += size
    return offs, -(-pos // 8) * 8


# ---- dependency classes: what each node's value varies with ------------------------------------------------
_CONST, _UNIFORM, _ROW, _COL, _ELEM = 0, 1, 2, 3, 4


def _join(a: int, b: int) -> int:
    return _ELEM if {a, b} == {_ROW, _COL} else max(a, b)


def _dep(node: ir.Node, memo: dict) -> int:
    d = memo.get(node)
    if d is not None:
        return d
    op = node.op
    if op in ("acc", *ir.PAIR_LEAVES, "aux", "save"):
        d = _ELEM
        for a in node.args:
            _dep(a, memo)
    elif op == "const":
        d = _CONST
    elif op == "scalar":
        d = _UNIFORM
    elif op == "m_vec":
        d = _ROW
    elif op == "n_vec":
        d = _COL
    else:
        d = _CONST
        for a in node.args:
            da = _dep(a, memo)
            d = _join(d, da)
    memo[node] = d
    return d


def _float(v: float) -> str:
    if v == float("inf"):
        return "fg::epi::inf()"
    if v == float("-inf"):
        return "(-fg::epi::inf())"
    return f"static_cast<float>({float(v).hex()})"


class _Emitter:
    """Straight-line C++ for a set of roots, one const temp per distinct subtree (structural CSE)."""

    def __init__(self, spec: EpilogueSpec, hoisted: dict, prefix: str = "t"):
        self.spec = spec
        self.prefix = prefix  # temps are <prefix>0, <prefix>1, ...: distinct prefixes never shadow each other
        self.lines: list[str] = []
        self.names: dict[ir.Node, str] = {}
        self.hoisted = hoisted  # node -> C++ expression of an already-hoisted value (r[i] / c[i])
        self.ops = ir.operands(spec.expr)

    def value(self, node: ir.Node) -> str:
        if node in self.hoisted:
            return self.hoisted[node]
        if node in self.names:
            return self.names[node]
        expr = self._expr(node)
        if node.op in ("const", "acc", *ir.PAIR_LEAVES):
            return expr
        name = f"{self.prefix}{len(self.names)}"
        self.names[node] = name
        self.lines.append(f"const float {name} = {expr};")
        return name

    def _expr(self, node: ir.Node) -> str:
        op = node.op
        if op in ("acc", *ir.PAIR_LEAVES):
            return op
        if op == "const":
            return _float(node.attrs[0])
        if op in ("m_vec", "n_vec"):  # always inside a hoisted root: load_rows / load_cols read them in batches
            raise AssertionError(f"{node} reached per-element code")
        if op == "scalar":
            f = f"p.op_{node.attrs[0]}"
            return f"({f}_ptr ? fg::epi::load_f32_ro({f}_ptr, 0) : {f})"
        if op == "aux":
            name = node.attrs[0]
            f = f"p.op_{name}"
            return f"fg::epi::load_{self.spec.dtype(name)}({f}, static_cast<fg::i64>(m) * {f}_ld + n)"
        args = [self.value(a) for a in node.args]
        if op in ("add", "sub", "mul"):
            return f"{args[0]} {dict(add='+', sub='-', mul='*')[op]} {args[1]}"
        if op == "square":
            return f"{args[0]} * {args[0]}"
        if op == "neg":
            return f"-{args[0]}"
        if op in ("leaky_relu", "clamp"):
            return f"fg::epi::{op}({', '.join(args + [_float(v) for v in node.attrs])})"
        if op == "cast":
            return {"bf16": "fg::epi::round_bf16({})", "fp16": "fg::epi::round_f16({})", "fp32": "{}"}[
                node.attrs[0]].format(args[0])
        if op == "save":
            self.lines.append(f"saved = {args[0]};")
            return args[0]
        return f"fg::epi::{op}({', '.join(args)})"  # relu silu sigmoid gelu gelu_erf tanh exp abs sqrt rsqrt div max/min


def _hoisted_roots(expr: ir.Node) -> tuple[list[ir.Node], list[ir.Node]]:
    """The largest row-only and column-only subtrees that feed per-element nodes (or are the whole expression)."""
    memo: dict = {}
    _dep(expr, memo)
    rows: list[ir.Node] = []
    cols: list[ir.Node] = []

    def visit(node: ir.Node, parent_dep: int | None):
        d = memo[node]
        # Uniform values (scalars) that feed per-element nodes are loaded once per row with the row values.
        if d in (_UNIFORM, _ROW, _COL) and parent_dep in (None, _ELEM):
            target = cols if d == _COL else rows
            if node not in target:
                target.append(node)
            return
        for a in node.args:
            visit(a, d)

    visit(expr, None)
    return rows, cols


def _column_halves(expr: ir.Node, cols: list[ir.Node]) -> tuple[list[ir.Node], list[ir.Node]]:
    """A paired expression's column roots split between the two GEMM columns of a pair: the even (gate) column
    carries the first half, the odd (up) column the rest, so each column holds only half of them (registers:
    the kernels keep every column's values until its stores). Unpaired: all on every column."""
    if not ir.is_paired(expr):
        return cols, []
    h = (len(cols) + 1) // 2
    return cols[:h], cols[h:]


def _batched_body(spec: EpilogueSpec, roots: list[ir.Node], axis: str, odd_roots: list[ir.Node] | None = None
                  ) -> list[str]:
    """load_rows (axis "m") / load_cols (axis "n"): each vector operand of the axis into an array of kCount
    values (the branches on its presence and run-time type taken once, outside the loads, so all loads are in
    flight together), uniform scalars once, then each root per index into `out[i][k]`. A paired expression's
    columns are GEMM columns: its n_vec operands are read at the output column, idx >> 1; an even column gets
    `roots`, an odd one `odd_roots` (_column_halves), each operand loaded only for the parity that uses it."""
    paired = odd_roots is not None
    index = "(idx[i] >> 1)" if paired else "idx[i]"
    odd_roots = odd_roots or []
    ops = ir.operands(spec.expr)
    vec_op = "m_vec" if axis == "m" else "n_vec"
    leaves: list[ir.Node] = []
    scalars: list[ir.Node] = []
    parity: dict[ir.Node, set] = {}  # leaf -> the column parities whose roots use it (paired only)
    for p, group in ((0, roots), (1, odd_roots)):
        for root in group:
            for node in root.walk():
                if node.op == vec_op:
                    parity.setdefault(node, set()).add(p)
                    if node not in leaves:
                        leaves.append(node)
                elif node.op == "scalar" and node not in scalars:
                    scalars.append(node)
    lines, hoisted = [], {}

    def fill(arr: str, value: str) -> list[str]:
        return ["#pragma unroll", f"  for (int i = 0; i < kCount; ++i) {arr}[i] = {value};"]

    for leaf in leaves:
        name = leaf.attrs[0]
        o, dt, f, arr = ops[name], spec.dtype(name), f"p.op_{name}", f"v_{name}"
        lines.append(f"float {arr}[kCount];")

        # 32-bit index arithmetic (M, N < 2^31): 64-bit products of run-time strides cost registers that the
        # persistent kernel's epilogue warps do not have (spills).
        cond = "in[i]"
        if paired and parity[leaf] != {0, 1}:
            cond = "in[i] && (idx[i] & 1)" if parity[leaf] == {1} else "in[i] && !(idx[i] & 1)"

        def loads(load_fn: str) -> list[str]:
            return fill(arr, f"{cond} ? fg::epi::{load_fn}({f}, {index} * {f}_stride) : 0.f")

        def loads16(kind: str) -> list[str]:  # all the bits first, then the conversions (epilogue.hpp says why)
            bits = f"b_{name}"
            return [f"  fg::u32 {bits}[kCount];",
                    *fill(bits, f"{cond} ? fg::epi::load_bits16_ro({f}, {index} * {f}_stride) : 0u"),
                    *fill(arr, f"fg::epi::{kind}_bits_to_float({bits}[i])")]

        branches = []
        if o.default is not None:
            branches.append((f"!{f}", fill(arr, _float(o.default))))
        if dt == "dyn":
            branches += [(f"{f}_kind == fg::kElemF32", loads("load_f32_ro")),
                         (f"{f}_kind == fg::kElemBf16", loads16("bf16"))]
            last = loads16("f16")
        else:
            last = loads("load_f32_ro") if dt == "f32" else loads16(dt)
        for i, (cond, code) in enumerate(branches):
            lines += [f"{'if' if i == 0 else '} else if'} ({cond}) {{", *code]
        lines += (["} else {", *last, "}"] if branches else last)
        hoisted[leaf] = f"{arr}[i]"
    em = _Emitter(spec, {}, prefix="u")
    for s in scalars:
        hoisted[s] = em.value(s)
    lines += em.lines
    body = _Emitter(spec, hoisted)
    outs = [f"out[i][{k}] = {body.value(r)};" for k, r in enumerate(roots)]
    if paired and odd_roots:
        odd = _Emitter(spec, hoisted, prefix="w")
        odd_outs = [f"out[i][{k}] = {odd.value(r)};" for k, r in enumerate(odd_roots)]
        odd_outs += [f"out[i][{k}] = 0.f;" for k in range(len(odd_roots), len(roots))]
        lines += ["#pragma unroll", "for (int i = 0; i < kCount; ++i) {", "  if (idx[i] & 1) {"]
        lines += ["    " + x for x in odd.lines + odd_outs] + ["  } else {"]
        lines += ["    " + x for x in body.lines + outs] + ["  }", "}"]
    elif roots:
        lines += ["#pragma unroll", "for (int i = 0; i < kCount; ++i) {"] + ["  " + x for x in body.lines + outs] + ["}"]
    return lines


def hoisted_counts(spec: EpilogueSpec) -> tuple[int, int]:
    """(values per row, values per column) the functor hoists: kRowValues, kColValues (at least 1 each)."""
    rows, cols = _hoisted_roots(spec.expr)
    even, odd = _column_halves(spec.expr, cols)
    return max(1, len(rows)), max(1, len(even), len(odd))


def render_functor(spec: EpilogueSpec, name: str | None = None) -> str:
    """The C++ text of the functor (needs epilogue.hpp)."""
    name = name or spec.struct_name
    expr = spec.expr
    rows, cols = _hoisted_roots(expr)
    save = ir.saved_node(expr)
    fields = params_layout(spec)
    offsets, size = params_offsets(fields)

    paired = ir.is_paired(expr)
    cols, odd_cols = _column_halves(expr, cols)
    rows_lines = _batched_body(spec, rows, "m")
    cols_lines = _batched_body(spec, cols, "n", odd_cols if paired else None)
    hoisted = {r: f"r[{i}]" for i, r in enumerate(rows)}
    hoisted.update({c: f"c[{i}]" for i, c in enumerate(cols)})
    hoisted.update({c: f"cu[{i}]" for i, c in enumerate(odd_cols)})  # the pair's odd (up) column's values
    em = _Emitter(spec, hoisted)
    result = em.value(expr)
    value_lines = em.lines

    def indent(lines, n):
        return "".join(" " * n + line + "\n" for line in lines)

    cpp_fields = "".join(f"    {_CPP[ct]} {f};\n" for f, ct in fields)
    # NVRTC's front end has no __builtin_offsetof: there the size check stands alone.
    asserts = "#if !defined(__CUDACC_RTC__)\n" + "".join(
        f"  static_assert(__builtin_offsetof(Params, {f}) == {o}, \"Params.{f}: codegen layout\");\n"
        for (f, _c), o in zip(fields, offsets)) + "#endif\n"
    save_t = SAVE_TYPES[save.attrs[0]] if save is not None else None
    vec4_test = "fg::epi::vec4_stores_aligned<Out>(p.out, p.ld_out)" + (
        f" && fg::epi::vec4_stores_aligned<{save_t}>(p.saved, p.ld_saved)" if save_t else "")
    unused = "(void)m; (void)n; (void)p; (void)r; (void)c;"
    if paired:
        value_args = "float gate, float up, const float (&r)[kRowValues], const float (&c)[kColValues],\n" \
                     "                               const float (&cu)[kColValues]"
        value_unused = "(void)gate; (void)up; (void)cu;"
        store_body = f"""    static_assert(V % 2 == 0, "a paired epilogue takes whole (gate, up) column pairs: V even, n even");
    constexpr int kOut = V / 2;
    const int j = n >> 1;  // the output column of the first pair
    float y[kOut], s[kOut];
#pragma unroll
    for (int v = 0; v < kOut; ++v)
      y[v] = value(p, acc[2 * v], acc[2 * v + 1], r, c[2 * v], c[2 * v + 1], m, j + v, s[v]);
    fg::epi::store_row<Out, kOut, kVec4Aligned>(const_cast<void*>(p.out), p.ld_out, m, j, y);
{"    fg::epi::store_row<" + save_t + ", kOut, kVec4Aligned>(const_cast<void*>(p.saved), p.ld_saved, m, j, s);" if save_t else "    (void)s;"}
"""
        store_doc = ("  // V GEMM columns n .. n + V - 1 (n even) of row m: V / 2 (gate, up) pairs -> outputs n / 2 .. "
                     "n / 2 + V / 2 - 1.\n")
    else:
        value_args = "float acc, const float (&r)[kRowValues],\n                               const float (&c)[kColValues]"
        value_unused = "(void)acc;"
        store_body = f"""    float y[V], s[V];
#pragma unroll
    for (int v = 0; v < V; ++v) y[v] = value(p, acc[v], r, c[v], m, n + v, s[v]);
    fg::epi::store_row<Out, V, kVec4Aligned>(const_cast<void*>(p.out), p.ld_out, m, n, y);
{"    fg::epi::store_row<" + save_t + ", V, kVec4Aligned>(const_cast<void*>(p.saved), p.ld_saved, m, n, s);" if save_t else "    (void)s;"}
"""
        store_doc = ""
    group = "" if not spec.out_group else f"""  // Group-quantised output (out_groups.hpp): the kernel reduces |value| over a row's {spec.out_group} columns.
  static constexpr int kOutGroup = {spec.out_group};
  template <int V>  // V consecutive codes of row m from column n: one store (V = 1, or 2 aligned at an even n)
  FG_DEVICE static void store_codes(const Params& p, int m, int n, const float (&y)[V], float inv_scale) {{
    float t[V];
#pragma unroll
    for (int v = 0; v < V; ++v) t[v] = fg::quant::mul_rn(y[v], inv_scale);  // rounded, then converted: quantize_rows'
    fg::epi::store_row<Out, V>(const_cast<void*>(p.out), p.ld_out, m, n, t);
  }}
  FG_DEVICE static void store_code(const Params& p, int m, int n, float y, float inv_scale) {{
    const float t[1] = {{y}};
    store_codes<1>(p, m, n, t, inv_scale);
  }}
  FG_DEVICE static void store_scale(const Params& p, int m, int g, float s) {{
    static_cast<float*>(const_cast<void*>(p.out_scale))[static_cast<long long>(m) * p.ld_scale + g] = s;
  }}
"""
    return f"""// {expr}
// operand types: {', '.join(f'{n}:{d}' for n, d in spec.operand_dtypes) or '-'}
template <class Out>
struct {name} {{
  using Output = Out;
  struct Params {{
{cpp_fields}  }};
  static_assert(sizeof(Params) == {size}, "Params: codegen layout");
{asserts}  static constexpr int kRowValues = {max(1, len(rows))};  // {len(rows)} used (arrays are never empty)
  static constexpr int kColValues = {max(1, len(cols), len(odd_cols))};  // {len(cols) + len(odd_cols)} used
  static constexpr bool kSaves = {str(save is not None).lower()};
  static constexpr bool kPairs = {str(paired).lower()};  // gate / up: one output per GEMM column pair
  // The row values of kCount rows idx[i] (zeros where !in[i]), loaded operand by operand (see load_cols).
  template <int kCount>
  FG_DEVICE static void load_rows(const Params& p, const int (&idx)[kCount], const bool (&in)[kCount],
                                  float (&out)[kCount][kRowValues]) {{
    (void)p; (void)idx; (void)in;
#pragma unroll
    for (int i = 0; i < kCount; ++i) out[i][0] = 0.f;
{indent(rows_lines, 4)}  }}
  FG_DEVICE static void load_row(const Params& p, int m, float (&r)[kRowValues]) {{
    const int ms[1] = {{m}};
    const bool in[1] = {{true}};
    load_rows<1>(p, ms, in, *reinterpret_cast<float(*)[1][kRowValues]>(&r));
  }}
  // The column values of kCount columns idx[i] (zeros where !in[i]), loaded operand by operand: the branches
  // on an operand's presence and run-time type are taken once, outside the loads (per column they cost
  // registers that the 192-wide tiles do not have, and serialise the loads).
  template <int kCount>
  FG_DEVICE static void load_cols(const Params& p, const int (&idx)[kCount], const bool (&in)[kCount],
                                  float (&out)[kCount][kColValues]) {{
    (void)p; (void)idx; (void)in;
#pragma unroll
    for (int i = 0; i < kCount; ++i) out[i][0] = 0.f;
{indent(cols_lines, 4)}  }}
  FG_DEVICE static void load_col(const Params& p, int n, float (&c)[kColValues]) {{
    const int ns[1] = {{n}};
    const bool in[1] = {{true}};
    load_cols<1>(p, ns, in, *reinterpret_cast<float(*)[1][kColValues]>(&c));
  }}
  // The value of output (m, n) from its accumulator, row and column values; `saved` gets the save node's value.
  FG_DEVICE static float value(const Params& p, {value_args}, int m, int n, float& saved) {{
    {unused} {value_unused} saved = 0.f;
{indent(value_lines, 4)}    return {result};
  }}
  FG_DEVICE static bool vec4_aligned(const Params& p) {{
    return {vec4_test};
  }}
{store_doc}  template <int V, bool kVec4Aligned = false>
  FG_DEVICE static void store(const Params& p, int m, int n, const float (&acc)[V], const float (&r)[kRowValues],
                              const float (&c)[V][kColValues]) {{
{store_body}  }}
{group}}};
"""
