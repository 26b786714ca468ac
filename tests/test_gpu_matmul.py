"""matmul_fused on a GPU against float64: every input dtype x activation x alpha/beta/c form, ragged M / N / K,
every tile config of the arch, poisoned outputs, strided A, layout 'kn', c aliasing out, graph capture,
torch.compile, autograd against torch, FusedLinear."""
import contextlib
import math
import warnings

import pytest
import torch

import fusedgemm as fg
from fusedgemm.epilogue.evaluate import _UNARY
from fusedgemm.plan import forced_config, plans

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
KIND = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "tf32"}
# |act'| bound: how far an error before the activation can move its result.
LIPSCHITZ = {"none": 1.0, "relu": 1.0, "silu": 1.1, "gelu": 1.13, "gelu_erf": 1.13, "sigmoid": 0.25, "tanh": 1.0}
ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -23}


def arch():
    from fusedgemm.runtime.arch import device_arch

    return device_arch(torch.cuda.current_device())


def rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * scale).to(dtype)


def reference(a, w, bias=None, c=None, alpha=1.0, beta=0.0, act="none", layout="nk"):
    """float64 value and an elementwise error bound of what the kernel may return before its output rounding."""
    a64, w64 = a.double().reshape(-1, a.shape[-1]), (w if layout == "nk" else w.t()).double()
    acc = a64 @ w64.T
    mag = a64.abs() @ w64.abs().T
    alpha = float(alpha) if not isinstance(alpha, torch.Tensor) else alpha.item()
    beta = float(beta) if not isinstance(beta, torch.Tensor) else beta.item()
    pre = alpha * acc
    m, n = acc.shape
    if c is not None and beta != 0.0:
        cc = c.double()
        cc = cc.reshape(m, n) if cc.numel() == m * n and cc.dim() >= 2 else cc.reshape(-1, 1) if cc.shape == (m, 1) \
            else cc.reshape(1, n)
        pre = pre + beta * cc
    if bias is not None:
        pre = pre + bias.double()
    y = _UNARY[act](pre) if act != "none" else pre
    # tf32: each input rounded to 10 mantissa bits (2^-11 relative, two operands); else fp32 accumulation.
    eps = 2.0 ** -10 if a.dtype == torch.float32 else 2.0 ** -16
    bound = LIPSCHITZ[act] * (abs(alpha) * eps * mag + 1e-6 * pre.abs()) + 1e-6
    return y, bound


def check(got, a, w, out_dtype=None, **kw):
    y, bound = reference(a, w, **kw)
    got64 = got.double().reshape(y.shape)
    out_dtype = got.dtype
    tol = bound * (1 + ULP[out_dtype]) + ULP[out_dtype] * y.abs()
    assert not got64.isnan().any(), "NaN in the output (an element never written?)"
    err = (got64 - y).abs()
    bad = err > tol
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} elements off; worst err {err.max().item():.3g} at "
                           f"{divmod(int(err.argmax()), y.shape[1])}, ref {y.flatten()[err.argmax()].item():.4g}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", ["none", "silu", "gelu", "relu", "gelu_erf", "sigmoid", "tanh"])
def test_bias_activation(dtype, act):
    m, n, k = 77, 264, 200
    a, w, b = rand((m, k), dtype, 1), rand((n, k), dtype, 2, 1 / math.sqrt(k)), rand(n, dtype, 3)
    out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    y = fg.matmul_fused(a, w, b, activation=act, out=out, precision="tf32" if dtype == torch.float32 else None)
    assert y is out
    check(y, a, w, bias=b, act=act)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("c_form", ["mn", "n", "m1", "lead", "none"])
