"""Any N and K for gemm_a8 and matmul_fused (issue 42, "any N / K"), on CPU tensors (the reference path, with the
same checks, padding decisions, output strides and warnings as on a GPU): preshuffle pads the weight once and
unshuffle returns the original bits; outputs have the true N (a view of rows padded to 16 when N is not a
multiple of the kernels' store runs); activations of an unaligned K are copied with a one-time warning;
float64 oracle, outputs poisoned; what stays invalid says so. The real AMD kernels on these shapes:
tests/test_unaligned_emulator.py; on an H200: tests/test_gpu_unaligned.py."""
from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch

import fusedgemm as fg
from fusedgemm import util

SHAPES = [(100, 200), (3420, 6840), (24, 40), (17, 33), (32, 48)]  # (N, K); the last aligned
SMALL = [(100, 200), (24, 40), (17, 33)]
DTYPES_8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8)


def ceil16(x):
    return -(-x // 16) * 16


def weight8(n, k, dtype, gen=None):
    if dtype == torch.int8:
        return torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=gen)
    return (torch.randn(n, k, generator=gen) * 2).to(dtype)


def act8(m, k, dtype):
    if dtype == torch.int8:
        return torch.randint(-127, 128, (m, k), dtype=torch.int8)
    return (torch.randn(m, k) * 2).to(dtype)


def oracle_a8(a, w, bias, sa, sb, act):
    """float64: act(a @ w.T * sa[:, None] * sb[None, :] + bias), independent of fusedgemm.reference."""
    y = a.double() @ w.double().T
    y = y * sa.double()[:, None] * sb.double()[None, :] + bias.double()
    if act == "silu":
        y = y * torch.sigmoid(y)
    elif act == "relu":
        y = y.clamp_min(0)
    return y


def rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def reset_warnings(*prefixes):
    for key in list(util._WARNED):
        if key.startswith(prefixes):
            util._WARNED.discard(key)


# ---- preshuffle / unshuffle ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES_8)
def test_preshuffle_pads_once_and_unshuffle_round_trips(n, k, dtype):
    w = torch.randint(0, 256, (n, k), dtype=torch.uint8).view(dtype)  # every bit pattern, NaN codes included
    wq = fg.preshuffle(w)
    assert tuple(wq.shape) == (n, k)
    assert tuple(wq.padded_shape) == tuple(wq.data.shape) == (ceil16(n), ceil16(k))
    back = fg.unshuffle(wq)
    assert back.dtype == dtype and tuple(back.shape) == (n, k) and back.is_contiguous()
    assert torch.equal(back.view(torch.uint8), w.view(torch.uint8))
    # the padding is zero bytes: the whole stored matrix unshuffled is w bordered by zeros
    full = fg.unshuffle(fg.PreshuffledWeight(wq.data)).view(torch.uint8)
    assert tuple(full.shape) == (ceil16(n), ceil16(k))
    assert torch.equal(full[:n, :k], w.view(torch.uint8))
    assert not full[n:].any() and not full[:, k:].any()
    # moves and copies keep the true shape
    for other in (wq.to("cpu"), wq.cpu(), copy.deepcopy(wq), copy.copy(wq)):
        assert tuple(other.shape) == (n, k) and torch.equal(fg.unshuffle(other).view(torch.uint8), w.view(torch.uint8))
    if (n, k) != (ceil16(n), ceil16(k)):
        assert f"N={n}, K={k}, stored as [{ceil16(n)}, {ceil16(k)}]" in repr(wq)


def test_preshuffle_aligned_weight_is_unchanged():
    """N, K multiples of 16: no padding, the layout as before (data [N, K])."""
    w = torch.randint(-127, 128, (32, 48), dtype=torch.int8)
    wq = fg.preshuffle(w)
    assert tuple(wq.data.shape) == (32, 48) and tuple(wq.shape) == (32, 48)
    ref = w.view(torch.uint8).reshape(2, 16, 3, 16).permute(0, 2, 1, 3).reshape(32, 48)
    assert torch.equal(wq.data.view(torch.uint8), ref)


