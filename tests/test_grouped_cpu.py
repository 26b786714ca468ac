"""The grouped ops on CPU tensors: the float64 reference per group (what every GPU and emulator test compares with),
both layouts, operands per expert and per row, and every bad input with a message naming it."""
import pytest
import torch
import torch.nn.functional as F

import fusedgemm as fg
from fusedgemm.grouped import interleave_groups

SIZES = (3, 0, 5, 1)


def offs_of(sizes):
    return torch.tensor(sizes).cumsum(0).to(torch.int32)


def per_group(x, w, sizes, fn):
    out, r0 = [], 0
    for g, s in enumerate(sizes):
        out.append(fn(x[r0:r0 + s].double() @ w[g].double().T, g, slice(r0, r0 + s)))
        r0 += s
    return torch.cat(out)


def test_reference_contiguous_bias_act_and_routing_weight():
    g, n, k = len(SIZES), 16, 32
    x = torch.randn(sum(SIZES), k)
    w = torch.randn(g, n, k)
    bias = torch.randn(g, n)
    y = fg.grouped_matmul(x, w, offs=offs_of(SIZES), bias=bias, activation="gelu_erf")
    assert y.dtype == torch.float32 and y.shape == (9, n)
    torch.testing.assert_close(y.double(), per_group(x, w, SIZES, lambda a, gi, _r: F.gelu(a + bias[gi].double())))
    rw = torch.rand(9)
    y = fg.grouped_matmul(x.bfloat16(), w.bfloat16(), offs=offs_of(SIZES), epilogue="acc * m_vec(rw)",
                          operands={"rw": rw}, out_dtype=torch.float32)
    ref = per_group(x.bfloat16(), w.bfloat16(), SIZES, lambda a, _g, r: a * rw[r].double()[:, None])
    torch.testing.assert_close(y.double(), ref, rtol=1e-6, atol=1e-6)


def test_shared_vector_and_aux_operands():
    """An [N] bias is every expert's; aux operands are [M, N]."""
    g, n, k = len(SIZES), 8, 16
    x, w = torch.randn(9, k), torch.randn(g, n, k)
    b, res = torch.randn(n), torch.randn(9, n)
    y = fg.grouped_matmul(x, w, offs=offs_of(SIZES), epilogue="acc + n_vec(b) + aux(res)", operands={"b": b, "res": res})
    torch.testing.assert_close(y.double(), per_group(x, w, SIZES, lambda a, _g, r: a + b.double() + res[r].double()))


def test_masked_layout_leaves_unused_rows():
    g, mmax, n, k = 3, 4, 8, 16
    x, w = torch.randn(g, mmax, k), torch.randn(g, n, k)
    used = torch.tensor([4, 0, 2], dtype=torch.int32)
    out = torch.full((g, mmax, n), 7.0)
    y = fg.grouped_matmul(x, w, masked_m=used, out=out)
    assert y is out
    for gi, u in enumerate(used.tolist()):
        torch.testing.assert_close(out[gi, :u].double(), x[gi, :u].double() @ w[gi].double().T)
        assert (out[gi, u:] == 7.0).all()


def test_a8_scales_per_token_and_per_expert():
    g, n, k = len(SIZES), 16, 32
    x8 = torch.randn(9, k).to(torch.float8_e4m3fn)
    w8 = torch.randn(g, n, k).to(torch.float8_e4m3fn)
    sa, se = torch.rand(9), torch.rand(g)
    y = fg.grouped_gemm_a8(x8, fg.preshuffle(w8), scale_a=sa, scale_b=se, offs=offs_of(SIZES), epilogue="silu",
                           out_dtype=torch.float32)
    ref = per_group(x8, w8, SIZES, lambda a, gi, r: F.silu(a * sa[r].double()[:, None] * float(se[gi])))
    torch.testing.assert_close(y.double(), ref, rtol=1e-6, atol=1e-6)


def test_swiglu_16_and_8_bit():
    g, i, k = len(SIZES), 8, 32
    x = torch.randn(9, k)
    wgu = torch.randn(g, 2 * i, k)
    h = fg.grouped_swiglu(x.bfloat16(), wgu.bfloat16(), offs=offs_of(SIZES), out_dtype=torch.float32)
    ref = per_group(x.bfloat16(), wgu.bfloat16(), SIZES, lambda a, _g, _r: F.silu(a[:, :i]) * a[:, i:])
    torch.testing.assert_close(h.double(), ref, rtol=1e-6, atol=1e-6)
    x8, w8 = x.to(torch.float8_e4m3fn), wgu.to(torch.float8_e4m3fn)
    h8 = fg.grouped_swiglu(x8, w8, offs=offs_of(SIZES), scale_b=0.5, out_dtype=torch.float32)
    ref8 = per_group(x8, w8, SIZES, lambda a, _g, _r: F.silu(a[:, :i] * 0.5) * a[:, i:] * 0.5)
    torch.testing.assert_close(h8.double(), ref8, rtol=1e-6, atol=1e-6)
    assert torch.equal(interleave_groups(wgu)[:, 0::2], wgu[:, :i]) and torch.equal(interleave_groups(wgu)[:, 1::2],
                                                                                    wgu[:, i:])


