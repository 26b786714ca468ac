"""fusedgemm.swiglu (the paired (gate, up) epilogue) on a GPU against float64: bf16 / fp16 x silu / gelu, ragged
M and I, decode M (1, 16, 64: the swapped sm_90a tiles) and prefill M (256, 1000, 4096), every tile config the
arch's plan may choose (outputs poisoned with NaN), exact=True against eager torch, fp8 / int8 through gemm_a8,
the interleaved-copy cache after an in-place update, torch.compile.

Tolerances come from the float64 reference: g and u are each off by at most eps * sum_k |x w| (fp32 sums of
exact products: eps = 2^-16 for 16-bit, 2^-13 for fp8's truncating accumulator), which moves act(g) * u by at
most L |u| dg + |act(g)| du + L dg du (L: the activation's Lipschitz bound), plus 4e-6 relative for the fast
exp / reciprocal, plus one rounding to the output type."""
import math

import pytest
import torch

import fusedgemm as fg
from fusedgemm.epilogue.evaluate import _UNARY
from fusedgemm.plan import forced_config, plans
from fusedgemm.swiglu import glu_expression

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16]
KIND = {torch.bfloat16: "bf16", torch.float16: "fp16"}
ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -23}
LIPSCHITZ = {"silu": 1.1, "gelu": 1.13, "gelu_erf": 1.13, "relu": 1.0}


def arch():
    from fusedgemm.runtime.arch import device_arch

    return device_arch(torch.cuda.current_device())


def rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * scale).to(dtype)


def reference(x, w, bias=None, act="silu", sa=None, sb=None, eps=2.0 ** -16):
    """float64 act(g) * u from the MERGED weight [2I, K], and the elementwise error bound before rounding."""
    x64, w64 = x.double().reshape(-1, x.shape[-1]), w.double()
    h, mag = x64 @ w64.T, x64.abs() @ w64.abs().T
    if sa is not None:
        h, mag = h * sa.double().reshape(-1, 1), mag * sa.double().abs().reshape(-1, 1)
    if sb is not None:
        h, mag = h * sb.double().reshape(-1), mag * sb.double().abs().reshape(-1)
    if bias is not None:
        h = h + bias.double()
    (g, u), (mg, mu) = h.chunk(2, dim=-1), mag.chunk(2, dim=-1)
    ag = _UNARY[act](g)
    y = ag * u
    dg, du = eps * mg + 1e-6 * g.abs(), eps * mu + 1e-6 * u.abs()
    lip = LIPSCHITZ[act]
    bound = lip * dg * u.abs() + ag.abs() * du + lip * dg * du + 4e-6 * y.abs() + 1e-6
    return y, bound


def check(got, y, bound, what=""):
    got64 = got.double().reshape(y.shape)
    assert not got64.isnan().any(), f"{what}: NaN in the output (an element never written?)"
    ulp = ULP[got.dtype]
    err = (got64 - y).abs()
    tol = bound * (1 + ulp) + ulp * y.abs()
    bad = err > tol
    worst = int((err / tol).argmax())  # the element furthest past its own tolerance (not the largest error)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} off; worst at {divmod(worst, y.shape[1])}: "
                           f"got {got64.flatten()[worst].item():.6g}, ref {y.flatten()[worst].item():.6g}, err "
                           f"{err.flatten()[worst].item():.3g} > tol {tol.flatten()[worst].item():.3g} (bound "
                           f"{bound.flatten()[worst].item():.3g})")


def problem(m, i, k, dtype, seed, bias=True):
    x = rand((m, k), dtype, seed)
    w = rand((2 * i, k), dtype, seed + 1, 1 / math.sqrt(k))
    b = rand(2 * i, dtype, seed + 2) if bias else None
    return x, w, b


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", ["silu", "gelu"])
@pytest.mark.parametrize("m", [1, 16, 64, 256, 1000, 4096])
@pytest.mark.parametrize("i", [752, 736])  # 1504 / 2 and 736: partial tiles
def test_swiglu_against_float64(dtype, act, m, i):
    x, w, b = problem(m, i, 512, dtype, seed=m + i)
    y = fg.swiglu(x, w, b, activation=act)
    torch.cuda.synchronize()
    assert y.shape == (m, i) and y.dtype == dtype
    check(y, *reference(x, w, b, act), f"M={m} I={i}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_config_poisoned(dtype):
    """Each (tile config, split-K) of the arch's plan on ragged shapes, through matmul_fused with the paired
    expression and a NaN-filled out [M, I]."""
    for n_plan, (name, splits) in enumerate(plans(arch(), KIND[dtype])):
        for m, i, k in ((1, 8, 8), (16, 100, 264), (17, 200, 520), (130, 392, 1000)):
            x, w, b = problem(m, i, k, dtype, seed=100 + n_plan)
            wi = fg.interleave_gate_up(w)
            out = torch.full((m, i), float("nan"), dtype=dtype, device="cuda")
            expr = glu_expression("silu", bias=True)
            with forced_config(name, splits):
                fg.matmul_fused(x, wi.weight, epilogue=expr, operands={"bias_gate": b[:i], "bias_up": b[i:]},
                                out=out)
            torch.cuda.synchronize()
            check(out, *reference(x, w, b, "silu"), f"{name}/{splits} M={m} I={i} K={k}")


_FP16_EXACT = pytest.mark.xfail(reason="H100 2026-11-25: fp16 exact=True is 98.2-98.9% bit-equal to eager at M=1 "
                                "and 1000, and some elements exceed the 3-ulp bound; the bound is not derived yet",
                                strict=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float16, marks=_FP16_EXACT)], ids=str)
