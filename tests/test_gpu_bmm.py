"""bmm_tiny / bmm on a GPU against the float64 oracle (skipped without a GPU)."""
import warnings

import pytest
import torch

import fusedgemm as fg
from fusedgemm.reference import rel_error

pytestmark = pytest.mark.gpu

# fp32 accumulation of k <= 64 products: far below 1e-5; bf16/fp16 outputs: one rounding.
TOL = {torch.float32: 1e-5, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
SHAPES = [(12, 12, 64), (12, 64, 12), (64, 64, 64), (3, 7, 5), (16, 16, 16), (1, 1, 1), (64, 1, 64), (1, 64, 33)]


def oracle(a, b):
    b3 = b.unsqueeze(0) if b.dim() == 2 else b
    return torch.matmul(a.double().cpu(), b3.double().cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("batch", [2, 1024])
def test_matches_oracle(dtype, m, n, k, batch, seed):
    a = torch.randn(batch, m, k, device="cuda").to(dtype)
    b = torch.randn(batch, k, n, device="cuda").to(dtype)
    out = torch.full((batch, m, n), float("nan"), device="cuda", dtype=dtype)
    y = fg.bmm_tiny(a, b, out=out)
    assert y is out and not torch.isnan(y).any()
    assert rel_error(y, oracle(a, b)) <= TOL[dtype]


@pytest.mark.parametrize("b_shape", ["kn", "1kn"])
def test_broadcast_b(b_shape, seed):
    a = torch.randn(500, 12, 64, device="cuda")
    b = torch.randn(64, 12, device="cuda") if b_shape == "kn" else torch.randn(1, 64, 12, device="cuda")
    assert rel_error(fg.bmm_tiny(a, b), oracle(a, b)) <= TOL[torch.float32]


def test_strided_views_need_no_copy(seed):
    at = torch.randn(300, 64, 12, device="cuda").transpose(1, 2)  # [300, 12, 64], non-contiguous
    bt = torch.randn(300, 12, 64, device="cuda").transpose(1, 2)  # [300, 64, 12]
    sl = torch.randn(600, 12, 64, device="cuda")[::2]              # batch stride 2x
    assert rel_error(fg.bmm_tiny(at, bt), oracle(at, bt)) <= TOL[torch.float32]
    assert rel_error(fg.bmm_tiny(sl, bt), oracle(sl, bt)) <= TOL[torch.float32]


def test_unaligned_and_broadcast_views(seed):
    """Storage offset 1 (no 16-byte quad: scalar loads, element-wise C stores), an expanded A (batch stride 0),
    a transposed broadcast B."""
    n_a, n_b = 300 * 12 * 64, 300 * 64 * 16
    a_off = torch.randn(n_a + 1, device="cuda")[1:].view(300, 12, 64)
    b_off = torch.randn(n_b + 1, device="cuda")[1:].view(300, 64, 16)
    out_off = torch.full((300 * 12 * 16 + 1,), float("nan"), device="cuda")[1:].view(300, 12, 16)
    fg.bmm_tiny(a_off, b_off, out=out_off)
    assert rel_error(out_off, oracle(a_off, b_off)) <= TOL[torch.float32]
    a_exp = torch.randn(1, 12, 64, device="cuda").expand(300, 12, 64)
    assert rel_error(fg.bmm_tiny(a_exp, b_off), oracle(a_exp, b_off)) <= TOL[torch.float32]
    b_t = torch.randn(16, 64, device="cuda").t()  # [64, 16] broadcast, column-major
    assert rel_error(fg.bmm_tiny(a_off, b_t), oracle(a_off, b_t)) <= TOL[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(12, 12, 64), (12, 64, 12), (64, 64, 64), (16, 16, 16), (3, 7, 5)])
@pytest.mark.parametrize("knobs", [{}, {"r": 2}, {"elems": 1}, {"persistent": False}, {"async_copy": False}])
def test_plans_that_loop_over_groups(dtype, m, n, k, knobs, seed):
    """Batch 3000: every block of the resident grid loops over several groups (prefetching the next one);
    the benchmark's alternative plans give the same results. f32 with contiguous inputs runs the cp.async
    kernels unless async_copy=False; the transposed B always takes the register-staged ones."""
    from fusedgemm.tiny_bmm import launch_bmm_tiny

    a = torch.randn(3000, m, k, device="cuda").to(dtype)
    b = torch.randn(3000, k, n, device="cuda").to(dtype)
    out = torch.full((3000, m, n), float("nan"), device="cuda", dtype=dtype)
    try:
        launch_bmm_tiny(a, b, out, **knobs)
    except ValueError:
        pytest.skip(f"{knobs} does not fit {m}x{n}x{k}")
    assert rel_error(out, oracle(a, b)) <= TOL[dtype]
    bt = torch.randn(3000, n, k, device="cuda").to(dtype).transpose(1, 2)  # strided B, same plans
    launch_bmm_tiny(a, bt, out, **{key: v for key, v in knobs.items() if key != "async_copy"})
    assert rel_error(out, oracle(a, bt)) <= TOL[dtype]


ASYNC_SHAPES = [(12, 12, 64), (12, 64, 12), (64, 64, 64), (16, 16, 16), (4, 4, 4), (1, 4, 8), (64, 4, 64),
                (5, 12, 36), (20, 28, 64), (33, 40, 20), (33, 60, 20)]
ASYNC_KNOBS = [{}, {"rm": 2, "rn": 4}, {"rm": 4, "rn": 4}, {"rm": 4, "rn": 8}, {"stages": 2}, {"stages": 4, "elems": 3},
               {"elems": 7, "threads": 32}, {"persistent": False}, {"kc": 4, "stages": 8}, {"kc": 8, "elems": 2},
               {"kc": 16, "rm": 2, "rn": 4}, {"rm": 4, "rn": 8, "fixed_tx": False}]


@pytest.mark.parametrize("m,n,k", ASYNC_SHAPES)
@pytest.mark.parametrize("knobs", ASYNC_KNOBS)
def test_async_copy_kernels(m, n, k, knobs, seed):
    """The f32 cp.async kernels (every tile, ring depth 2-8, k in chunks, several passes of tiles per group, a
    ragged last group, padded rows and columns) on dense, batch-strided and row-padded A, broadcast B in both
    layouts;
    outputs poisoned with NaN, including past the end (nothing written there), and once 4-byte aligned only
    (element-wise C stores)."""
    from fusedgemm.tiny_bmm import launch_bmm_tiny, plan_for

    batch = 2001
    a = torch.randn(batch, m, k, device="cuda")
    b = torch.randn(batch, k, n, device="cuda")
    try:
        plan = plan_for(a, b, async_copy=True, **knobs)[0]
    except ValueError:
        pytest.skip(f"{knobs} does not fit {m}x{n}x{k}")
    assert "async" in plan["name"] and plan["stages"] >= 2
    flat = torch.full((batch * m * n + 64,), float("nan"), device="cuda")
    out = flat[:batch * m * n].view(batch, m, n)
    cases = [(a, b), (torch.randn(2 * batch, m, k, device="cuda")[::2], b),             # batch stride 2 m k
             (torch.randn(batch, m, k + 4, device="cuda")[:, :, :k], b),                  # rows padded to k + 4
             (a, torch.randn(k, n, device="cuda")), (a, torch.randn(n, k, device="cuda").t())]  # broadcast B
    for x, y in cases:
        out.fill_(float("nan"))
        y3 = y.unsqueeze(0) if y.dim() == 2 else y
        launch_bmm_tiny(x, y3, out, async_copy=True, **knobs)
        assert not torch.isnan(out).any() and torch.isnan(flat[batch * m * n:]).all()
        assert rel_error(out, oracle(x, y)) <= TOL[torch.float32]
    odd = torch.full((batch * m * n + 1,), float("nan"), device="cuda")[1:].view(batch, m, n)
    launch_bmm_tiny(a, b, odd, async_copy=True, **knobs)
    assert rel_error(odd, oracle(a, b)) <= TOL[torch.float32]
    launch_bmm_tiny(a, b, out, async_copy=True, **knobs)
    assert torch.equal(out, odd)  # deterministic, and the same bits whichever way C is stored


def test_nan_inf_propagate_like_torch_bmm():
    a = torch.randn(64, 12, 64, device="cuda")
    b = torch.randn(64, 64, 12, device="cuda")
    a[3, 2, 5] = float("nan")
    a[7, 0, 0] = float("inf")
    b[9, 1, 4] = float("-inf")
    ours, ref = fg.bmm_tiny(a, b), torch.bmm(a, b)
    assert torch.equal(torch.isnan(ours), torch.isnan(ref))
    assert torch.equal(torch.isinf(ours), torch.isinf(ref))
    finite = torch.isfinite(ref)
    torch.testing.assert_close(ours[finite], ref[finite], rtol=1e-5, atol=1e-5)


def test_empty_and_k0():
    assert fg.bmm_tiny(torch.randn(0, 3, 4, device="cuda"), torch.randn(4, 5, device="cuda")).shape == (0, 3, 5)
    y = fg.bmm_tiny(torch.randn(4, 3, 0, device="cuda"), torch.randn(0, 5, device="cuda"))
    assert torch.equal(y, torch.zeros(4, 3, 5, device="cuda"))


def test_dispatch(monkeypatch, seed):
    import fusedgemm.tiny_bmm as bmm_mod

    calls = []
    real = bmm_mod.launch_bmm_tiny
    monkeypatch.setattr(bmm_mod, "_FAST", {})  # no bound launches from earlier tests: every call is seen
    monkeypatch.setattr(bmm_mod, "launch_bmm_tiny", lambda *a, **k: calls.append(1) or real(*a, **k))
    a, b = torch.randn(64, 12, 64, device="cuda"), torch.randn(64, 64, 12, device="cuda")
    y = fg.bmm(a, b)
    assert calls and rel_error(y, oracle(a, b)) <= TOL[torch.float32]
    calls.clear()
    big_a, big_b = torch.randn(4, 65, 64, device="cuda"), torch.randn(4, 64, 12, device="cuda")
    assert torch.equal(fg.bmm(big_a, big_b), torch.bmm(big_a, big_b)) and not calls  # > 64: torch.bmm
    one_a, one_b = torch.randn(1, 12, 64, device="cuda"), torch.randn(1, 64, 12, device="cuda")
    assert torch.equal(fg.bmm(one_a, one_b), torch.bmm(one_a, one_b)) and not calls  # batch 1: torch.bmm
    monkeypatch.setenv("FUSEDGEMM_DISABLE_TINY_GEMM", "1")
    assert torch.equal(fg.bmm(a, b), torch.bmm(a, b)) and not calls  # gate flipped: exactly torch.bmm


def test_fallback_warns_once(monkeypatch, seed):
    import fusedgemm.tiny_bmm as bmm_mod

    def broken(*args, **kwargs):
        raise RuntimeError("simulated: no code object")

    monkeypatch.setattr(bmm_mod, "launch_bmm_tiny", broken)
    monkeypatch.setattr(bmm_mod, "_FAST", {})  # else a bound launch from an earlier test would bypass `broken`
    monkeypatch.setattr(bmm_mod, "_warned_fallback", False)
    a, b = torch.randn(8, 12, 64, device="cuda"), torch.randn(8, 64, 12, device="cuda")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y1, y2 = fg.bmm(a, b), fg.bmm(a, b)
    assert [str(x.message) for x in w if "tiny-GEMM kernel unavailable" in str(x.message)].__len__() == 1
    assert torch.equal(y1, torch.bmm(a, b)) and torch.equal(y2, y1)


@pytest.mark.parametrize("broadcast", [False, True])
def test_gradients_match_torch_bmm(broadcast, seed):
    a = torch.randn(256, 12, 64, device="cuda", requires_grad=True)
    b = torch.randn(64, 12, device="cuda", requires_grad=True) if broadcast else \
        torch.randn(256, 64, 12, device="cuda", requires_grad=True)
    g = torch.randn(256, 12, 12, device="cuda")
    ga, gb = torch.autograd.grad(fg.bmm(a, b), (a, b), g)
    ra, rb = torch.autograd.grad(torch.matmul(a, b), (a, b), g)
    torch.testing.assert_close(ga, ra, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gb, rb, rtol=1e-5, atol=1e-4)


def test_gradcheck_float64_through_the_fallback(seed):
    a = torch.randn(4, 3, 5, device="cuda", dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 5, 7, device="cuda", dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fg.bmm, (a, b))


def test_graph_capture(seed):
    a, b = torch.randn(1024, 12, 64, device="cuda"), torch.randn(1024, 64, 12, device="cuda")
    fg.bmm_tiny(a, b)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fg.bmm_tiny(a, b)
    for _ in range(5):
        a.copy_(torch.randn_like(a))
        g.replay()
        assert torch.equal(y, fg.bmm_tiny(a, b))


def test_torch_compile(seed):
    a, b = torch.randn(64, 12, 64, device="cuda"), torch.randn(64, 64, 12, device="cuda")
    f = torch.compile(lambda x, y: fg.bmm_tiny(x, y) + 1, fullgraph=True)
    assert torch.equal(f(a, b), fg.bmm_tiny(a, b) + 1)


def test_cached_launches_follow_alignment_and_strides(seed):
    """The eager path caches launches by shapes, strides and 16-byte alignment: the same shapes at another
    alignment (scalar instead of vector loads) or with other strides take their own launch and stay correct;
    inputs once accepted on a GPU are still refused on the CPU."""
    base = torch.randn(200 * 12 * 64 + 1, device="cuda")
    b = torch.randn(200, 64, 12, device="cuda")
    for off in (0, 1, 0, 1):
        a = base[off:off + 200 * 12 * 64].view(200, 12, 64)
        assert rel_error(fg.bmm_tiny(a, b), oracle(a, b)) <= TOL[torch.float32]
    at = torch.randn(200, 64, 12, device="cuda").transpose(1, 2)
    assert rel_error(fg.bmm_tiny(at, b), oracle(at, b)) <= TOL[torch.float32]
    with pytest.raises(ValueError, match="must be on one device"):
        fg.bmm_tiny(a, b.cpu())  # CPU tensors alone run the torch reference; mixing devices is an error


def test_bench_kernel_time_counts_each_call_once():
    """bench.common.kernel_us finds every fenced call in the profile and times only its own kernels: never more
    than the event time of the same call (which adds the event pair's fixed cost)."""
    from fusedgemm.bench.common import Timer, kernel_us

    timer = Timer(reps=10)
    a, b = torch.randn(4096, 16, 16, device="cuda"), torch.randn(4096, 16, 16, device="cuda")
    for fn in (lambda: torch.bmm(a, b), lambda: fg.bmm_tiny(a, b)):
        k = kernel_us(fn, timer, reps=10)
        assert 0 < k < timer(fn)


def test_eager_fast_path_relaunches_only_matching_calls(seed):
    """Repeat calls of one signature reuse a bound launch (tiny_bmm._FAST); a change of shape, strides,
    dtype, broadcast or 16-byte alignment is a different signature, planned afresh. Every call is checked
    against the oracle on fresh data."""
    from fusedgemm import tiny_bmm

    tiny_bmm._FAST.clear()
    base = torch.randn(300 * 12 * 64 + 4, device="cuda")
    for _ in range(3):  # same signature: one entry, fresh data each time
        base.normal_()
        a = base[:300 * 12 * 64].view(300, 12, 64)
        b = torch.randn(300, 64, 12, device="cuda")
        assert rel_error(fg.bmm_tiny(a, b), oracle(a, b)) <= TOL[torch.float32]
    assert len(tiny_bmm._FAST) == 1
    variants = [base[1:1 + 300 * 12 * 64].view(300, 12, 64),            # 4-byte aligned only
                torch.randn(300, 64, 12, device="cuda").transpose(1, 2),  # strided A
                torch.randn(300, 12, 64, device="cuda", dtype=torch.bfloat16)]
    for x in variants:
        y = torch.randn(300, 64, 12, device="cuda", dtype=x.dtype)
        for _ in range(2):
            assert rel_error(fg.bmm_tiny(x, y), oracle(x, y)) <= TOL[x.dtype]
    w = torch.randn(64, 12, device="cuda")  # broadcast B, then the same B as one batched operand
    assert rel_error(fg.bmm_tiny(a, w), oracle(a, w)) <= TOL[torch.float32]
    assert rel_error(fg.bmm_tiny(a, w.expand(300, 64, 12)), oracle(a, w)) <= TOL[torch.float32]
    assert len(tiny_bmm._FAST) == 6
