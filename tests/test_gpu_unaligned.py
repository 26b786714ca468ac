"""Any N and K on a GPU (issue 42): vLLM's scaled-mm shapes (N = 3420, K = 6840 and N = 100, K = 200) and tiny ragged
ones through gemm_a8 (fp8 and int8, preshuffled weight padded once) and matmul_fused (bf16), against a float64
oracle, every output buffer poisoned (NaN) first; a CUDA graph of an unaligned call. Skipped without a GPU.
The same calls on the CPU reference: tests/test_unaligned_cpu.py; the AMD code objects: test_unaligned_emulator.py."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import fusedgemm as fg
from fusedgemm import unaligned

pytestmark = pytest.mark.gpu

SHAPES = [(3420, 6840), (100, 200), (17, 33), (24, 40), (20, 48)]  # (N, K)
MS = [1, 7, 64, 300]


def ceil16(x):
    return -(-x // 16) * 16


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every output buffer the ops allocate starts as NaN (a value the kernel does not write stays NaN)."""
    real = unaligned.padded_empty

    def poisoned(lead, n, width, dtype, device):
        t = real(lead, n, width, dtype, device)
        (t._base if t._base is not None else t).fill_(float("nan"))
        return t

    monkeypatch.setattr(unaligned, "padded_empty", poisoned)
    warnings.simplefilter("ignore")  # the one-time copy warnings (tests/test_unaligned_cpu.py checks them)
    yield


def arch():
    from fusedgemm.runtime.arch import device_arch

    return device_arch(torch.cuda.current_device())


def rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def a8_problem(kind, m, n, k):
    dev = "cuda"
    if kind == "int8":
        a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device=dev)
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device=dev)
        scale = 3.0 / (127.0 * 127.0 * math.sqrt(k))
    else:
        dtype = fg.FP8_DTYPE_FOR_ARCH[arch()]
        a = (torch.randn(m, k, device=dev) * 2).to(dtype)
        w = (torch.randn(n, k, device=dev) * 2).to(dtype)
        scale = 1.0 / (4.0 * math.sqrt(k))
    bias = torch.randn(n, device=dev)
    sa = torch.rand(m, device=dev) + 0.5
    sb = (torch.rand(n, device=dev) + 0.5) * scale
    return a, w, bias, sa, sb


def a8_oracle(a, w, bias, sa, sb):
    y = (a.double() @ w.double().T) * sa.double()[:, None] * sb.double()[None, :] + bias.double()
    return y * torch.sigmoid(y)


@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("m", MS)
def test_gemm_a8_any_n_k(kind, n, k, m):
    a, w, bias, sa, sb = a8_problem(kind, m, n, k)
    wq = fg.preshuffle(w)
    assert tuple(wq.shape) == (n, k) and tuple(wq.data.shape) == (ceil16(n), ceil16(k))
    assert torch.equal(fg.unshuffle(wq).view(torch.uint8), w.view(torch.uint8))
    ref = a8_oracle(a, w, bias, sa, sb)
    for _ in range(2):  # the second call: a repeat signature (no fast-path plan is left for padded weights)
        y = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
        assert tuple(y.shape) == (m, n) and y.stride() == ((n if n % 16 == 0 else ceil16(n)), 1)
        assert not y.isnan().any() and rel(y, ref) < 2 ** -7
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out) is out
    assert not out.isnan().any() and rel(out, ref) < 2 ** -7


@pytest.mark.parametrize("n,k", [(100, 200), (3420, 6840), (17, 33)])
def test_gemm_a8_expression_any_n(n, k):
    m = 33
    a, w, _bias, _sa, sb = a8_problem("fp8", m, n, k)
    r = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    y = fg.gemm_a8(a, fg.preshuffle(w), epilogue="relu(acc * n_vec(s)) + aux(r)", operands={"s": sb, "r": r})
    ref = ((a.double() @ w.double().T) * sb.double()).clamp_min(0) + r.double()
    assert tuple(y.shape) == (m, n) and not y.isnan().any() and rel(y, ref) < 2 ** -7


def test_gemm_a8_unaligned_in_a_cuda_graph():
    m, n, k = 16, 100, 200
    a, w, bias, sa, sb = a8_problem("fp8", m, n, k)
    wq = fg.preshuffle(w)
    fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")  # compile / warm up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    a2, _w, bias2, sa2, sb2 = a8_problem("fp8", m, n, k)
    a.copy_(a2), bias.copy_(bias2), sa.copy_(sa2), sb.copy_(sb2)  # new values, read on replay (bias padded then)
    g.replay()
    torch.cuda.synchronize()
    assert rel(y, a8_oracle(a, w, bias, sa, sb)) < 2 ** -7


def mm_oracle(x, w, bias=None, c=None, act=None):
    y = x.double() @ w.double().T
    if c is not None:
        y = y + c.double()
    if bias is not None:
        y = y + bias.double()
    return y * torch.sigmoid(y) if act == "silu" else y


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("m", MS)
def test_matmul_fused_bf16_any_n_k(layout, n, k, m):
    dev = "cuda"
    x = torch.randn(m, k, device=dev).to(torch.bfloat16)
    w = (torch.randn(n, k, device=dev) / math.sqrt(k)).to(torch.bfloat16)
    bias, c = torch.randn(n, device=dev).to(torch.bfloat16), torch.randn(m, n, device=dev).to(torch.bfloat16)
    b = w if layout == "nk" else w.t().contiguous()
    y = fg.matmul_fused(x, b, bias, layout=layout, c=c, activation="silu")
    assert tuple(y.shape) == (m, n) and y.stride() == ((n if n % 8 == 0 else ceil16(n)), 1)
    assert not y.isnan().any() and rel(y, mm_oracle(x, w, bias, c, "silu")) < 2 ** -7
    for _ in range(2):  # the second call: the fast path's plan (unaligned N: padded bias, padded-row output)
        y = fg.matmul_fused(x, b, bias, layout=layout)
        assert y.stride() == ((n if n % 8 == 0 else ceil16(n)), 1)
        assert not y.isnan().any() and rel(y, mm_oracle(x, w, bias)) < 2 ** -7
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev)
    assert fg.matmul_fused(x, b, bias, layout=layout, out=out) is out
    assert not out.isnan().any() and rel(out, mm_oracle(x, w, bias)) < 2 ** -7


@pytest.mark.parametrize("n,k", [(100, 200), (17, 33)])
def test_matmul_fused_fp32_and_fp16_any_n_k(n, k):
    dev = "cuda"
    for dtype, precision in ((torch.float16, None), (torch.float32, "tf32")):
        x = torch.randn(3, 5, k, device=dev).to(dtype)
        w = (torch.randn(n, k, device=dev) / math.sqrt(k)).to(dtype)
        y = fg.matmul_fused(x, w, precision=precision)
        assert tuple(y.shape) == (3, 5, n) and not y.isnan().any()
        assert rel(y, mm_oracle(x.reshape(15, k), w).reshape(3, 5, n)) < 2 ** -9