@pytest.mark.parametrize("act", ["silu", "gelu"])
@pytest.mark.parametrize("m", [1, 16, 1000])
def test_exact_matches_eager(dtype, act, m):
    """exact=True rounds where eager does: bf16(bf16(act(bf16(g))) * bf16(u)). Bit-equal to F.linear + chunk +
    act + mul except where the two GEMMs' fp32 sums (different summation orders) or the two activations (fast
    exp2 / rcp against torch's) straddle a rounding point: at most 1% of the elements, each within 3 ulps of
    the output type of (|act(g) u| + L |g u|)."""
    i = 736
    x, w, b = problem(m, i, 1024, dtype, seed=7 * m)
    y = fg.swiglu(x, w, b, activation=act, exact=True)
    g, u = torch.nn.functional.linear(x, w, b).chunk(2, dim=-1)
    act_fn = {"silu": torch.nn.functional.silu,
              "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[act]
    eager = act_fn(g) * u
    same = (y == eager).float().mean().item()
    assert same >= 0.99, f"only {same:.4f} of the elements bit-equal to eager"
    g64, u64 = g.double(), u.double()
    scale = act_fn(g).double().abs() * u64.abs() + LIPSCHITZ[act] * (g64 * u64).abs()
    assert ((y.double() - eager.double()).abs() <= 3 * ULP[dtype] * scale + 1e-6).all()


@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("m", [1, 16, 64, 256, 1000])
def test_8bit_swiglu(kind, m):
    """fp8 / int8 x with interleave_gate_up(w8, preshuffle=True), scale_a [M], scale_b [2I] and bias [2I] in the
    merged order."""
    i, k = 736, 512
    if kind == "int8":
        x = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda")
        w = torch.randint(-127, 128, (2 * i, k), dtype=torch.int8, device="cuda")
        base, eps = 1.0 / (127.0 * 127.0 * math.sqrt(k) / 3.0), 0.0  # int32 sums are exact
    else:
        dt = fg.FP8_DTYPE_FOR_ARCH[arch()]
        x, w = torch.randn(m, k, device="cuda").to(dt), torch.randn(2 * i, k, device="cuda").to(dt)
        # The fp8 tensor core keeps ~13 fraction bits in its accumulator and truncates: one ulp of it, 2^-13, per
        # 128-value K block before promotion (2^-14, half of that, failed 1 run in 6 on an H100 by 3% on one
        # near-zero output of 47104; gemm_a8's fp8 error equals _scaled_mm's: test_gpu_gemm_a8).
        base, eps = 1.0 / math.sqrt(k), 2.0 ** -13
    sa = (torch.rand(m, device="cuda") + 0.5) * base
    sb = torch.rand(2 * i, device="cuda") + 0.5
    b = torch.randn(2 * i, device="cuda")
    wi = fg.interleave_gate_up(w, preshuffle=True)
    y = fg.swiglu(x, wi, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    assert y.shape == (m, i)
    check(y, *reference(x, w, b, "silu", sa, sb, eps=eps), f"{kind} M={m}")


def test_in_place_weight_update_is_seen():
    x, w, b = problem(16, 128, 256, torch.bfloat16, seed=3)
    y1 = fg.swiglu(x, w, b)
    w2 = rand(w.shape, w.dtype, 99, 1 / 16)
    w.copy_(w2)  # load_state_dict's copy_: same address, new values
    y2 = fg.swiglu(x, w, b)
    torch.cuda.synchronize()
    assert not torch.equal(y1, y2)
    check(y2, *reference(x, w2, b, "silu"), "after copy_")


def test_torch_compile():
    x, w, b = problem(33, 256, 256, torch.bfloat16, seed=5)

    def f(x):
        return fg.swiglu(x, w, b, activation="gelu") * 2

    y = torch.compile(f, fullgraph=True)(x)
    y_ref, bound = reference(x, w, b, "gelu")
    check(y / 2, y_ref, bound, "compiled")
