"""fusedgemm.swiglu on the CPU: interleave round trips, the interleaved-copy cache (in-place updates are seen),
the torch path against float64, the kernel path's plumbing (expression, operands, output width) with the
kernel replaced by the float64 evaluator, the argument checks of both ops for paired epilogues, and the fake
(torch.compile) output shapes."""
import importlib
import math

import pytest
import torch

import fusedgemm as fg
import fusedgemm.epilogue as E
from fusedgemm.checks import check_gemm_a8_args, check_matmul_fused_args, paired_width

# The modules (fusedgemm.swiglu / .gemm_a8 / .matmul as attributes are the functions of those names).
S = importlib.import_module("fusedgemm.swiglu")
MATMUL = importlib.import_module("fusedgemm.matmul")
GEMM_A8 = importlib.import_module("fusedgemm.gemm_a8")

ACTS = {"silu": lambda t: t * torch.sigmoid(t),
        "gelu": lambda t: 0.5 * t * (1 + torch.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t ** 3))),
        "gelu_erf": lambda t: 0.5 * t * (1 + torch.erf(t / math.sqrt(2))),
        "relu": torch.relu}


def _glu64(x, w, bias, act, sa=None, sb=None):
    """The float64 formula straight from the merged weight: act(x Wg^T + bg) * (x Wu^T + bu)."""
    h = x.double().reshape(-1, x.shape[-1]) @ w.double().T
    if sa is not None:
        h = h * sa.double().reshape(-1, 1)
    if sb is not None:
        h = h * sb.double().reshape(-1)
    if bias is not None:
        h = h + bias.double()
    g, u = h.chunk(2, dim=-1)
    return (ACTS[act](g) * u).reshape(*x.shape[:-1], -1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.int8])
def test_interleave_round_trip(dtype, seed):
    w = (torch.randn(64, 32) * 4).to(dtype) if dtype != torch.int8 else torch.randint(-128, 128, (64, 32),
                                                                                       dtype=torch.int8)
    wi = fg.interleave_gate_up(w, preshuffle=dtype in (torch.float8_e4m3fn, torch.int8))
    assert isinstance(wi, fg.InterleavedGateUp)
    back = fg.deinterleave_gate_up(wi)
    assert torch.equal(back.view(torch.uint8) if back.element_size() == 1 else back,
                       w.view(torch.uint8) if w.element_size() == 1 else w)
    if not isinstance(wi.weight, fg.PreshuffledWeight):
        assert torch.equal(wi.weight[0::2], w[:32]) and torch.equal(wi.weight[1::2], w[32:])


def test_tags_refuse_what_they_cannot_be():
    with pytest.raises(ValueError, match=r"\[2I, K\]"):
        fg.InterleavedGateUp(torch.zeros(3, 16))
    with pytest.raises(TypeError, match="InterleavedGateUp"):
        fg.deinterleave_gate_up(torch.zeros(4, 16))  # a bare tensor is never taken as interleaved
    with pytest.raises(ValueError, match="2I even"):
        fg.interleave_gate_up(torch.zeros(5, 16))


def test_cache_follows_in_place_updates():
    w = torch.randn(32, 16, dtype=torch.bfloat16)
    first = S._cached_interleaved(w)
    assert S._cached_interleaved(w) is first  # a hit: no new copy
    new = torch.randn(32, 16, dtype=torch.bfloat16)
    w.copy_(new)  # what load_state_dict does: same address, _version bumped
    second = S._cached_interleaved(w)
    assert second is not first and torch.equal(second[0::2], new[:16]) and torch.equal(second[1::2], new[16:])
    p = torch.nn.Parameter(torch.randn(32, 16, dtype=torch.bfloat16))
    a = S._cached_interleaved(p)
    with torch.no_grad():
        p.data = torch.randn(32, 16, dtype=torch.bfloat16)  # a new storage: another address
    assert not torch.equal(S._cached_interleaved(p), a)
    assert torch.equal(S._cached_interleaved(p)[1::2], p.data[16:])


