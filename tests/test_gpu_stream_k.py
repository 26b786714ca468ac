"""Stream-K on the persistent sm_90a kernel with seven epilogue warps (ks128n128, gemm_a8_sm90_stream_k.hpp) against the
float64 oracle: tiles split into many pieces, mixed with whole tiles, repeated calls (the flags must be back at 0),
two streams at once, and a graph capture (which runs without stream-K). Outputs are poisoned first."""
import math

import pytest
import torch

import fusedgemm as fg
from fusedgemm.plan import forced_config, stream_k
from fusedgemm.reference import gemm_a8_reference, rel_error
from fusedgemm.runtime import workspace

pytestmark = pytest.mark.gpu
ONE_ROUNDING_BF16 = 2.0 ** -8
SMS = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 132


def sm90():
    from fusedgemm.runtime.arch import device_arch

    if device_arch(torch.cuda.current_device()) != "sm_90a":
        pytest.skip("stream-K runs on the sm_90a persistent kernels")


def problem(kind, m, n, k):
    if kind == "int8":
        a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda")
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda")
        base = 1.0 / (127.0 * 127.0 * math.sqrt(k) / 3.0)
    else:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        base = 1.0 / math.sqrt(k)
    sa = (torch.rand(m, device="cuda") + 0.5) * base
    sb = torch.rand(n, device="cuda") + 0.5
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    return a, w, bias, sa, sb


def gemm(a, wq, bias, sa, sb):
    out = torch.full((a.shape[0], wq.shape[0]), float("nan"), dtype=torch.bfloat16, device="cuda")
    return fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)


def oracle_error(got, a, w, bias, sa, sb):
    ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=torch.bfloat16,
                            unrounded=True)
    assert not torch.isnan(got).any(), "unwritten (poisoned) output elements remain"
    return rel_error(got, ref)


# (M, N, K): 4 tiles of 32 K blocks in 8 pieces each (32 CTAs); 8 ragged tiles in 2 pieces, a partial last K block;
# 153 tiles (a wave of whole tiles, then 21 in 2 pieces); 16 x 17 = 272 tiles (two waves, then 8 in 2 pieces); 153
# tiles with the last 21 in 4 pieces of 4-5 K blocks, a partial last K block.
SHAPES = [(200, 144, 4096), (130, 400, 1040), (2100, 1040, 1024), (2000, 2064, 1040), (2100, 1040, 2096)]


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_stream_k_against_the_oracle(kind, seed):
    sm90()
    with forced_config("ks128n128"):
        for m, n, k in SHAPES:
            tiles = -(-m // 128) * -(-n // 128)
            sk_tiles, _grid, _sk_ctas = stream_k.split(tiles, -(-k // 128), SMS)
            assert sk_tiles, (m, n, k)  # each shape exercises the split
            a, w, bias, sa, sb = problem(kind, m, n, k)
            wq = fg.preshuffle(w)
            got = gemm(a, wq, bias, sa, sb)
            err = oracle_error(got, a, w, bias, sa, sb)
            assert err <= ONE_ROUNDING_BF16, (m, n, k, err)
            for _ in range(3):  # deterministic (fixed order of the pieces), and the flags were left at 0
                assert torch.equal(gemm(a, wq, bias, sa, sb), got), (m, n, k)
    torch.cuda.synchronize()
    buf = workspace._BUFFERS[(torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream)]
    assert not buf[: 4 * stream_k.MAX_CTAS].any(), "a flag was left set"


def test_stream_k_on_two_streams_at_once(seed):
    """Each stream has its own workspace: two split launches in flight at once do not share flags or slots."""
    sm90()
    probs = [problem(kind, 200, 144, 4096) for kind in ("fp8", "int8")] * 2
    streams = [torch.cuda.Stream() for _ in probs]
    outs = []
    with forced_config("ks128n128"):
        for (a, w, bias, sa, sb), s in zip(probs, streams):
            wq = fg.preshuffle(w)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                outs.append([gemm(a, wq, bias, sa, sb) for _ in range(4)])
    torch.cuda.synchronize()
    for (a, w, bias, sa, sb), ys in zip(probs, outs):
        assert oracle_error(ys[0], a, w, bias, sa, sb) <= ONE_ROUNDING_BF16
        assert all(torch.equal(y, ys[0]) for y in ys)


def test_graph_capture_runs_without_stream_k(seed):
    """Under capture no workspace is bound (a graph may replay beside eager launches): the launch takes every tile
    whole on the same grid, and the replays are right."""
    sm90()
    m, n, k = 200, 144, 4096
    a, w, bias, sa, sb = problem("fp8", m, n, k)
    wq = fg.preshuffle(w)
    static_a = a.clone()
    side = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with forced_config("ks128n128"):
        eager = gemm(a, wq, bias, sa, sb)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.graph(g, stream=side):
            static_out = fg.gemm_a8(static_a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    for _ in range(5):
        new_a, *_ = problem("fp8", m, n, k)
        static_a.copy_(new_a)
        g.replay()
        torch.cuda.synchronize()
        assert oracle_error(static_out, new_a, w, bias, sa, sb) <= ONE_ROUNDING_BF16
    assert oracle_error(eager, a, w, bias, sa, sb) <= ONE_ROUNDING_BF16


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_stream_k_matmul_fused(dtype, seed):
    """The 16-bit kinds on the same kernels (fp32 sums in the slots), fp32 out: each element within fp32
    accumulation's bound of the float64 product (a lost or doubled piece is ~100x the bound)."""
    sm90()
    m, n, k = 300, 400, 2000
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    w = (torch.randn(n, k, device="cuda") / math.sqrt(k)).to(dtype)
    ref = a.double() @ w.double().T
    bound = 2.0 ** -16 * (a.double().abs() @ w.double().abs().T) + 1e-6
    with forced_config("ks128n128"):
        out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
        got = fg.matmul_fused(a, w, out=out)
        again = fg.matmul_fused(a, w, out_dtype=torch.float32)
    assert not torch.isnan(got).any()
    assert ((got.double() - ref).abs() <= bound).all()
    assert torch.equal(again, got)