@pytest.mark.parametrize("call,match", [
    (lambda x, w, o: fg.grouped_matmul(x, w), "exactly one of offs"),
    (lambda x, w, o: fg.grouped_matmul(x, w, offs=o, masked_m=o), "exactly one of offs"),
    (lambda x, w, o: fg.grouped_matmul(x, w, offs=o.long()), "int32 of shape"),
    (lambda x, w, o: fg.grouped_matmul(x, w, offs=o[:3]), r"int32 of shape \[G=4\]"),
    (lambda x, w, o: fg.grouped_matmul(x, w, offs=torch.tensor([3, 2, 8, 9], dtype=torch.int32)), "non-decreasing"),
    (lambda x, w, o: fg.grouped_matmul(x, w, offs=torch.tensor([3, 3, 8, 8], dtype=torch.int32)), "end at M=9"),
    (lambda x, w, o: fg.grouped_matmul(x, w, masked_m=o), r"\[G=4, Mmax, K\]"),
    (lambda x, w, o: fg.grouped_matmul(x.view(1, 9, 32).expand(4, 9, 32), w,
                                       masked_m=torch.tensor([1, 10, 0, 0], dtype=torch.int32)), "outside"),
    (lambda x, w, o: fg.grouped_matmul(x, w[:, :, :16], offs=o), "K must agree"),
    (lambda x, w, o: fg.grouped_matmul(x, w.half(), offs=o), "must match"),
    (lambda x, w, o: fg.grouped_matmul(x, w[0], offs=o), r"\[G, N, K\]"),
    (lambda x, w, o: fg.grouped_matmul(x, w[:, :12], offs=o), "N % 8"),
    (lambda x, w, o: fg.grouped_matmul(x, w, offs=o, bias=torch.randn(3, 16)), r"\[G=4, N=16\]"),
    (lambda x, w, o: fg.grouped_matmul(x, w, offs=o, epilogue="acc * m_vec(r)", operands={"r": torch.rand(8)}),
     r"m_vec\(r\) must be \[9\]"),
    (lambda x, w, o: fg.grouped_matmul(x, w, offs=o, expected_m=-1), "expected_m"),
    (lambda x, w, o: fg.grouped_matmul(x.to(torch.float8_e4m3fn), w, offs=o), "grouped_gemm_a8"),
    (lambda x, w, o: fg.grouped_gemm_a8(x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), offs=o), "preshuffle"),
    (lambda x, w, o: fg.grouped_gemm_a8(x.to(torch.float8_e4m3fn), fg.preshuffle(w[0].to(torch.float8_e4m3fn)),
                                        offs=o), r"one \[N, K\] weight"),
    (lambda x, w, o: fg.grouped_gemm_a8(x.to(torch.int8), fg.preshuffle(w.to(torch.float8_e4m3fn)), offs=o),
     "must match"),
    (lambda x, w, o: fg.grouped_gemm_a8(x.to(torch.float8_e4m3fn), fg.preshuffle(w.to(torch.float8_e4m3fn)), offs=o,
                                        scale_b=torch.rand(4, 16, dtype=torch.float64)), "float32"),
    (lambda x, w, o: fg.grouped_gemm_a8(x.to(torch.float8_e4m3fn), fg.preshuffle(w.to(torch.float8_e4m3fn)), offs=o,
                                        epilogue="bias_silu"), "bias is None"),
    (lambda x, w, o: fg.grouped_swiglu(x, w[:, :15], offs=o), r"\[G, 2I, K\]"),
    (lambda x, w, o: fg.grouped_swiglu(x, w, offs=o, activation="swish"), "activation"),
    (lambda x, w, o: fg.grouped_swiglu(x, w, offs=o, scale_b=2.0), "8-bit"),
])
def test_bad_input(call, match):
    x, w = torch.randn(9, 32), torch.randn(4, 16, 32)
    with pytest.raises((ValueError, TypeError)) as info:
        call(x, w, offs_of(SIZES))
    assert info.match(match)


def test_not_differentiable():
    x = torch.randn(9, 32, requires_grad=True)
    with pytest.raises(NotImplementedError, match="no_grad"):
        fg.grouped_matmul(x, torch.randn(4, 16, 32), offs=offs_of(SIZES))
    with torch.no_grad():
        fg.grouped_matmul(x, torch.randn(4, 16, 32), offs=offs_of(SIZES))