@pytest.mark.parametrize("act", S.ACTIVATIONS)
def test_cpu_path_matches_float64(act, seed):
    x = torch.randn(2, 7, 64, dtype=torch.bfloat16)
    w = (torch.randn(96, 64) / 8).to(torch.bfloat16)
    b = torch.randn(96, dtype=torch.bfloat16)
    y = fg.swiglu(x, w, b, activation=act)
    ref = _glu64(x, w, b, act)
    assert y.shape == (2, 7, 48) and y.dtype == torch.bfloat16
    # fp32 arithmetic rounded once to bf16: within one bf16 ulp (2^-8 relative) plus fp32's own error
    torch.testing.assert_close(y.double(), ref, rtol=2 ** -8, atol=1e-5)
    exact = fg.swiglu(x, w, b, activation=act, exact=True)
    g, u = torch.nn.functional.linear(x, w, b).chunk(2, dim=-1)
    assert torch.equal(exact, S._TORCH_ACT[act](g) * u)  # on the CPU the torch path IS eager


def _fake_matmul_fused(x, w, epilogue=None, operands=None, out_dtype=None):
    """matmul_fused stand-in: acc = x @ w^T in float64, then the epilogue's float64 evaluator."""
    acc = x.double().reshape(-1, x.shape[-1]) @ w.double().T
    y = E.evaluate(epilogue, acc, operands, out_dtype=out_dtype or x.dtype)
    return y.to(out_dtype or x.dtype).reshape(*x.shape[:-1], -1)


@pytest.mark.parametrize("act", S.ACTIVATIONS)
@pytest.mark.parametrize("exact", [False, True])
def test_kernel_path_plumbing(monkeypatch, act, exact, seed):
    """The 16-bit kernel path (interleaved weight, paired expression, bias halves by output column), with the
    kernel replaced by the evaluator: equal to the direct formula, and exact=True to eager's rounding points."""
    monkeypatch.setattr(MATMUL, "matmul_fused", _fake_matmul_fused)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    w = (torch.randn(96, 64) / 8).to(torch.bfloat16)
    b = torch.randn(96, dtype=torch.bfloat16)
    y = S._swiglu_16(x, w, b, act, exact, None)
    assert y.shape == (5, 48)
    if not exact:
        torch.testing.assert_close(y.double(), _glu64(x, w, b, act), rtol=2 ** -8, atol=1e-6)
    else:  # float64 sums rounded to bf16 at eager's points: equal to eager except where a sum sits on a tie
        g, u = torch.nn.functional.linear(x, w, b).chunk(2, dim=-1)
        eager = S._TORCH_ACT[act](g) * u
        same = (y == eager).float().mean().item()
        assert same > 0.97, same
        torch.testing.assert_close(y.double(), eager.double(), rtol=2 ** -6, atol=1e-3)
    wi = fg.interleave_gate_up(w)  # the tagged interleaved copy gives the same
    assert torch.equal(S._swiglu_16(x, wi, b, act, exact, None), y)


def _fake_gemm_a8(x, w, epilogue=None, operands=None, out_dtype=None):
    acc = x.double() @ fg.unshuffle(w).double().T
    return E.evaluate(epilogue, acc, operands, out_dtype=out_dtype or torch.bfloat16).to(out_dtype or torch.bfloat16)


def test_8bit_plumbing(monkeypatch, seed):
    """fp8 x with interleave_gate_up(w8, preshuffle=True): scales and bias in the merged order."""
    monkeypatch.setattr(GEMM_A8, "gemm_a8", _fake_gemm_a8)
    x = (torch.randn(6, 64) * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(64, 64) * 2).to(torch.float8_e4m3fn)
    sa, sb, b = torch.rand(6) + 0.5, torch.rand(64) + 0.5, torch.randn(64)
    wi = fg.interleave_gate_up(w, preshuffle=True)
    y = S._swiglu_a8(x, wi, b, "silu", False, torch.float32, sa, sb)
    torch.testing.assert_close(y.double(), _glu64(x, w, b, "silu", sa, sb), rtol=1e-6, atol=1e-6)
    y2 = S._swiglu_a8(x, wi, None, "gelu", False, torch.float32, 0.5, torch.tensor([2.0]))
    # Python-number scale_a folds into alpha; a one-value scale_b tensor scales both halves
    want2 = _glu64(x, w, None, "gelu", torch.full((6,), 0.5), torch.full((64,), 2.0))
    torch.testing.assert_close(y2.double(), want2, rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="interleave_gate_up"):
        S._swiglu_a8(x, fg.preshuffle(w), None, "silu", False, None, None, None)
    with pytest.raises(ValueError, match="exact=True is for 16-bit"):
        S._swiglu_a8(x, wi, None, "silu", True, None, None, None)


