"""Any N and K through the real gfx942 code objects (fusedgemm.testing.emulate: the public ops on CPU tensors
reach the AMD kernels): gemm_a8 (fp8 / int8, presets and an expression) and matmul_fused (bf16) on tiny
unaligned shapes against the float64 oracle, every output buffer poisoned (NaN) first. The CPU reference path of
the same calls: tests/test_unaligned_cpu.py."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
from fusedgemm import unaligned, util  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

FP8 = torch.float8_e4m3fnuz  # gfx942's


@pytest.fixture(autouse=True, scope="module")
def no_dead_proxies():
    """The emulator finds CPU storages through gc.get_objects(), where a dead weakref.proxy (torch.compile's
    caches, after an earlier test traced something) raises ReferenceError on isinstance: drop those caches first."""
    import gc

    torch._dynamo.reset()
    gc.collect()
    yield


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every buffer the ops allocate for an output starts as NaN (a value the kernel does not write stays NaN)."""
    real = unaligned.padded_empty

    def poisoned(lead, n, width, dtype, device):
        t = real(lead, n, width, dtype, device)
        (t._base if t._base is not None else t).fill_(float("nan"))
        return t

    monkeypatch.setattr(unaligned, "padded_empty", poisoned)


def rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def operands(kind, m, n, k):
    if kind == "int8":
        a = torch.randint(-127, 128, (m, k), dtype=torch.int8)
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8)
        return a, w, 3.0 / (127.0 * 127.0 * math.sqrt(k))
    return (torch.randn(m, k) * 2).to(FP8), (torch.randn(n, k) * 2).to(FP8), 1.0 / (4 * math.sqrt(k))


@pytest.mark.parametrize("m,n,k,kind", [(5, 17, 33, "fp8"), (3, 24, 40, "int8"), (4, 100, 200, "fp8"),
                                        (2, 17, 48, "int8")])
def test_gemm_a8_unaligned_on_gfx942(m, n, k, kind):
    a, w, scale = operands(kind, m, n, k)
    wq = fg.preshuffle(w)
    bias, sa, sb = torch.randn(n), torch.rand(m) + 0.5, (torch.rand(n) + 0.5) * scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with emulate("gfx942") as dev:
            y = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    assert len(dev.launches) == 1 and dev.launches[0][0].startswith("fg_gemm_a8_")
    ref = (a.double() @ w.double().T) * sa.double()[:, None] * sb.double() + bias.double()
    ref = ref * torch.sigmoid(ref)
    assert tuple(y.shape) == (m, n) and not y.isnan().any()
    assert rel(y, ref) < 8e-3


def test_gemm_a8_expression_unaligned_on_gfx942():
    m, n, k = 3, 17, 40
    a, w, scale = operands("fp8", m, n, k)
    s, r = torch.rand(n) * scale, torch.randn(m, n).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with emulate("gfx942"):
            y = fg.gemm_a8(a, fg.preshuffle(w), epilogue="relu(acc * n_vec(s)) + aux(r)",
                           operands={"s": s, "r": r})
    ref = ((a.double() @ w.double().T) * s.double()).clamp_min(0) + r.double()
    assert not y.isnan().any() and rel(y, ref) < 8e-3


def test_gemm_a8_unaligned_k_warns_once_on_gfx942():
    util._WARNED.discard("gemm_a8-pad-k")
    a, w, _ = operands("int8", 3, 20, 33)
    wq = fg.preshuffle(w)
    with pytest.warns(UserWarning, match="gemm_a8: K=33") as rec:
        with emulate("gfx942"):
            y1 = fg.gemm_a8(a, wq, out_dtype=torch.float32)
            y2 = fg.gemm_a8(a, wq, out_dtype=torch.float32)
    assert sum("K=33" in str(x.message) for x in rec) == 1
    exact = a.double() @ w.double().T
    assert torch.equal(y1.double(), exact) and torch.equal(y2.double(), exact)


@pytest.mark.parametrize("m,n,k", [(5, 17, 33), (3, 100, 200), (4, 20, 40)])
def test_matmul_fused_unaligned_on_gfx942(m, n, k):
    x = torch.randn(m, k).to(torch.bfloat16)
    w = (torch.randn(n, k) / math.sqrt(k)).to(torch.bfloat16)
    b, c = torch.randn(n).to(torch.bfloat16), torch.randn(m, n).to(torch.bfloat16)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with emulate("gfx942") as dev:
            y = fg.matmul_fused(x, w, b, c=c, activation="silu")
            y2 = fg.matmul_fused(x, w, b, out=out)
    assert len(dev.launches) == 2
    ref = x.double() @ w.double().T + b.double()
    assert y2 is out and not out.isnan().any() and rel(out, ref) < 8e-3
    ref = ref + c.double()
    assert tuple(y.shape) == (m, n) and not y.isnan().any() and rel(y, ref * torch.sigmoid(ref)) < 8e-3


def test_matmul_fused_unaligned_fast_path_on_gfx942():
    """A repeat call of an N % 8 != 0 signature takes the kept plan (padded bias, padded-row output)."""
    from fusedgemm import matmul

    x = torch.randn(3, 40).to(torch.bfloat16)
    w = (torch.randn(20, 40) / 8).to(torch.bfloat16)
    b = torch.randn(20).to(torch.bfloat16)
    ref = x.double() @ w.double().T + b.double()
    with emulate("gfx942") as dev:
        ys = [fg.matmul_fused(x, w, b) for _ in range(3)]
        kept = [v for k, v in matmul._PLANS.items() if k[1] == x.shape and k[5] == w.shape]
    assert len(dev.launches) == 3
    assert [type(v).__name__ for v in kept] == ["_UnalignedPlan"]
    for y in ys:
        assert y.stride() == (32, 1) and not y.isnan().any() and rel(y, ref) < 8e-3