@pytest.mark.parametrize("tensor_scalars", [False, True])
def test_alpha_beta_c(dtype, c_form, tensor_scalars):
    lead, n, k = (3, 21), 136, 96
    m = 63
    a, w = rand((*lead, k), dtype, 4), rand((n, k), dtype, 5, 1 / math.sqrt(k))
    c = {"mn": rand((m, n), torch.float32, 6), "n": rand(n, dtype, 6), "m1": rand((m, 1), dtype, 6),
         "lead": rand((*lead, n), dtype, 6), "none": None}[c_form]
    alpha, beta = 1.5, (0.0 if c is None else -0.75)
    if tensor_scalars:
        alpha = torch.tensor([alpha], device="cuda")
        beta = torch.tensor([beta], device="cuda") if c is not None else 0.0
    y = fg.matmul_fused(a, w, alpha=alpha, beta=beta, c=c, activation="silu", precision="tf32")
    assert y.shape == (*lead, n) and y.dtype == dtype
    check(y, a, w, c=c, alpha=alpha, beta=beta, act="silu")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_config_ragged(dtype):
    """Each (tile config, split-K) the arch's plan may choose, on ragged M, N, K."""
    for i, (name, splits) in enumerate(plans(arch(), KIND[dtype])):
        # (2100, 2064, 200): more than one wave of CTAs for every CTA-per-tile config
        for m, n, k in ((1, 8, 8 if dtype != torch.float32 else 4), (17, 200, 520), (130, 392, 1000),
                        (2100, 2064, 200)):
            if k * torch.empty((), dtype=dtype).element_size() % 16:
                k += 8
            a, w, b = rand((m, k), dtype, 10 + i), rand((n, k), dtype, 20 + i, 1 / math.sqrt(k)), rand(n, dtype, 7)
            out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
            with forced_config(name, splits):
                fg.matmul_fused(a, w, b, activation="gelu", out=out, precision="tf32")
            check(out, a, w, bias=b, act="gelu")


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_b_multicast_pairs_with_an_odd_last_row_block(layout):
    """pair_128x256: 3 row blocks (the last pair's second CTA has no rows but still copies its half of B for its
    peer) and a ragged last column tile (half of its B rows past N)."""
    if arch() != "sm_90a":
        pytest.skip("B-multicast pairs are sm_90a's")
    m, n, k = 300, 600, 264
    a = rand((m, k), torch.bfloat16, 140)
    w = rand((n, k) if layout == "nk" else (k, n), torch.bfloat16, 141, 1 / math.sqrt(k))
    b = rand(n, torch.bfloat16, 142)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    with forced_config("pair_128x256", 1):
        fg.matmul_fused(a, w, b, layout=layout, activation="silu", out=out)
    check(out, a, w, bias=b, act="silu", layout=layout)


@pytest.mark.parametrize("config", ["loop_128x256", "pair_loop_128x256"])
@pytest.mark.parametrize("dtype,layout", [(torch.bfloat16, "nk"), (torch.float16, "kn"), (torch.float32, "nk")],
                         ids=str)
def test_tile_loop_configs_take_several_tiles_per_cta(config, dtype, layout):
    """The tile-loop configs (one wave of CTAs looping over tiles, each stored through shared memory) with
    more tiles than CTAs: 17 row blocks (the last pair's second CTA has no rows), a ragged last column tile, K
    blocks continuing one ring sequence across a CTA's tiles (K = 520: 9 or 17 blocks, the last one ragged)."""
    if arch() != "sm_90a":
        pytest.skip("tile-loop configs are sm_90a's")
    m, n, k = 2100, 3000, 520
    a = rand((m, k), dtype, 150)
    w = rand((n, k) if layout == "nk" else (k, n), dtype, 151, 1 / math.sqrt(k))
    b = rand(n, dtype, 152)
    out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    with forced_config(config, 1):
        fg.matmul_fused(a, w, b, layout=layout, activation="silu", out=out, precision="tf32")
    check(out, a, w, bias=b, act="silu", layout=layout)


