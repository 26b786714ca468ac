"""Paired epilogue expressions (gate, up) on the CPU: text, keys, validation, the float64 evaluator against a
direct formula, codegen's shape (kPairs, n >> 1 column loads) and binding against the output's N / 2."""
import math

import pytest
import torch

import fusedgemm.epilogue as E
from fusedgemm.epilogue import codegen, ir
from fusedgemm.epilogue.bind import bind

PAIRED_TEXTS = [
    "silu(gate) * up",
    "gelu(gate) * up",
    "cast(cast(silu(cast(gate, bf16)), bf16) * cast(up, bf16), bf16)",
    "silu(gate + n_vec(bg, 0.0)) * (up + n_vec(bu)) + aux(r) * scalar(s)",
    "save(relu(gate), bf16) * up * m_vec(sa, 1.0)",
]


@pytest.mark.parametrize("text", PAIRED_TEXTS)
def test_paired_text_round_trips(text):
    e = E.parse(text)
    assert str(e) == text and E.parse(str(e)) == e
    assert E.is_paired(e)


def test_builders_and_keys():
    assert E.silu(E.gate) * E.up == E.parse("silu(gate) * up")
    # Stable across processes and machines (the text hashes); pinned so a change of the text form is seen.
    assert E.key(E.parse("silu(gate) * up")) == "46fceb4ddc91dcaa"
    # Non-paired keys are what they were before gate / up existed (the code-object cache stays valid).
    assert E.key(E.parse("silu(acc) * n_vec(b)")) == "635aa3f9427b0182"
    assert codegen.EpilogueSpec.of(E.parse("silu(acc) * n_vec(b)"), {"b": "bf16"}).key == "0e1148b2c3c5c6c4"
    assert E.key(E.parse("silu(gate) * up")) != E.key(E.parse("silu(acc) * acc"))
    assert not E.is_paired(E.parse("silu(acc) * n_vec(gate)"))  # an operand named gate is just a name


@pytest.mark.parametrize("text", ["silu(gate) * acc", "acc + up", "save(acc, bf16) * gate"])
def test_mixing_acc_with_gate_or_up_is_refused(text):
    with pytest.raises(E.EpilogueError, match="mixes acc with gate / up"):
        E.parse(text)
    with pytest.raises(E.EpilogueError, match="mixes acc with gate / up"):
        E.validate(E.acc * E.gate)


def test_evaluate_takes_interleaved_columns():
    """acc [M, 2I] interleaved (gate 2j, up 2j + 1) -> [M, I], operands by output column."""
    g = torch.Generator().manual_seed(0)
    m, i = 5, 6
    acc = torch.randn(m, 2 * i, generator=g, dtype=torch.float64) * 3
    bg, bu, r = torch.randn(i, generator=g), torch.randn(i, generator=g), torch.randn(m, i, generator=g)
    e = E.parse(PAIRED_TEXTS[3])
    got = E.evaluate(e, acc, {"bg": bg, "bu": bu, "r": r, "s": 0.5})
    gate, up = acc[:, 0::2], acc[:, 1::2]
    x = gate + bg.double()
    want = x / (1 + torch.exp(-x)) * (up + bu.double()) + r.double() * 0.5
    assert got.shape == (m, i)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    # gelu (tanh form), directly
    want_gelu = 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3))) * up
    torch.testing.assert_close(E.evaluate(E.parse("gelu(gate) * up"), acc), want_gelu, rtol=1e-14, atol=1e-14)
    # save(...) is [M, I] too
    out, saved = E.evaluate_outputs(E.parse(PAIRED_TEXTS[4]), acc, {})
    assert out.shape == saved.shape == (m, i)
    with pytest.raises(E.EpilogueError, match="even number of accumulator columns"):
        E.evaluate(E.parse("silu(gate) * up"), acc[:, :5])
    with pytest.raises(E.EpilogueError, match=r"must be \[N=6\]"):
        E.evaluate(e, acc, {"bg": torch.randn(2 * i), "bu": bu, "r": r, "s": 0.5})


def test_codegen_pairs_columns():
    spec = codegen.EpilogueSpec.of(E.parse("silu(gate * n_vec(s)) * up"), {"s": "f32"})
    text = codegen.render_functor(spec)
    assert "static constexpr bool kPairs = true;" in text
    assert "(idx[i] >> 1) * p.op_s_stride" in text  # the column operand read at the output column
    assert "fg::epi::store_row<Out, kOut, kVec4Aligned>" in text
    plain = codegen.render_functor(codegen.EpilogueSpec.of(E.parse("silu(acc * n_vec(s))"), {"s": "f32"}))
    assert "static constexpr bool kPairs = false;" in plain and ">> 1" not in plain


def test_bind_checks_operands_against_the_output_width():
    """Binding sizes operands by the call's n: for a paired call that is the OUTPUT width N / 2 (checks.py)."""
    e = E.parse("silu(gate + n_vec(b)) * up + aux(r)")
    cpu = torch.device("cpu")
    bind(e, {"b": torch.zeros(8), "r": torch.zeros(3, 8)}, 3, 8, cpu)
    with pytest.raises(ValueError, match=r"\[N=8\]"):
        bind(e, {"b": torch.zeros(16), "r": torch.zeros(3, 8)}, 3, 8, cpu)
    assert ir.operands(e)["b"].kind == "n_vec"
