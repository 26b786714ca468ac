"""The epilogue IR on the CPU: canonical text round trips, stable keys, the float64 evaluator, presets, and the
errors for bad expressions and operands (named, before any compile)."""
import random
import subprocess
import sys

import pytest
import torch

import fusedgemm.epilogue as E
from fusedgemm.epilogue import ir
from fusedgemm.epilogue.bind import bind
from fusedgemm.epilogue.codegen import EpilogueSpec, hoisted_counts
from fusedgemm.reference import gemm_a8_reference

from epilogue_trees import random_tree

CANONICAL = [
    "acc",
    "silu(acc * (scalar(alpha) * m_vec(scale_a, 1.0) * n_vec(scale_b, 1.0)) + n_vec(bias, 0.0))",
    "clamp(gelu(acc + aux(residual)), -inf, 6.0) * -2.0 - (acc - 1e-05) / save(acc, bf16)",
    "leaky_relu(acc, 0.01) + maximum(acc, minimum(m_vec(x), n_vec(y)))",
    "acc - (acc - acc)",
    "acc / (acc * acc)",
    "neg(acc) * -0.5 + cast(exp(acc), fp16)",
    "rsqrt(abs(acc) + 0.25) * sqrt(square(acc)) + tanh(sigmoid(acc)) + gelu_erf(relu(acc))",
]


@pytest.mark.parametrize("text", CANONICAL)
def test_canonical_text_round_trips_exactly(text):
    e = E.parse(text)
    assert str(e) == text
    assert E.parse(str(e)) == e


def test_infix_and_call_spellings_parse_to_one_tree():
    assert E.parse("add(mul(acc, 2), neg(acc))") == E.parse("acc * 2.0 + -acc") == E.acc * 2 + -E.acc
    assert E.parse("sub(acc, sub(acc, acc))") == E.parse("acc - (acc - acc)")
    assert E.parse("(acc - acc) - acc") == E.parse("acc - acc - acc")  # left-associative
    assert str(E.parse("(acc)")) == "acc"


def test_random_trees_round_trip():
    rng = random.Random(7)
    for _ in range(500):
        e = random_tree(rng)
        assert E.parse(str(e)) == e, str(e)
        assert str(E.parse(str(e))) == str(e)


def test_key_is_stable_across_processes():
    texts = CANONICAL[1:4]
    here = [E.key(E.parse(t)) for t in texts]
    code = ("import fusedgemm.epilogue as E, sys\n"
            f"print(' '.join(E.key(E.parse(t)) for t in {texts!r}))")
    there = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert here == there
    assert len(set(here)) == len(here)
    assert E.key(E.parse("acc * 2.0")) == E.key(E.acc * 2)  # the same tree however built


def test_spec_key_includes_operand_types():
    e = E.parse("acc + n_vec(b)")
    assert EpilogueSpec.of(e, {"b": "f32"}).key != EpilogueSpec.of(e, {"b": "bf16"}).key
    assert EpilogueSpec.of(e, {"b": "f32"}).key == EpilogueSpec.of(E.parse(str(e)), {"b": "f32"}).key


def test_presets_are_expressions_with_optional_operands():
    assert str(E.preset("bias_silu")) == CANONICAL[1]
    assert E.preset("silu") == E.preset("bias_silu")  # one kernel serves both names
    assert str(E.preset("bias")) == "acc * (scalar(alpha) * m_vec(scale_a, 1.0) * n_vec(scale_b, 1.0)) + n_vec(bias, 0.0)"
    with pytest.raises(ValueError, match="unknown epilogue 'swish'"):
        E.preset("swish")


@pytest.mark.parametrize("name", ["none", "bias", "bias_relu", "bias_silu", "bias_gelu", "bias_gelu_erf", "gelu"])
def test_presets_evaluate_like_the_gemm_a8_reference(name, seed):
    a = torch.randint(-8, 8, (5, 64), dtype=torch.int8)
    w = torch.randint(-8, 8, (32, 64), dtype=torch.int8)
    sa, sb, bias = torch.rand(5), torch.rand(32), torch.randn(32)
    uses_bias = name.startswith("bias")
    ref = gemm_a8_reference(a, w, bias if uses_bias else None, scale_a=sa, scale_b=sb, epilogue=name, unrounded=True)
    acc = a.double() @ w.double().T
    ops = {"alpha": 1.0, "scale_a": sa, "scale_b": sb, **({"bias": bias} if uses_bias else {})}
    torch.testing.assert_close(E.evaluate(E.preset(name), acc, ops), ref, rtol=1e-12, atol=1e-12)


