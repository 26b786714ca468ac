"""The public API on CPU tensors: one CPU policy for every op (the same checks, output dtype and shape as the kernel
path, computed by a torch reference -- no kernel runs), and the argument forms the ops share: beta with c,
activation / epilogue None, case-insensitive names with suggestions, preset names / expressions / expression text
on both GEMM ops, errors that name the argument that was wrong. Outputs are NaN-poisoned where out= applies."""
import pytest
import torch
import torch.nn.functional as F

import fusedgemm as fg
import fusedgemm.epilogue as E
from fusedgemm.reference import activation_f64, gemm_a8_reference, quantize_rows_reference

BF, FP8 = torch.bfloat16, torch.float8_e4m3fn


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def t(*shape, dtype=BF):
    return torch.randn(*shape).to(dtype)


def poisoned(shape, dtype):
    return torch.full(shape, float("nan")).to(dtype)


def assert_rounded_once(y: torch.Tensor, exact: torch.Tensor) -> None:
    """y is the float64 value `exact` rounded once to y's dtype: within half an ulp, so within eps * |exact|."""
    assert not y.isnan().any()
    eps = torch.finfo(y.dtype).eps
    err = (y.double() - exact).abs()
    assert bool((err <= eps * exact.abs() + torch.finfo(y.dtype).tiny).all()), err.max().item()


# ---- matmul_fused -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("act", ["none", "relu", "silu", "gelu", "gelu_erf"])
def test_matmul_fused_on_cpu_is_the_float64_value_rounded_once(dtype, act):
    a, w, bias, c = t(2, 5, 64, dtype=dtype), t(32, 64, dtype=dtype), t(32, dtype=dtype), t(2, 5, 32, dtype=dtype)
    exact = activation_f64(1.5 * (a.double() @ w.double().T) + 0.5 * c.double() + bias.double(), act)
    out = poisoned((2, 5, 32), dtype)
    y = fg.matmul_fused(a, w, bias, alpha=1.5, beta=0.5, c=c, activation=act, out=out)
    assert y is out and y.shape == (2, 5, 32) and y.dtype == dtype
    assert_rounded_once(y, exact)
    y2 = fg.matmul_fused(a, w.T.contiguous(), bias, layout="kn", alpha=1.5, beta=0.5, c=c, activation=act,
                         out_dtype=torch.float32)
    assert y2.dtype == torch.float32
    assert_rounded_once(y2, exact)


def test_matmul_fused_on_cpu_expression_with_save_and_paired():
    a, w, r = t(6, 64), t(32, 64), t(6, 32)
    y, pre = fg.matmul_fused(a, w, epilogue="relu(save(acc + aux(r), fp32))", operands={"r": r})
    exact = a.double() @ w.double().T + r.double()
    assert pre.dtype == torch.float32 and y.dtype == BF
    assert_rounded_once(pre, exact)
    assert_rounded_once(y, exact.relu())
    h = fg.matmul_fused(a, w, epilogue=E.silu(E.gate) * E.up)  # paired: columns (2j, 2j + 1) -> j
    acc = a.double() @ w.double().T
    assert h.shape == (6, 16)
    assert_rounded_once(h, F.silu(acc[:, 0::2]) * acc[:, 1::2])


def test_matmul_fused_on_cpu_is_differentiable():
    a = t(4, 64, dtype=torch.float32).requires_grad_()
    w = t(32, 64, dtype=torch.float32).requires_grad_()
    b = t(32, dtype=torch.float32).requires_grad_()
    y = fg.matmul_fused(a, w, b, activation="silu")
    got = torch.autograd.grad(y.square().sum(), (a, w, b))
    want = torch.autograd.grad(F.silu(F.linear(a.double(), w.double(), b.double())).square().sum(), (a, w, b))
    for g, wg in zip(got, want):
        torch.testing.assert_close(g.double(), wg.double(), rtol=1e-4, atol=1e-4)


def test_c_means_beta_one_as_torch_addmm():
    """c given without beta: beta = 1 (torch.addmm's default); beta=0 ignores c (NaN in c does not propagate); a
    beta other than 0 without c is an error."""
    a, w, r = t(4, 64), t(32, 64), t(4, 32)
    assert_rounded_once(fg.matmul_fused(a, w, c=r), torch.addmm(r.double(), a.double(), w.double().T))
    nan_c = poisoned((4, 32), BF)
    assert_rounded_once(fg.matmul_fused(a, w, c=nan_c, beta=0.0), a.double() @ w.double().T)
    assert_rounded_once(fg.matmul_fused(a, w), a.double() @ w.double().T)
    with pytest.raises(ValueError, match=r"^matmul_fused: beta is given but c is None"):
        fg.matmul_fused(a, w, beta=2.0)