def test_bad_arguments():
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    w = torch.randn(64, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="activation must be one of"):
        fg.swiglu(x, w, activation="tanh")
    with pytest.raises(ValueError, match=r"bias must be \[2I=64\]"):
        S._halves(torch.zeros(32), 64, "bias")
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        fg.swiglu(x.float(), w.float(), exact=True)
    with pytest.raises(TypeError, match="w_gate_up must be a tensor"):
        fg.swiglu(x, [1, 2])


def test_checks_size_paired_calls_by_half_the_columns():
    """matmul_fused / gemm_a8 with a paired expression: operands and out are [.., N / 2] (checked on CPU tensors
    with the arch given)."""
    e = E.parse("silu(gate + n_vec(b)) * up")
    a, w = torch.randn(2, 3, 32, dtype=torch.bfloat16), torch.randn(64, 32, dtype=torch.bfloat16)
    p = check_matmul_fused_args(a, w, None, None, 1.0, 0.0, "none", e, {"b": torch.zeros(32)}, "nk", None, None,
                                None, arch="sm_90a")
    assert (p["n"], p["n_out"]) == (64, 32) and p["epi"].pairs
    with pytest.raises(ValueError, match=r"\[N=32\]"):
        check_matmul_fused_args(a, w, None, None, 1.0, 0.0, "none", e, {"b": torch.zeros(64)}, "nk", None, None,
                                None, arch="sm_90a")
    with pytest.raises(ValueError, match=r"out must be \[6, 32\]"):
        check_matmul_fused_args(a, w, None, None, 1.0, 0.0, "none", e, {"b": torch.zeros(32)}, "nk", None,
                                torch.empty(6, 64, dtype=torch.bfloat16), None, arch="sm_90a")
    x8 = torch.zeros(4, 32, dtype=torch.float8_e4m3fn)
    wq = fg.preshuffle(torch.zeros(64, 32, dtype=torch.float8_e4m3fn))
    q = check_gemm_a8_args(x8, wq, None, None, None, e, None, None, operands={"b": torch.zeros(32)}, arch="sm_90a")
    assert (q["n"], q["n_out"]) == (64, 32)
    with pytest.raises(ValueError, match=r"out must be \[4, 32\].*N / 2"):
        check_gemm_a8_args(x8, wq, None, None, None, e, None, torch.empty(4, 64, dtype=torch.bfloat16),
                           operands={"b": torch.zeros(32)}, arch="sm_90a")
    assert paired_width("op", E.parse("acc"), 48) == 48
    with pytest.raises(ValueError, match="even number of weight rows"):
        paired_width("op", e, 24 + 1)


def test_fake_shapes():
    """The torch.compile fakes give [.., N / 2] for paired expressions (matmul_fused_expr, gemm_a8_expr, swiglu)."""
    from fusedgemm.gemm_a8 import _gemm_a8_expr_fake
    from fusedgemm.matmul import _matmul_fused_expr_fake

    a = torch.empty(3, 5, 32, dtype=torch.bfloat16, device="meta")
    w = torch.empty(64, 32, dtype=torch.bfloat16, device="meta")
    ys = _matmul_fused_expr_fake(a, w, "save(silu(gate), bf16) * up", "", [], "", [], "nk", torch.bfloat16, "")
    assert [tuple(y.shape) for y in ys] == [(3, 5, 32), (3, 5, 32)]
    ys = _gemm_a8_expr_fake(a[0], w, "silu(gate) * up", "", [], "", [], torch.bfloat16)
    assert tuple(ys[0].shape) == (5, 32)
    assert tuple(_matmul_fused_expr_fake(a, w, "silu(acc)", "", [], "", [], "nk", torch.bfloat16, "")[0].shape) == \
        (3, 5, 64)
    assert tuple(S._swiglu_fake(a, w, None, "silu", False, torch.float16).shape) == (3, 5, 32)