def test_preshuffled_weight_true_shape_must_fit_its_storage():
    data = torch.zeros(32, 48, dtype=torch.int8)
    assert tuple(fg.PreshuffledWeight(data, n=17, k=33).shape) == (17, 33)
    for n, k in ((33, 48), (16, 48), (32, 0), (32, 49)):
        with pytest.raises(ValueError, match="does not fit the stored"):
            fg.PreshuffledWeight(data, n=n, k=k)
    wq = fg.PreshuffledWeight(data, n=17, k=33)
    wq.data = torch.zeros(32, 48, dtype=torch.int8)  # same stored shape: same true shape
    assert tuple(wq.shape) == (17, 33)
    wq.data = torch.zeros(16, 16, dtype=torch.int8)  # another one: unpadded
    assert tuple(wq.shape) == (16, 16)


# ---- gemm_a8 -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("dtype", (torch.float8_e4m3fn, torch.int8))
def test_gemm_a8_any_n_k(n, k, dtype, seed):
    m = 2 if n > 1000 else 7
    a, w = act8(m, k, dtype), weight8(n, k, dtype)
    wq = fg.preshuffle(w)
    scale = 1.0 / (math.sqrt(k) * (127.0 * 127.0 / 3 if dtype == torch.int8 else 4.0))
    bias, sa, sb = torch.randn(n), torch.rand(m) + 0.5, (torch.rand(n) + 0.5) * scale
    ref = oracle_a8(a, w, bias, sa, sb, "silu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)  # poisoned
        y2 = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (m, n)
    # the output's rows: N long when the kernels store N exactly, else a view of rows padded to 16
    assert y.stride() == ((n if n % 16 == 0 else ceil16(n)), 1)
    assert y2 is out and not out.isnan().any()
    assert rel(y, ref) < 2 ** -7 and rel(out, ref) < 2 ** -7
    assert torch.equal(y, out)


@pytest.mark.parametrize("n,k", SMALL)
def test_gemm_a8_expression_any_n(n, k):
    """An expression with [N] and [M, N] operands and a saved output: the true N everywhere."""
    m, dtype = 5, torch.float8_e4m3fn
    a, w = act8(m, k, dtype), weight8(n, k, dtype)
    wq = fg.preshuffle(w)
    s, r = torch.rand(n) / (4 * math.sqrt(k)), torch.randn(m, n).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, pre = fg.gemm_a8(a, wq, epilogue="relu(save(acc * n_vec(s), bf16)) + aux(r)", operands={"s": s, "r": r})
    acc = (a.double() @ w.double().T) * s.double()
    assert tuple(y.shape) == tuple(pre.shape) == (m, n)
    assert rel(pre, acc) < 2 ** -7 and rel(y, acc.clamp_min(0) + r.double()) < 2 ** -7


def test_gemm_a8_operands_keep_the_true_n():
    """bias / scale_b / aux are [N] / [M, N] of the true N; the padded length is an error."""
    n, k, m = 17, 33, 3
    a, wq = act8(m, k, torch.int8), fg.preshuffle(weight8(n, k, torch.int8))
    with pytest.raises(ValueError, match=r"bias must have shape \[N=17\]"):
        fg.gemm_a8(a, wq, torch.zeros(32), epilogue="bias")
    with pytest.raises(ValueError, match=r"scale_b must hold 1 or 17 values"):
        fg.gemm_a8(a, wq, scale_b=torch.ones(32))
    with pytest.raises(ValueError, match=r"must be \[M=3, N=17\]"):
        fg.gemm_a8(a, wq, epilogue="acc + aux(r)", operands={"r": torch.zeros(m, 32)})
    with pytest.raises(ValueError, match=r"out must be \[3, 17\]"):
        fg.gemm_a8(a, wq, out=torch.zeros(m, 32, dtype=torch.bfloat16))


def test_gemm_a8_what_stays_invalid():
    a = act8(4, 33, torch.int8)
    wq = fg.preshuffle(weight8(17, 33, torch.int8))
    with pytest.raises(ValueError, match=r"A is \[M=4, K=48\] but B is \[N=17, K=33\]; K must agree"):
        fg.gemm_a8(act8(4, 48, torch.int8), wq)  # the padded K is not the weight's K
    with pytest.raises(ValueError, match="N >= 1 and K >= 1, got N=0, K=33"):
        fg.preshuffle(torch.zeros(0, 33, dtype=torch.int8))
    with pytest.raises(ValueError, match="N >= 1 and K >= 1, got N=17, K=0"):
        fg.preshuffle(torch.zeros(17, 0, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"B's stored data \[17, 33\] is not a \(16,16\) preshuffled weight"):
        fg.gemm_a8(a, fg.PreshuffledWeight(torch.zeros(17, 33, dtype=torch.int8)))  # wrapped by hand
    with pytest.raises(ValueError, match="paired epilogue .* even number of weight rows"):
        fg.gemm_a8(a, wq, epilogue="silu(gate) * up")
    assert fg.gemm_a8(a, wq).shape == (4, 17)


def test_gemm_a8_unaligned_k_copy_warns_once_per_process():
    reset_warnings("gemm_a8-")
    a, wq = act8(3, 33, torch.int8), fg.preshuffle(weight8(24, 33, torch.int8))
    with pytest.warns(UserWarning, match=r"gemm_a8: K=33 .* zero-padded \[\.\., K=48\] buffer") as rec:
        fg.gemm_a8(a, wq)
        fg.gemm_a8(a, wq)
        fg.gemm_a8(act8(5, 33, torch.int8), wq)
    assert sum("K=33" in str(w.message) for w in rec) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # aligned K, unaligned N, out=None: no copy, no warning
        fg.gemm_a8(act8(3, 48, torch.int8), fg.preshuffle(weight8(17, 48, torch.int8)))
    with pytest.warns(UserWarning, match=r"gemm_a8: out= of N=17 .* copied into out") as rec:
        for _ in range(2):
            fg.gemm_a8(act8(3, 48, torch.int8), fg.preshuffle(weight8(17, 48, torch.int8)),
                       out=torch.empty(3, 17, dtype=torch.bfloat16))
    assert len([w for w in rec if "out=" in str(w.message)]) == 1


def test_gemm_a8_unaligned_k_takes_any_strides():
    """A of K % 16 != 0 is copied anyway: a non-contiguous A (e.g. a previous output's padded view) is taken."""
    base = act8(4, 48, torch.int8)
    a = base[:, :33]
    w = weight8(20, 33, torch.int8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fg.gemm_a8(a, fg.preshuffle(w), out_dtype=torch.float32)
    assert torch.equal(y.double(), a.double() @ w.double().T)


def test_gemm_a8_torch_compile_traces_unaligned():
    n, k, m = 17, 33, 5
    a, w = act8(m, k, torch.float8_e4m3fn), weight8(n, k, torch.float8_e4m3fn)
    wq = fg.preshuffle(w)
    bias, sb = torch.randn(n), torch.rand(n) / 16

    def f(a, bias, sb):
        return fg.gemm_a8(a, wq, bias, scale_a=2.0, scale_b=sb, epilogue="bias_relu")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = torch.compile(f, backend="aot_eager", fullgraph=True)(a, bias, sb)
        y0 = f(a, bias, sb)
        # the registered op itself, with the true N, K
        y1 = torch.ops.fusedgemm.gemm_a8(a, wq.data, bias, None, sb, 2.0, "bias_relu", torch.bfloat16, n, k)
    assert tuple(y.shape) == (m, n) and y.stride() == y0.stride() == y1.stride() == (32, 1)
    assert torch.equal(y, y0) and torch.equal(y1, y0)


# ---- matmul_fused -------------------------------------------------------------------------------------------------
def oracle_mm(x, w, bias=None, c=None, act=None):
    y = x.double() @ w.double().T
    if c is not None:
        y = y + c.double()
    if bias is not None:
        y = y + bias.double()
    if act == "silu":
        y = y * torch.sigmoid(y)
    return y


@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("layout", ("nk", "kn"))
def test_matmul_fused_any_n_k(n, k, layout, seed):
    m = 2 if n > 1000 else 6
    x = torch.randn(m, k).to(torch.bfloat16)
    w = (torch.randn(n, k) / math.sqrt(k)).to(torch.bfloat16)
    bias, c = torch.randn(n).to(torch.bfloat16), torch.randn(m, n).to(torch.bfloat16)
    b = w if layout == "nk" else w.t().contiguous()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fg.matmul_fused(x, b, bias, layout=layout, c=c, activation="silu")
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        y2 = fg.matmul_fused(x, b, bias, layout=layout, out=out)
    assert tuple(y.shape) == (m, n) and y.stride() == ((n if n % 8 == 0 else ceil16(n)), 1)
    assert y2 is out and not out.isnan().any()
    assert rel(y, oracle_mm(x, w, bias, c, "silu")) < 2 ** -7
    assert rel(out, oracle_mm(x, w, bias)) < 2 ** -7


@pytest.mark.parametrize("dtype,k", [(torch.float16, 33), (torch.float32, 30), (torch.float32, 33)])
def test_matmul_fused_unaligned_k_other_dtypes(dtype, k):
    x, w = torch.randn(2, 3, k).to(dtype), (torch.randn(20, k) / math.sqrt(k)).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fg.matmul_fused(x, w, precision="tf32" if dtype == torch.float32 else None)
    assert tuple(y.shape) == (2, 3, 20)
    assert rel(y, oracle_mm(x.reshape(6, k), w).reshape(2, 3, 20)) < 2 ** -9


def test_matmul_fused_leading_dims_and_residual_chain():
    """[..., K] inputs with N % 8 != 0: the output keeps the leading dims; a previous output (a padded-stride view)
    as c is read in place, without the copy warning."""
    k, n = 40, 20
    x = torch.randn(2, 3, k).to(torch.bfloat16)
    w = (torch.randn(n, k) / math.sqrt(k)).to(torch.bfloat16)
    y = fg.matmul_fused(x, w)
    assert tuple(y.shape) == (2, 3, n) and y.stride() == (3 * 32, 32, 1)
    reset_warnings("matmul_fused-")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = fg.matmul_fused(x, w, c=y)
    assert rel(z, oracle_mm(x.reshape(6, k), w).reshape(2, 3, n) * 2) < 2 ** -7


def test_matmul_fused_warnings_once():
    reset_warnings("matmul_fused-")
    x, w = torch.randn(3, 33).to(torch.bfloat16), torch.randn(17, 33).to(torch.bfloat16)
    with pytest.warns(UserWarning) as rec:
        for _ in range(3):
            fg.matmul_fused(x, w, c=torch.randn(3, 17).to(torch.bfloat16))
            fg.matmul_fused(x, w, out=torch.empty(3, 17, dtype=torch.bfloat16))
    texts = [str(r.message) for r in rec]
    assert sum("K=33" in t and "zero-padded" in t for t in texts) == 1
    assert sum("operand (aux / c) is copied" in t for t in texts) == 1
    assert sum("out= of N=17" in t for t in texts) == 1


def test_matmul_fused_what_stays_invalid():
    x = torch.randn(3, 33).to(torch.bfloat16)
    with pytest.raises(ValueError, match="K must agree"):
        fg.matmul_fused(x, torch.randn(17, 40).to(torch.bfloat16))
    with pytest.raises(ValueError, match=r"bias must have shape \[N=17\]"):
        fg.matmul_fused(x, torch.randn(17, 33).to(torch.bfloat16), torch.zeros(32).to(torch.bfloat16))
    with pytest.raises(ValueError, match="K must be positive, got K=0"):
        fg.matmul_fused(torch.randn(3, 0).to(torch.bfloat16), torch.randn(17, 0).to(torch.bfloat16))


def test_matmul_fused_autograd_and_compile_unaligned():
    x = torch.randn(5, 33).to(torch.bfloat16)
    w = torch.randn(17, 33).to(torch.bfloat16)
    b = torch.randn(17).to(torch.bfloat16)

    def h(x, w, b):
        return fg.matmul_fused(x, w, b, activation="gelu")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = torch.compile(h, backend="aot_eager", fullgraph=True)(x, w, b)
        y0 = h(x, w, b)
        xg, wg = x.float().requires_grad_(), w.float().requires_grad_()
        fg.matmul_fused(xg, wg, activation="silu", precision="ieee").sum().backward()
    assert y.stride() == y0.stride() == (32, 1) and torch.equal(y, y0)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    torch.nn.functional.silu(xr @ wr.T).sum().backward()
    assert torch.allclose(xg.grad.double(), xr.grad, atol=1e-4) and torch.allclose(wg.grad.double(), wr.grad,
                                                                                    atol=1e-4)


def test_gemm_a8_paired_unaligned_n():
    """A paired expression over an interleaved weight of 2I = 34 rows (I = 17): out [M, 17], rows padded to 24."""
    m, n, k = 3, 34, 40
    a, w = act8(m, k, torch.int8), weight8(n, k, torch.int8)
    s = torch.rand(n // 2) / 4096
    y = fg.gemm_a8(a, fg.preshuffle(w), epilogue="relu(gate * n_vec(s)) * up", operands={"s": s},
                   out_dtype=torch.float32)
    acc = a.double() @ w.double().T
    ref = (acc[:, 0::2] * s.double()).clamp_min(0) * acc[:, 1::2]
    assert tuple(y.shape) == (m, 17) and y.stride() == (24, 1)
    assert rel(y, ref) < 1e-6