def test_evaluate_semantics():
    acc = torch.tensor([[-2.0, -0.0, float("nan"), 3.0]], dtype=torch.float64)
    assert torch.equal(E.evaluate(E.parse("relu(acc)"), acc).isnan(), acc.isnan())  # NaN propagates
    y = E.evaluate(E.parse("clamp(acc, -1.0, 2.0)"), acc)
    assert y[0, 0] == -1.0 and y[0, 3] == 2.0 and y[0, 2].isnan()
    # optional operands read their default when absent; a single value broadcasts
    y = E.evaluate(E.parse("acc * n_vec(s, 2.0) + m_vec(b)"), acc.nan_to_num(), {"b": torch.tensor([1.0])})
    assert torch.equal(y, acc.nan_to_num() * 2 + 1)
    # cast is a rounding point; save returns the intermediate rounded to its dtype
    x = torch.tensor([[1.0 + 2 ** -10]], dtype=torch.float64)
    assert E.evaluate(E.parse("cast(acc, bf16)"), x).item() == 1.0
    out, saved = E.evaluate_outputs(E.parse("save(acc * 3.0, fp16) + 1.0"), x)
    assert out.item() == 3 * (1 + 2 ** -10) + 1 and saved.item() == float(torch.tensor(3 * (1 + 2 ** -10)).half())
    # fp8 outputs saturate
    big = torch.tensor([[1e6, -1e6]], dtype=torch.float64)
    assert E.round_to(big, torch.float8_e4m3fn).tolist() == [[448.0, -448.0]]
    assert E.round_to(big, torch.float8_e4m3fnuz).tolist() == [[240.0, -240.0]]


def test_hoisting_classifies_rows_columns_and_uniforms():
    # alpha * scale_a is per row, scale_b and bias per column: the presets' 1 + 2 values
    assert hoisted_counts(EpilogueSpec.of(E.preset("silu"), {"scale_a": "f32", "scale_b": "f32", "bias": "dyn"})) == (1, 2)
    # a scalar times a column vector is one column value; acc-only needs none (arrays still have 1)
    assert hoisted_counts(EpilogueSpec.of(E.parse("acc + scalar(s) * n_vec(b)"), {"b": "f32"})) == (1, 1)
    assert hoisted_counts(EpilogueSpec.of(E.parse("relu(acc)"))) == (1, 1)


@pytest.mark.parametrize("text,match", [
    ("swish(acc)", "unknown op 'swish'"),
    ("acc + bias", "unknown name 'bias'"),
    ("acc +", "expected an operand, got the end"),
    ("acc $ 2", r"unexpected character '\$'"),
    ("relu(acc, 2.0)", "expected '\\)'"),
    ("leaky_relu(acc)", "expected ','"),
    ("cast(acc, fp8)", "cast: dtype must be one of bf16, fp16, fp32"),
    ("acc * nan", "unknown name 'nan'"),
    ("m_vec(x) + n_vec(x)", "operand 'x' is used as m_vec\\(x\\) and as n_vec\\(x\\)"),
    ("n_vec(x) + n_vec(x, 1.0)", "one name is one operand"),
    ("save(acc, bf16) + save(acc, fp16)", "at most one second output"),
    ("aux(a) + aux(b) + aux(c) + aux(d) + aux(e)", "at most 4"),
    ("m_vec(1x)", "expected name"),
])
def test_bad_expressions_name_the_problem(text, match):
    with pytest.raises(E.EpilogueError, match=match):
        E.parse(text)


def test_bad_builders():
    with pytest.raises(E.EpilogueError, match="identifier"):
        E.n_vec("not valid")
    with pytest.raises(E.EpilogueError, match="finite"):
        E.const(float("nan"))
    with pytest.raises(E.EpilogueError, match="expected an epilogue node or a number, got str"):
        E.acc + "1"
    with pytest.raises(E.EpilogueError, match=f"at most {ir.MAX_NODES}"):
        e = E.acc
        for _ in range(ir.MAX_NODES):
            e = E.relu(e)
        ir.validate(e)