@pytest.mark.parametrize("config", ["loop_128x256", "pair_loop_128x256"])
@pytest.mark.parametrize("c_form", ["m1", "mn"])
def test_tile_loop_store_with_row_values_and_an_unaligned_output(config, c_form):
    """The tile loop's store through shared memory (64-column chunks, four consecutive outputs per thread and row)
    with row values (c [M, 1]) or an [M, N] operand, and an output two elements into a buffer (contiguous, 4-byte
    aligned), whose 4-value stores are not 8-byte aligned (the other copy of the row loop); poisoned around it.
    33 row blocks x 8 column tiles: CTAs take two or three tiles, so the spare warps store handed chunks (each tile's
    last 64 columns but the CTA's last tile's) with the same operands, and the last row block is ragged."""
    if arch() != "sm_90a":
        pytest.skip("tile-loop configs are sm_90a's")
    m, n, k = 4100, 2000, 264
    a, w = rand((m, k), torch.bfloat16, 160), rand((n, k), torch.bfloat16, 161, 1 / math.sqrt(k))
    c = rand((m, 1), torch.bfloat16, 162) if c_form == "m1" else rand((m, n), torch.float32, 162)
    flat = torch.full((m * n + 4,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = flat[2:2 + m * n].view(m, n)
    assert out.data_ptr() % 8 == 4
    with forced_config(config, 1):
        fg.matmul_fused(a, w, alpha=1.5, beta=-0.75, c=c, activation="gelu", out=out)
    check(out, a, w, c=c, alpha=1.5, beta=-0.75, act="gelu")
    assert flat[:2].isnan().all() and flat[2 + m * n:].isnan().all(), "a store outside the output"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_kn_layout_every_config_reads_b_in_place(dtype, recwarn):
    """B as [K, N] (N contiguous): the MN-major kernels on sm_90a, each plan, ragged shapes, no copy warning."""
    if arch() != "sm_90a":
        pytest.skip("MN-major B kernels are sm_90a's")
    for i, (name, splits) in enumerate(plans("sm_90a", KIND[dtype])):
        for m, n, k in ((3, 136, 72), (70, 264, 520), (200, 392, 1032)):
            a, w_kn, b = rand((m, k), dtype, 110 + i), rand((k, n), dtype, 120 + i, 1 / math.sqrt(k)), rand(n, dtype, 7)
            out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
            with forced_config(name, splits):
                fg.matmul_fused(a, w_kn, b, layout="kn", activation="silu", out=out)
            check(out, a, w_kn, bias=b, act="silu", layout="kn")
    big = rand((200, 400), dtype, 130)  # a [K, N] view with a padded row stride: still read in place
    w_view = big[:, 8:8 + 264]
    a = rand((33, 200), dtype, 131)
    check(fg.matmul_fused(a, w_view, layout="kn"), a, w_view, layout="kn")
    assert not [w for w in recwarn.list if "copies B" in str(w.message) or "copied" in str(w.message)]


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (16, 4096, 4096), (48, 7168, 2048), (64, 4096, 4096),
                                   (256, 4096, 4096), (2048, 4096, 4096)])
def test_llm_like_shapes_bf16(m, n, k):
    """Through the heuristic's plan (M = 48, moe_dn: the persistent tile at decode size)."""
    a, w, b = rand((m, k), torch.bfloat16, 30), rand((n, k), torch.bfloat16, 31, 1 / math.sqrt(k)), rand(n, torch.bfloat16, 32)
    check(fg.matmul_fused(a, w, b, activation="silu"), a, w, bias=b, act="silu")


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_out_dtypes_and_kn_layout(out_dtype):
    m, n, k = 40, 72, 56
    a, w_kn = rand((m, k), torch.bfloat16, 40), rand((k, n), torch.bfloat16, 41, 1 / math.sqrt(k))
    y = fg.matmul_fused(a, w_kn, layout="kn", activation="relu", out_dtype=out_dtype)
    assert y.dtype == out_dtype
    check(y, a, w_kn, act="relu", layout="kn")


def test_strided_a_without_copy_and_c_aliasing_out():
    m, n, k = 50, 128, 64
    big = rand((m, k + 24), torch.bfloat16, 50)
    a = big[:, 8:8 + k]  # row stride k + 24, 16-byte aligned start: read in place
    w = rand((n, k), torch.bfloat16, 51, 1 / math.sqrt(k))
    y0 = rand((m, n), torch.bfloat16, 52)
    y = y0.clone()
    fg.matmul_fused(a, w, c=y, beta=0.5, out=y)  # in place: y = A W^T + 0.5 y
    check(y, a, w, c=y0, beta=0.5)


