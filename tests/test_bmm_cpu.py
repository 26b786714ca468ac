"""bmm_tiny / bmm on the CPU: planning, validation, dispatch, and the backward formulas (gradcheck, float64)."""
import pytest
import torch

import fusedgemm as fg
from fusedgemm.tiny_gemm import _BmmTinyFn, _check, plan_bmm_tiny


@pytest.mark.parametrize("b,m,n,k", [(1024, 12, 12, 64), (1024, 12, 64, 12), (16384, 64, 64, 64), (7, 3, 7, 5),
                                     (5, 1, 1, 1), (3, 64, 1, 64), (2, 1, 64, 64)])
def test_plan_fits_the_kernel(b, m, n, k):
    for dt in ("float32", "bfloat16", "float16"):
        p = plan_bmm_tiny(b, m, n, k, dt)
        assert p["tx"] * p["r"] >= n and p["ty"] * p["r"] >= m
        assert p["elems"] * p["tx"] * p["ty"] <= p["threads"] <= 256 and p["threads"] % 64 == 0
        assert p["smem"] <= 48 * 1024 and p["grid"][0] * p["elems"] >= b
        assert p["name"].startswith("fg_bmm_tiny_")


def test_validation_messages():
    a = torch.randn(4, 12, 64)
    with pytest.raises(ValueError, match=r"a must be \[B, m, k\]"):
        _check(a[0], torch.randn(64, 12), None)
    with pytest.raises(ValueError, match=r"b must be \[4 or 1, 64, n\]"):
        _check(a, torch.randn(4, 32, 12), None)
    with pytest.raises(ValueError, match=r"b must be \[4 or 1, 64, n\]"):
        _check(a, torch.randn(2, 64, 12), None)
    with pytest.raises(TypeError, match="must share one dtype"):
        _check(a, torch.randn(4, 64, 12).double(), None)
    with pytest.raises(TypeError, match="must share one dtype"):
        _check(a.double(), torch.randn(4, 64, 12).double(), None)
    with pytest.raises(ValueError, match="m, n, k must be <= 64"):
        _check(torch.randn(4, 12, 65), torch.randn(65, 12), None)
    with pytest.raises(ValueError, match="must be on the same GPU"):
        _check(a, torch.randn(64, 12), None)
    with pytest.raises(TypeError, match="must be tensors"):
        _check(a, [[1.0]], None)


def test_bmm_on_cpu_is_torch_bmm(seed):
    a, b = torch.randn(8, 12, 64), torch.randn(8, 64, 12)
    assert torch.equal(fg.bmm(a, b), torch.bmm(a, b))
    b2 = torch.randn(64, 12)  # broadcast B
    assert torch.equal(fg.bmm(a, b2), torch.bmm(a, b2.expand(8, 64, 12)))


@pytest.mark.parametrize("b_shape", [(6, 5, 7), (5, 7), (1, 5, 7)])
def test_backward_formulas_gradcheck_float64(b_shape, seed):
    a = torch.randn(6, 3, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(*b_shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_BmmTinyFn.apply, (a, b))
    assert torch.autograd.gradcheck(fg.bmm, (a, b))


def test_fake_implementation_for_compile():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y = torch.ops.fusedgemm.bmm_tiny(torch.empty(9, 3, 5), torch.empty(5, 7))
        assert y.shape == (9, 3, 7)
