"""Generated epilogue functors, compiled for the host (g++ -DFG_HOST) and run on the CPU through ctypes, against
the float64 evaluator: each op alone (tight), and hundreds of random trees of every leaf and op (the same
Params packing the kernels get, the same load_row / load_col / store path)."""
import ctypes
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import fusedgemm.epilogue as E
from fusedgemm.epilogue import codegen, ir
from fusedgemm.epilogue.evaluate import TORCH_DTYPES, round_to
from fusedgemm.runtime.kernels import epilogue_params_type

from epilogue_trees import check_close, random_operands, random_tree, tolerance

ROOT = Path(__file__).resolve().parents[1]
CXX = shutil.which("g++") or shutil.which("clang++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a host C++ compiler")
M, N = 6, 16
OUT_TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
             "fp8e4m3fn": torch.float8_e4m3fn, "fp8e4m3fnuz": torch.float8_e4m3fnuz}


def _runner(i: int, spec: codegen.EpilogueSpec, out: str, v: int) -> str:
    """extern "C" run_<i>(params, acc, M, N): the whole [M, N] tile through the functor, V outputs per store."""
    t = f"{spec.struct_name}<{codegen.OUT_TYPES[out][0]}>"
    return f"""
extern "C" void run_{i}(const void* params, const float* acc, int M, int N) {{
  using Epi = {t};
  const Epi::Params& p = *static_cast<const Epi::Params*>(params);
  for (int m = 0; m < M; ++m) {{
    float r[Epi::kRowValues];
    Epi::load_row(p, m, r);
    for (int n = 0; n < N; n += {v}) {{
      float c[{v}][Epi::kColValues], a[{v}];
      int ns[{v}];
      bool in[{v}];
      for (int k = 0; k < {v}; ++k) {{ ns[k] = n + k; in[k] = true; a[k] = acc[m * N + n + k]; }}
      if (n % 4 == 2) {{  // both column paths: one at a time, and batched
        for (int k = 0; k < {v}; ++k) Epi::load_col(p, n + k, c[k]);
      }} else {{
        Epi::template load_cols<{v}>(p, ns, in, c);
      }}
      Epi::template store<{v}>(p, m, n, a, r, c);
    }}
  }}
}}
"""


