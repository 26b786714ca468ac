"""The CPU model of each arch's MMA fragment mapping reproduces A . B^T from the preshuffled bytes.

This is what stands in for AMD hardware: see fusedgemm/fragment_model.py for the instruction models."""
import numpy as np
import pytest
import torch

import fusedgemm as fg
from fusedgemm.fragment_model import ATOMS, simulate_gemm_a8


def _decoder(dtype):
    if dtype == torch.int8:
        return lambda u8: u8.view(np.int8).astype(np.float64)
    table = torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float64).numpy()
    return lambda u8: table[u8]


def _finite_fp8(shape, dtype):
    x = (torch.randn(shape) * 2).to(dtype)
    return torch.where(torch.isfinite(x.float()), x.float(), torch.zeros(())).to(dtype)


@pytest.mark.parametrize("arch,kind", sorted(ATOMS))
@pytest.mark.parametrize("m,n,k,tiles", [(16, 16, 64, (1, 1)), (7, 48, 160, (1, 2)), (33, 32, 272, (2, 1)),
                                         (5, 16, 16, (1, 1))])
def test_model_reproduces_gemm(arch, kind, m, n, k, tiles, seed):
    dtype = torch.int8 if kind == "int8" else fg.FP8_DTYPE_FOR_ARCH[arch]
    if dtype == torch.int8:
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8)
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8)
    else:
        a, w = _finite_fp8((m, k), dtype), _finite_fp8((n, k), dtype)
    a_bytes = a.view(torch.uint8).reshape(-1).numpy()
    b_bytes = fg.preshuffle(w).data.view(torch.uint8).reshape(-1).numpy()
    got = simulate_gemm_a8(ATOMS[(arch, kind)], a_bytes, b_bytes, _decoder(dtype), m, n, k, *tiles)
    want = a.to(torch.float64).numpy() @ w.to(torch.float64).numpy().T
    assert not np.isnan(got).any(), "every output element written"
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


def test_model_detects_a_wrong_layout(seed):
    """The check can fail: reading B unshuffled (or with a wrong lane map) gives a wrong product."""
    a = torch.randint(-128, 128, (16, 64), dtype=torch.int8)
    w = torch.randint(-128, 128, (32, 64), dtype=torch.int8)
    want = a.double().numpy() @ w.double().numpy().T
    unshuffled = w.view(torch.uint8).reshape(-1).numpy()
    for key in [("sm_90a", "int8"), ("gfx942", "int8"), ("gfx950", "int8")]:
        got = simulate_gemm_a8(ATOMS[key], a.view(torch.uint8).reshape(-1).numpy(), unshuffled,
                               _decoder(torch.int8), 16, 32, 64)
        assert not np.allclose(got, want)