# ---- gemm_a8 ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("in_dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gemm_a8_on_cpu_is_the_float64_value_rounded_once(in_dtype, out_dtype):
    m, n, k = 24, 48, 64
    a = (torch.randn(m, k) * 4).to(in_dtype)
    w = (torch.randn(n, k) * 4).to(in_dtype)
    bias, sa, sb = torch.randn(n), torch.rand(m) + 0.5, torch.rand(n) * 0.01
    out = poisoned((m, n), out_dtype)
    y = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_gelu", out=out)
    exact = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_gelu", unrounded=True)
    assert y is out and y.dtype == out_dtype
    assert_rounded_once(y, exact)
    # expression text, a save() output, a Python-number scale folded in: the same reference path
    y2, pre = fg.gemm_a8(a, fg.preshuffle(w), epilogue="gelu(save(acc * m_vec(sa) * n_vec(sb) + n_vec(b), fp32))",
                         operands={"sa": sa, "sb": sb, "b": bias}, out_dtype=out_dtype)
    assert pre.dtype == torch.float32 and y2.shape == (m, n)
    assert_rounded_once(y2, exact)


def test_gemm_a8_fp8_output_on_cpu_saturates():
    a, w = (torch.randn(8, 32) * 8).to(FP8), (torch.randn(16, 32) * 8).to(FP8)
    y = fg.gemm_a8(a, fg.preshuffle(w), out_dtype=FP8, scale_a=100.0)
    exact = gemm_a8_reference(a, w, scale_a=100.0, unrounded=True)
    assert y.dtype == FP8 and not y.float().isnan().any()
    assert torch.equal(y.float(), E.round_to(exact, FP8).float())
    assert y.float().abs().max() == 448.0  # out of range: the largest finite value, as the kernel stores it


# ---- the epilogue forms, shared by both GEMM ops ------------------------------------------------------------------
def _both(op, epilogue=None, activation=None, bias=None, operands=None):
    if op == "matmul_fused":
        a, w = t(8, 64), t(32, 64)
        return fg.matmul_fused(a, w, bias, epilogue=epilogue, activation=activation, operands=operands)
    a, w = t(8, 64).to(FP8), t(32, 64).to(FP8)
    return fg.gemm_a8(a, fg.preshuffle(w), bias, epilogue=epilogue, activation=activation, operands=operands)


@pytest.mark.parametrize("op", ["matmul_fused", "gemm_a8"])
def test_both_ops_take_the_same_epilogue_forms(op):
    bias = torch.randn(32)
    forms = [dict(epilogue="bias_silu", bias=bias), dict(epilogue="Bias_SiLU", bias=bias),
             dict(activation="silu", bias=bias), dict(activation="SiLU", bias=bias),
             dict(epilogue=E.parse("silu(acc + n_vec(b))"), operands={"b": bias}),
             dict(epilogue="silu(acc + n_vec(b))", operands={"b": bias})]
    results = []
    for kw in forms:
        torch.manual_seed(1)
        results.append(_both(op, **kw))
    assert all(torch.equal(results[0], r) for r in results[1:])
    torch.manual_seed(1)
    with_bias = _both(op, bias=bias)  # no epilogue, no activation: identity plus the bias given
    torch.manual_seed(1)
    assert torch.equal(with_bias, _both(op, epilogue="bias", bias=bias))
    with pytest.raises(ValueError, match=rf"^{op}: a bias was given but epilogue 'none' does not use one"):
        _both(op, epilogue="none", bias=bias)
    torch.manual_seed(1)
    plain = _both(op)
    for kw in (dict(epilogue=None), dict(activation=None), dict(epilogue="none"), dict(activation="none"),
               dict(epilogue="acc")):
        torch.manual_seed(1)
        assert torch.equal(_both(op, **kw), plain), kw


@pytest.mark.parametrize("op", ["matmul_fused", "gemm_a8"])
def test_unknown_names_suggest_and_bad_text_names_both_readings(op):
    with pytest.raises(ValueError, match=rf"^{op}: unknown activation 'sliu'; did you mean 'silu'"):
        _both(op, activation="sliu")
    with pytest.raises(ValueError, match=rf"^{op}: unknown epilogue 'bias_slu': not a preset name \(none, bias, "
                                         r".*\); did you mean 'bias_silu'.*\? Text that is not a preset name is parsed "
                                         r"as an epilogue expression \(fusedgemm.epilogue.parse\), which failed: "):
        _both(op, epilogue="bias_slu")
    with pytest.raises(ValueError, match=rf"^{op}: unknown epilogue 'silu\(acc \+ n_vec\(b\)'.*cannot parse"):
        _both(op, epilogue="silu(acc + n_vec(b)", operands={"b": torch.randn(32)})
    with pytest.raises(ValueError, match=rf"^{op}: give "):
        _both(op, epilogue="silu", activation="relu")
    with pytest.raises(ValueError, match=rf"^{op}: epilogue 'bias_relu' adds a bias, but bias is None"):
        _both(op, epilogue="bias_relu")


