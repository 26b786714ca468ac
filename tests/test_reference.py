import math

import pytest
import torch
import torch.nn.functional as F

import fusedgemm as fg
from fusedgemm.reference import activation_f64, gemm_a8_reference, rel_error


@pytest.mark.parametrize("act,torch_fn", [
    ("relu", torch.relu), ("silu", F.silu), ("gelu", lambda x: F.gelu(x, approximate="tanh")),
    ("gelu_erf", F.gelu), ("none", lambda x: x)])
def test_activations_match_torch(act, torch_fn, seed):
    x = torch.randn(4096, dtype=torch.float64) * 4
    torch.testing.assert_close(activation_f64(x, act), torch_fn(x), rtol=1e-12, atol=1e-12)


def test_relu_propagates_nan():
    assert math.isnan(activation_f64(torch.tensor([float("nan")], dtype=torch.float64), "relu").item())


def test_reference_formula_int8(seed):
    m, n, k = 7, 32, 64
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8)
    sa, sb = torch.rand(m) + 0.5, torch.rand(n) + 0.5
    bias = torch.randn(n)
    got = gemm_a8_reference(a, b, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", unrounded=True)
    acc = a.long() @ b.long().T  # exact integer products
    y = acc.double() * sa.double()[:, None] * sb.double()[None, :] + bias.double()
    torch.testing.assert_close(got, y * torch.sigmoid(y), rtol=1e-13, atol=0)


def test_reference_scalars_and_rounding(seed):
    a = torch.randn(5, 32).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32).to(torch.float8_e4m3fn)
    ref = gemm_a8_reference(a, b, scale_a=0.5, scale_b=torch.tensor([2.0]), epilogue="none", out_dtype=torch.float16)
    assert ref.dtype == torch.float16
    exact = a.double() @ b.double().T
    assert torch.equal(ref, exact.to(torch.float16))  # 0.5 * 2.0 = 1: rounded once from the exact product


def test_rel_error():
    r = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert rel_error(r, r) == 0.0
    assert abs(rel_error(r + torch.tensor([0.3, 0.4], dtype=torch.float64), r) - 0.1) < 1e-12
    assert math.isnan(rel_error(torch.tensor([float("nan"), 0.0]), r))


def test_epilogue_names():
    from fusedgemm.epilogue.presets import parse_name as parse_epilogue

    assert parse_epilogue("bias_gelu_erf") == (True, "gelu_erf")
    assert parse_epilogue("Bias_SiLU") == (True, "silu") and parse_epilogue(None) == (False, "none")
    assert parse_epilogue("bias") == (True, "none")
    assert parse_epilogue("silu") == (False, "silu")
    assert len(fg.EPILOGUES) == 10
    with pytest.raises(ValueError, match="unknown epilogue 'swish'"):
        parse_epilogue("swish")
    with pytest.raises(ValueError, match=r"unknown epilogue 'bias_slu'; did you mean 'bias_silu'"):
        parse_epilogue("bias_slu")