@pytest.mark.parametrize("operands,exc,match", [
    ({}, ValueError, r"m_vec\(sa\) has no value"),
    ({"sa": torch.rand(8), "res": torch.rand(4, 16), "zz": 1.0}, ValueError, r"operands \['zz'\] are not used"),
    ({"sa": torch.rand(16), "res": torch.rand(4, 16)}, ValueError, r"m_vec\(sa\) must be \[M=4\]"),
    ({"sa": torch.rand(4), "res": torch.rand(16, 4)}, ValueError, r"aux\(res\) must be \[M=4, N=16\]"),
    ({"sa": torch.rand(4).double(), "res": torch.rand(4, 16)}, TypeError, "float32, bfloat16 or float16"),
    ({"sa": torch.rand(4), "res": torch.rand(16, 4).T}, ValueError, "unit column stride"),
    ({"sa": torch.rand(4), "res": torch.rand(4, 17)[:, :16]}, ValueError, "even row stride"),
    ({"sa": torch.rand(4), "res": torch.rand(4, 16), "q": "x"}, TypeError, r"scalar\(q\) must be a number"),
    ({"sa": torch.rand(4), "res": torch.rand(4, 16), "q": torch.rand(2)}, TypeError, r"scalar\(q\) must be a number"),
    ({"sa": torch.rand(4), "res": torch.rand(4, 16, device="meta")}, ValueError, r"aux\(res\) is on meta"),
])
def test_bind_names_each_bad_operand(operands, exc, match):
    expr = E.parse("acc * m_vec(sa) + aux(res) * scalar(q)")
    ops = dict(operands) if not operands or "q" in operands or "zz" in operands else dict(operands, q=1.0)
    with pytest.raises(exc, match=match):
        bind(expr, ops, 4, 16, torch.device("cpu"))


def test_bind_accepts_strided_vectors_and_device_scalars():
    expr = E.parse("acc * m_vec(sa) + n_vec(b, 0.0) * scalar(q)")
    sa = torch.rand(8)[::2]
    b = bind(expr, {"sa": sa, "q": torch.tensor([2.0])}, 4, 16, torch.device("cpu"))
    assert b.values["op_sa_stride"] == 2 and b.values["op_b"] == 0 and b.values["op_q_ptr"] != 0
    assert dict(b.spec.operand_dtypes) == {"sa": "f32", "b": "f32"}


def test_presets_header_is_generated_and_fresh():
    """hip_src/include/fusedgemm/epilogue_presets.hpp is what codegen makes of the presets (regenerate with
    `python -m fusedgemm.epilogue.presets write-header`); the ahead-of-time units are built from it."""
    from pathlib import Path

    from fusedgemm.epilogue.presets import PRESETS_HEADER, render_presets_header

    assert (Path(__file__).resolve().parents[1] / PRESETS_HEADER).read_text() == render_presets_header()


def test_presets_module_writes_only_on_its_subcommand(tmp_path):
    """`python -m fusedgemm.epilogue.presets --help` (or no subcommand) writes nothing; `write-header --check`
    says whether the header is fresh; `write-header` writes it (here under a scratch root)."""
    import subprocess
    import sys
    from pathlib import Path

    from fusedgemm.epilogue.presets import PRESETS_HEADER, main, render_presets_header

    header = Path(__file__).resolve().parents[1] / PRESETS_HEADER
    before = header.stat().st_mtime_ns
    run = subprocess.run([sys.executable, "-m", "fusedgemm.epilogue.presets", "--help"], capture_output=True, text=True)
    assert run.returncode == 0 and "write-header" in run.stdout
    with pytest.raises(SystemExit):
        main([])  # a subcommand is required
    assert header.stat().st_mtime_ns == before
    target = tmp_path / PRESETS_HEADER
    target.parent.mkdir(parents=True)
    assert main(["write-header", "--check", "--root", str(tmp_path)]) == 1 and not target.exists()
    assert main(["write-header", "--root", str(tmp_path)]) == 0 and target.read_text() == render_presets_header()
    assert main(["write-header", "--check", "--root", str(tmp_path)]) == 0