def test_layers_take_names_case_insensitively():
    lin = fg.nn.FusedLinear(64, 32, activation="GELU")
    assert lin.activation == "gelu" and fg.nn.FusedLinear(64, 32, activation=None).activation == "none"
    assert fg.nn.Linear8(64, 32, activation="ReLU").activation == "relu"
    assert fg.nn.GatedMLP(64, 96, activation="GELU").activation == "gelu"
    with pytest.raises(ValueError, match=r"^FusedLinear: unknown activation 'selu'; did you mean"):
        fg.nn.FusedLinear(64, 32, activation="selu")
    x, w = t(4, 64), t(256, 64)
    assert torch.equal(fg.swiglu(x, w, activation="SiLU"), fg.swiglu(x, w, activation="silu"))


# ---- errors that name the argument that was wrong ------------------------------------------------------------------
@pytest.mark.parametrize("op", ["matmul_fused", "gemm_a8"])
def test_an_out_of_a_wrong_dtype_is_named_as_out(op):
    with pytest.raises(TypeError, match=rf"^{op}: out must be one of torch.bfloat16, torch.float16, torch.float32"
                                        r".*, got an out of torch.int32$"):
        if op == "matmul_fused":
            fg.matmul_fused(t(8, 64), t(32, 64), out=torch.empty(8, 32, dtype=torch.int32))
        else:
            fg.gemm_a8(t(8, 64).to(FP8), fg.preshuffle(t(32, 64).to(FP8)), out=torch.empty(8, 32, dtype=torch.int32))


def test_quantize_rows_names_itself_and_takes_names_case_insensitively():
    x = torch.randn(4, 64)
    for name, dtype in (("FP8", FP8), ("Int8", torch.int8)):
        q, s = fg.quantize_rows(x, name)
        wq, ws = quantize_rows_reference(x, dtype)
        assert q.dtype == dtype and torch.equal(q.view(torch.uint8), wq.view(torch.uint8)) and torch.equal(s, ws)
    with pytest.raises(ValueError, match=r"^quantize_rows: dtype must be 'fp8', 'int8'.*got 'fp9'; did you mean "
                                         r"'fp8'"):
        fg.quantize_rows(x, "fp9")
    with pytest.raises(ValueError, match=r"^quantize_weight: dtype must be"):
        fg.quantize_weight(torch.randn(16, 64), "int4")
    with pytest.raises(ValueError, match=r"^quantize: dtype must be"):
        fg.quantize(torch.nn.Linear(64, 32), "int4")


# ---- the other public ops on the CPU: the same rule -----------------------------------------------------------------
def test_the_other_ops_on_cpu_against_float64():
    x, w = t(6, 64), t(64, 64)
    g, u = (x.double() @ w.double().T).chunk(2, dim=-1)
    assert_rounded_once(fg.swiglu(x, w), F.silu(g) * u)
    a, b = t(4, 8, 16, dtype=torch.float32), t(16, 8, dtype=torch.float32)
    assert torch.equal(fg.bmm(a, b), torch.bmm(a, b.expand(4, 16, 8)))  # fg.bmm: torch.bmm where no kernel runs
    assert_rounded_once(fg.bmm_tiny(a, b), a.double() @ b.double())
    lin = fg.nn.FusedLinear(64, 32, activation="relu")
    xf = torch.randn(5, 64)
    with torch.no_grad():  # the layers on the CPU: nn.Linear's own fp32 arithmetic, then the epilogue
        torch.testing.assert_close(lin(xf).double(), F.linear(xf.double(), lin.weight.double(),
                                                              lin.bias.double()).relu(), rtol=1e-5, atol=1e-6)
        lin8 = fg.nn.Linear8.from_linear(torch.nn.Linear(64, 32), activation="silu")
        xq, sx = fg.quantize_rows(xf)
        exact = gemm_a8_reference(xq, fg.unshuffle(lin8.preshuffled_weight()), lin8.bias, scale_a=sx,
                                  scale_b=lin8.weight_scale, epilogue="bias_silu", unrounded=True)
        assert lin8(xf).dtype == torch.float32
        assert_rounded_once(lin8(xf), exact)
        model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.SiLU())
        assert torch.equal(fg.fuse(model)(xf), model(xf))