def build_library(cases, tmp: Path) -> ctypes.CDLL:
    """cases: [(spec, out type, V)] -> a shared library with run_<i> for each (one compiler call)."""
    seen, text = set(), ['#include "include/fusedgemm/epilogue.hpp"\n']
    for spec, _out, _v in cases:
        if spec.key not in seen:
            seen.add(spec.key)
            text.append(codegen.render_functor(spec))
    text += [_runner(i, spec, out, v) for i, (spec, out, v) in enumerate(cases)]
    src = tmp / "functors.cpp"
    src.write_text("".join(text))
    lib = tmp / "functors.so"
    proc = subprocess.run([CXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-DFG_HOST", "-Wno-unknown-pragmas",
                           f"-I{ROOT / 'hip_src'}", str(src), "-o", str(lib)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return ctypes.CDLL(str(lib))


def run_case(lib, i, spec, out, acc, ops, kinds):
    """Pack Params as the launcher does (kernels.StructType), run, return (out, saved) tensors. A paired spec
    takes acc [M, 2I] (GEMM columns) and writes [M, I]."""
    m, n = acc.shape
    n_gemm = n
    if ir.is_paired(spec.expr):
        n //= 2
    y = torch.full((m, n), float("nan")).to(OUT_TORCH[out]) if not out.startswith("fp8") else \
        torch.full((m, n), 0x55, dtype=torch.uint8).view(OUT_TORCH[out])
    save = ir.saved_node(spec.expr)
    saved = None if save is None else torch.full((m, n), float("nan"), dtype=TORCH_DTYPES[save.attrs[0]])
    values = {"out": y.data_ptr(), "ld_out": n}
    if saved is not None:
        values.update(saved=saved.data_ptr(), ld_saved=n)
    keep = []
    for name, o in ir.operands(spec.expr).items():
        f, v = f"op_{name}", ops.get(name)
        if o.kind == "scalar":
            values.update({f + "_ptr": v.data_ptr() if isinstance(v, torch.Tensor) else 0,
                           f: 0.0 if isinstance(v, torch.Tensor) else float(v)})
        elif o.kind == "aux":
            values.update({f: v.data_ptr(), f + "_ld": n})
        else:
            values.update({f: 0 if v is None else v.data_ptr(), f + "_stride": 1, f + "_kind": kinds.get(name, 0)})
        keep.append(v)
    st = epilogue_params_type(spec)
    import struct as _struct

    buf = ctypes.create_string_buffer(_struct.pack("<" + st.format, *[values.get(f, 0) for f, _c in st.fields]))
    acc32 = acc.to(torch.float32).contiguous()
    getattr(lib, f"run_{i}")(buf, ctypes.c_void_p(acc32.data_ptr()), m, n_gemm)
    return y, saved


# ---- each op alone, tight ------------------------------------------------------------------------------------
SINGLE = ["relu(acc)", "silu(acc)", "sigmoid(acc)", "gelu(acc)", "gelu_erf(acc)", "tanh(acc)", "exp(acc)",
          "neg(acc)", "abs(acc)", "square(acc)", "sqrt(abs(acc))", "rsqrt(abs(acc) + 0.5)", "leaky_relu(acc, 0.2)",
          "clamp(acc, -1.0, 2.0)", "acc + n_vec(b)", "acc - m_vec(a)", "acc * scalar(s)", "acc / (abs(n_vec(b)) + 0.5)",
          "maximum(acc, n_vec(b))", "minimum(acc, m_vec(a))", "cast(acc, bf16)", "cast(acc, fp16)", "cast(acc, fp32)",
          "acc * 2.0 - 0.5", "aux(r) * acc", "m_vec(a, 1.5) * acc + n_vec(b, -0.5)"]


def test_each_op_alone(tmp_path, seed):
    rng = random.Random(seed)
    cases, data = [], []
    for text in SINGLE:
        expr = E.parse(text)
        ops, dtypes, kinds = random_operands(rng, expr, M, N)
        spec = codegen.EpilogueSpec.of(expr, dtypes)
        cases.append((spec, "fp32", 2))
        data.append((expr, ops, kinds))
    lib = build_library(cases, tmp_path)
    for i, ((spec, out, _v), (expr, ops, kinds)) in enumerate(zip(cases, data)):
        acc = torch.randn(M, N, dtype=torch.float64) * 3
        acc[0, :4] = torch.tensor([0.0, -0.0, 1e-3, -30.0])
        acc32 = acc.to(torch.float32).to(torch.float64)
        y, _ = run_case(lib, i, spec, out, acc32, ops, kinds)
        ref = E.evaluate(expr, acc32, ops)
        check_close(y, ref, 4e-6 * ref.abs() + 1e-6 + tolerance(expr, acc32, ops, ref), str(expr))


def test_nan_propagates_through_every_op(tmp_path):
    exprs = ["relu(acc)", "leaky_relu(acc, 0.1)", "maximum(acc, 1.0)", "minimum(1.0, acc)", "clamp(acc, -1.0, 1.0)",
             "silu(acc)", "gelu(acc)", "gelu_erf(acc)", "tanh(acc)", "abs(acc)", "sigmoid(acc)", "cast(acc, bf16)"]
    cases = [(codegen.EpilogueSpec.of(E.parse(t)), "fp32", 1) for t in exprs]
    lib = build_library(cases, tmp_path)
    acc = torch.full((1, 2), float("nan"), dtype=torch.float64)
    for i, (spec, out, _v) in enumerate(cases):
        y, _ = run_case(lib, i, spec, out, acc, {}, {})
        assert y.isnan().all(), (str(spec.expr), y)


# ---- random trees --------------------------------------------------------------------------------------------
def check_random_trees(cases, data, tmp_path, what: str):
    """Build `cases` into one library and check each functor against the float64 evaluator on its own fp32-exact
    accumulators: the output within the tree's tolerance, a saved intermediate within one ulp of its type."""
    lib = build_library(cases, tmp_path)
    for i, ((spec, out, _v), (expr, ops, kinds)) in enumerate(zip(cases, data)):
        acc = (torch.randn(M, N, generator=torch.Generator().manual_seed(i), dtype=torch.float64) * 2)
        acc = acc.to(torch.float32).to(torch.float64)
        y, saved = run_case(lib, i, spec, out, acc, ops, kinds)
        ref, ref_saved = E.evaluate_outputs(expr, acc, ops)
        check_close(y, ref, tolerance(expr, acc, ops, ref), f"{what} {i}: {expr}", allowed=0.02)
        if ref_saved is not None:
            tol = ref_saved.abs().nan_to_num(0.0, 0.0, 0.0) * 2 ** -7 + 1e-6  # one ulp of the save type, ~
            check_close(saved, ref_saved, tol, f"{what} {i} saved: {expr}", allowed=0.05)


def test_random_trees(tmp_path):
    """300 random trees (depth <= 6, every leaf and op, optional operands left out, dyn and typed operands,
    fp32 output through pair and quad stores): the functor matches the float64 evaluator."""
    rng = random.Random(1234)  # fixed: a failing tree is reproducible from the test alone
    cases, data = [], []
    for i in range(300):
        expr = random_tree(rng)
        ops, dtypes, kinds = random_operands(rng, expr, M, N, dyn=True)
        cases.append((codegen.EpilogueSpec.of(expr, dtypes), "fp32", (1, 2, 4)[i % 3]))
        data.append((expr, ops, kinds))
    check_random_trees(cases, data, tmp_path, "tree")


@pytest.mark.parametrize("out", ["bf16", "fp16", "fp8e4m3fn", "fp8e4m3fnuz"])
def test_output_types_round_once(tmp_path, out):
    """The value is rounded once to the output type, to nearest even; fp8 saturates (NaN stays NaN)."""
    expr = E.parse("acc * scalar(s)")
    spec = codegen.EpilogueSpec.of(expr)
    lib = build_library([(spec, out, 2), (spec, out, 4)], tmp_path)
    acc = torch.randn(8, 64, dtype=torch.float64) * 50
    acc[0, :8] = torch.tensor([1e6, -1e6, float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-9])
    acc = acc.to(torch.float32).to(torch.float64)
    for i in range(2):
        y, _ = run_case(lib, i, spec, out, acc, {"s": 1.0}, {})
        want = round_to(acc, OUT_TORCH[out])
        got = y.to(torch.float64)
        same = (got == want) | (got.isnan() & want.isnan())
        if out.startswith("fp8"):  # bit-exact against torch's conversion of the saturated value
            same &= (y.view(torch.uint8) == want.to(OUT_TORCH[out]).view(torch.uint8)) | want.isnan()
        assert same.all(), (out, got[~same][:5], want[~same][:5])


# ---- paired expressions (gate, up): V GEMM columns in, V / 2 outputs ----------------------------------------------
PAIRED = ["silu(gate) * up", "gelu(gate) * up", "gelu_erf(gate) * up", "relu(gate) * up",
          "cast(cast(silu(cast(gate, bf16)), bf16) * cast(up, bf16), bf16)",
          "silu(gate * n_vec(sg) + n_vec(bg, 0.0)) * (up * n_vec(su) + n_vec(bu, 0.0)) * m_vec(a, 1.0)",
          "save(silu(gate), fp32) * up + aux(r) * scalar(s)", "gate - up"]


def test_paired_functors(tmp_path, seed):
    """kPairs functors: n_vec operands by output column (n >> 1), aux / save / out [M, N / 2], pair and quad
    stores (V = 2 at every even column, V = 4 at multiples of 4), against the float64 evaluator."""
    rng = random.Random(seed)
    cases, data = [], []
    for text in PAIRED:
        expr = E.parse(text)
        ops, dtypes, kinds = random_operands(rng, expr, M, N // 2)
        spec = codegen.EpilogueSpec.of(expr, dtypes)
        assert "static constexpr bool kPairs = true;" in codegen.render_functor(spec)
        for v in (2, 4):
            cases.append((spec, "fp32", v))
            data.append((expr, ops, kinds))
    lib = build_library(cases, tmp_path)
    for i, ((spec, out, v), (expr, ops, kinds)) in enumerate(zip(cases, data)):
        acc = (torch.randn(M, N, dtype=torch.float64) * 3).to(torch.float32).to(torch.float64)
        y, saved = run_case(lib, i, spec, out, acc, ops, kinds)
        ref, ref_saved = E.evaluate_outputs(expr, acc, ops)
        assert y.shape == (M, N // 2)
        check_close(y, ref, 4e-6 * ref.abs() + 1e-6 + tolerance(expr, acc, ops, ref), f"{expr} (V={v})")
        if ref_saved is not None:
            check_close(saved, ref_saved, 4e-6 * ref_saved.abs() + 1e-6, f"{expr} saved (V={v})")


def test_paired_random_trees(tmp_path):
    """100 random paired trees (gate / up leaves, every op and operand kind) through pair and quad stores."""
    rng = random.Random(4321)
    cases, data = [], []
    for i in range(100):
        expr = random_tree(rng, paired=True)
        ops, dtypes, kinds = random_operands(rng, expr, M, N // 2, dyn=True)
        cases.append((codegen.EpilogueSpec.of(expr, dtypes), "fp32", (2, 4)[i % 2]))
        data.append((expr, ops, kinds))
    check_random_trees(cases, data, tmp_path, "paired tree")


def test_paired_store_needs_even_v(tmp_path):
    """store<1> of a paired functor does not compile (a lone column is half a pair): the static_assert says so."""
    spec = codegen.EpilogueSpec.of(E.parse("silu(gate) * up"))
    with pytest.raises(AssertionError, match="whole \\(gate, up\\) column pairs"):
        build_library([(spec, "fp32", 1)], tmp_path)