@pytest.mark.parametrize("layout", ["offs", "masked"])
def test_torch_compile_traces_one_op(layout):
    """torch.compile (fullgraph, through the fake implementation) traces the grouped ops as fusedgemm::grouped_gemm;
    the compiled MoE-style function gives what eager gives."""
    g, i, k, n = 4, 8, 32, 16
    wgu, wd = torch.randn(g, 2 * i, k), torch.randn(g, n, i)
    w8 = torch.randn(g, n, k).to(torch.float8_e4m3fn)
    wq = fg.preshuffle(w8)
    if layout == "offs":
        x, where = torch.randn(9, k), dict(offs=offs_of(SIZES))
    else:
        x, where = torch.randn(g, 5, k), dict(masked_m=torch.tensor([5, 0, 2, 1], dtype=torch.int32))
    rw = torch.rand(x.shape[:-1])

    def layer(x, rw):
        h = fg.grouped_swiglu(x, wgu, **where)
        y = fg.grouped_matmul(h, wd, epilogue="acc * m_vec(rw)", operands={"rw": rw}, **where)
        y8 = fg.grouped_gemm_a8(x.to(torch.float8_e4m3fn), wq, scale_b=0.5, epilogue="relu", **where)
        return y, y8

    import fusedgemm.grouped as grouped

    made = []
    real = grouped.interleave_groups
    grouped.interleave_groups = lambda w_: made.append(1) or real(w_)
    try:
        torch._dynamo.reset()
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
        got, want = compiled(x, rw), layer(x, rw)
        compiled(x, rw)
    finally:
        grouped.interleave_groups = real
    assert len(made) == 1  # the gate/up interleave: once, cached on the weight -- not a copy per call in the graph
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        if layout == "masked":  # rows past masked_m are not written: compare the used ones
            a, b = a[0, :5], b[0, :5]
        torch.testing.assert_close(a, b)


def test_m_indices_layout_reference_and_checks():
    """DeepGEMM's m_indices: each row's expert or -1; experts' rows at multiples of 128, padding after them, never
    written; the layout's value checks name the row."""
    g, n, k = 3, 8, 16
    idx = torch.tensor([0] * 3 + [-1] * 125 + [2] * 128 + [2] * 7 + [-1] * 121, dtype=torch.int32)
    x, w = torch.randn(384, k), torch.randn(g, n, k)
    out = torch.full((384, n), 5.0)
    fg.grouped_matmul(x, w, m_indices=idx, out=out)
    for r in range(384):
        if idx[r] >= 0:
            torch.testing.assert_close(out[r].double(), x[r].double() @ w[int(idx[r])].double().T)
        else:
            assert (out[r] == 5.0).all()
    with pytest.raises(ValueError, match="multiple of 128"):
        fg.grouped_matmul(x[:200], w, m_indices=idx[:200])
    with pytest.raises(ValueError, match=r"int32 of shape \[M=384\]"):
        fg.grouped_matmul(x, w, m_indices=idx[:128])
    bad = idx.clone()
    bad[5] = 1  # a second expert inside the first run
    with pytest.raises(ValueError, match="one expert's rows and then -1 padding"):
        fg.grouped_matmul(x, w, m_indices=bad)
    bad = idx.clone()
    bad[0] = 3
    with pytest.raises(ValueError, match=r"outside \[-1, G=3\)"):
        fg.grouped_matmul(x, w, m_indices=bad)
    with pytest.raises(ValueError, match="exactly one of offs"):
        fg.grouped_matmul(x, w, m_indices=idx, offs=torch.tensor([3, 3, 384], dtype=torch.int32))


def test_a8_block_scales_reference():
    """grouped_gemm_a8 with block scales on CPU tensors: each group is the block formula on its rows and its
    expert's 128 x 128 scales; a per-row scale_a beside block scale_b stays in the epilogue; int8 is refused."""
    from fusedgemm.reference import gemm_a8_block_reference

    sizes = (3, 0, 140)
    g, n, k = len(sizes), 144, 304
    offs = offs_of(sizes)
    x8 = torch.randn(143, k).to(torch.float8_e4m3fn)
    w8 = torch.randn(g, n, k).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(143, 3) + 0.5, torch.rand(g, 2, 3)
    y = fg.grouped_gemm_a8(x8, fg.preshuffle(w8), scale_a=sa, scale_b=sb, offs=offs, out_dtype=torch.float32)
    sv = torch.rand(143) + 0.5
    y2 = fg.grouped_gemm_a8(x8, fg.preshuffle(w8), scale_a=sv, scale_b=sb, offs=offs, epilogue="relu",
                            out_dtype=torch.float32)
    r0 = 0
    for e, s in enumerate(sizes):
        if s:
            ref = gemm_a8_block_reference(x8[r0:r0 + s], w8[e], scale_a=sa[r0:r0 + s], scale_b=sb[e], unrounded=True)
            torch.testing.assert_close(y[r0:r0 + s].double(), ref, rtol=1e-6, atol=1e-6)
            ref2 = gemm_a8_block_reference(x8[r0:r0 + s], w8[e], scale_a=sv[r0:r0 + s], scale_b=sb[e],
                                           epilogue="relu", unrounded=True)
            torch.testing.assert_close(y2[r0:r0 + s].double(), ref2, rtol=1e-6, atol=1e-6)
        r0 += s
    with pytest.raises(TypeError, match="block scales are for fp8"):
        fg.grouped_gemm_a8(x8.view(torch.int8), fg.preshuffle(w8.view(torch.int8)), scale_a=sa, offs=offs)