def test_graph_capture_replays_new_alpha():
    m, n, k = 32, 256, 128
    a, w = rand((m, k), torch.bfloat16, 60), rand((n, k), torch.bfloat16, 61, 1 / math.sqrt(k))
    alpha = torch.tensor([1.0], device="cuda")
    fg.matmul_fused(a, w, alpha=alpha, activation="silu")  # compile + warm up outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fg.matmul_fused(a, w, alpha=alpha, activation="silu")
    alpha.fill_(-2.0)
    g.replay()
    torch.cuda.synchronize()
    check(y, a, w, alpha=-2.0, act="silu")


def test_torch_compile_traces_the_op():
    m, n, k = 24, 64, 64
    a, w, b = rand((m, k), torch.bfloat16, 70), rand((n, k), torch.bfloat16, 71, 1 / math.sqrt(k)), rand(n, torch.bfloat16, 72)

    @torch.compile(fullgraph=True)
    def f(a, w, b):
        return fg.matmul_fused(a, w, b, activation="gelu") * 2

    check(f(a, w, b) / 2, a, w, bias=b, act="gelu")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("act", ["none", "silu", "gelu", "relu"])
def test_autograd_matches_torch(dtype, act):
    m, n, k = 48, 96, 64
    x = rand((2, m // 2, k), dtype, 80).requires_grad_()
    w = rand((n, k), dtype, 81, 1 / math.sqrt(k)).requires_grad_()
    b = rand(n, dtype, 82).requires_grad_()
    r = rand((2, m // 2, n), dtype, 83).requires_grad_()
    y = fg.matmul_fused(x, w, b, c=r, beta=0.5, activation=act, precision="tf32")
    dy = rand(y.shape, dtype, 84)
    y.backward(dy)
    ref_in = [t.detach().double().requires_grad_() for t in (x, w, b, r)]
    pre = torch.nn.functional.linear(ref_in[0], ref_in[1], ref_in[2]) + 0.5 * ref_in[3]
    yr = _UNARY[act](pre) if act != "none" else pre
    yr.backward(dy.double())
    for t, tr, name in zip((x, w, b, r), ref_in, "xwbr"):
        err = (t.grad.double() - tr.grad).norm() / tr.grad.norm()
        # torch's own bf16 backward is about 2^-8 off. fp32 runs the forward in TF32: pre-activations within
        # 2^-10 of 0 may flip relu's mask, a few whole gradient entries (5.8e-3 seen on an H100).
        assert err < (2e-2 if dtype == torch.bfloat16 else 1.5e-2), (name, err.item())


def test_fused_linear_matches_linear_and_trains():
    lin = torch.nn.Linear(64, 128).cuda().to(torch.bfloat16)
    f = fg.nn.FusedLinear.from_linear(lin, activation="gelu")
    assert set(f.state_dict()) == set(lin.state_dict())
    x = rand((5, 64), torch.bfloat16, 90)
    y = f(x)
    yr = torch.nn.functional.gelu(lin(x).float(), approximate="tanh")
    assert (y.float() - yr).abs().max() < 0.05
    y.float().sum().backward()
    assert f.weight.grad is not None and f.bias.grad is not None


@pytest.mark.parametrize("m,n,k", [(16, 64, 32), (77, 200, 1000), (300, 392, 4096), (1, 136, 260),
                                   (1100, 2104, 100)])  # the last: more CTAs than SMs
def test_fp32_ieee_is_as_exact_as_torch(m, n, k):
    """precision 'ieee' (torch's default 'highest'): on sm_90a the three-TF32-products kernel (F32x3), elsewhere the
    unfused path; against float64 within 2x of torch's own fp32 GEMM or 2^-21 (fp32's accuracy), every plan of
    F32x3."""
    import fusedgemm.matmul as M

    a, w, b = rand((m, k), torch.float32, 95), rand((n, k), torch.float32, 96), rand(n, torch.float32, 97)
    y64 = torch.relu(a.double() @ w.double().T + b.double())
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        ref32 = torch.relu(a @ w.T + b)
    finally:
        torch.set_float32_matmul_precision(prev)
    torch_err = ((ref32.double() - y64).norm() / y64.norm()).item()
    plan_list = plans(arch(), "f32x3") if arch() == "sm_90a" else [(None, 1)]
    for name, splits in plan_list:
        M._WARNED.discard("ieee")
        with (forced_config(name, splits) if name else contextlib.nullcontext()):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                y = fg.matmul_fused(a, w, b, activation="relu", precision="ieee")
        assert any("exact-fp32" in str(c.message) for c in caught) == (arch() != "sm_90a")
        err = ((y.double() - y64).norm() / y64.norm()).item()
        # Each split operand carries up to 2^-22 of relative error (the small part is itself rounded to TF32): at
        # tiny K torch's exact-FMA fp32 is closer (K = 32: 7.8e-8 against 3.1e-7 on an H100); from K ~ 1000 on
        # F32x3 is the closer one (its K blocks are promoted into fp32 every 32 values).
        assert err <= max(2 * torch_err, 2.0 ** -21), (name, splits, err, torch_err)


def test_nan_propagates_like_torch():
    m, n, k = 8, 64, 32
    a, w = rand((m, k), torch.bfloat16, 97), rand((n, k), torch.bfloat16, 98)
    a[3, 5] = float("nan")
    y = fg.matmul_fused(a, w)
    assert y[3].isnan().all() and not y[:3].isnan().any()


def test_repeat_calls_take_the_fast_path_and_stay_right():
    m, n, k = 33, 128, 64
    w, b = rand((n, k), torch.bfloat16, 99, 1 / math.sqrt(k)), rand(n, torch.bfloat16, 100)
    for seed in range(3):
        a = rand((m, k), torch.bfloat16, 101 + seed)
        check(fg.matmul_fused(a, w, b, activation="silu"), a, w, bias=b, act="silu")


def test_fast_path_never_serves_a_different_signature():
    """A recorded plan is keyed by every input's dtype, shape, strides and device: a repeat call that differs in
    any of them takes the checked path (here: raises for mixed dtypes, or runs the right kernel)."""
    m, n, k = 16, 64, 64
    a, w, b = rand((m, k), torch.bfloat16, 140), rand((n, k), torch.bfloat16, 141, 1 / math.sqrt(k)), rand(n, torch.bfloat16, 142)
    fg.matmul_fused(a, w, b)
    with pytest.raises(TypeError, match="same dtype"):
        fg.matmul_fused(a, w.float(), b)
    check(fg.matmul_fused(a, w, b.float(), activation="relu"), a, w, bias=b.float(), act="relu")
    wt = rand((k, n), torch.bfloat16, 143).t()  # same shape, other strides: copied (warned), still right
    check(fg.matmul_fused(a, wt, b), a, wt, bias=b)


def test_bad_device_and_type_errors_on_the_gpu_path():
    a, w = rand((8, 64), torch.bfloat16, 150), rand((64, 64), torch.bfloat16, 151)
    with pytest.raises(ValueError, match=r"alpha is on cpu, expected cuda"):
        fg.matmul_fused(a, w, alpha=torch.ones(1))
    with pytest.raises(ValueError, match=r"bias is on cpu"):
        fg.matmul_fused(a, w, torch.ones(64, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match=r"alpha must be a number"):
        fg.matmul_fused(a.requires_grad_(), w, alpha="2")  # the autograd path checks it too


def test_fp32_kn_layout_copies_with_a_warning_and_is_right():
    a, w_kn = rand((20, 32), torch.float32, 152), rand((32, 48), torch.float32, 153, 1 / math.sqrt(32))
    import fusedgemm.matmul as M

    M._WARNED.discard("kn")
    with pytest.warns(UserWarning, match="copies B"):
        y = fg.matmul_fused(a, w_kn, layout="kn", precision="tf32", activation="tanh")
    check(y, a, w_kn, act="tanh", layout="kn")
