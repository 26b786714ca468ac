"""gemm_a8 on a GPU against the float64 oracle (skipped without a GPU; run on an H100/H200 or MI300X)."""
import math

import pytest
import torch

import fusedgemm as fg
from fusedgemm.bench.gemm_a8 import ACTS
from fusedgemm.gemm_a8 import plans
from fusedgemm.reference import gemm_a8_reference, rel_error
from fusedgemm.runtime import kernels

pytestmark = pytest.mark.gpu

OUT_DTYPES = [torch.bfloat16, torch.float16]
# Norm-relative error of one rounding to the output type is at most half an ulp: 2^-8 (bf16), 2^-11 (fp16).
ONE_ROUNDING = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def arch():
    from fusedgemm.runtime.arch import device_arch

    return device_arch(torch.cuda.current_device())


def in_dtype(kind):
    return torch.int8 if kind == "int8" else fg.FP8_DTYPE_FOR_ARCH[arch()]


def make_problem(kind, m, n, k, *, epilogue="bias_silu", out_dtype=torch.bfloat16, scalar_scales=False,
                 bias_dtype=None):
    """Fresh random inputs scaled so outputs are O(1) (activations see both signs)."""
    dev = "cuda"
    dtype = in_dtype(kind)
    if dtype == torch.int8:
        a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device=dev)
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device=dev)
        base = 1.0 / (127.0 * 127.0 * math.sqrt(k) / 3.0)
    else:
        a = torch.randn(m, k, device=dev).to(dtype)
        w = torch.randn(n, k, device=dev).to(dtype)
        base = 1.0 / math.sqrt(k)
    if scalar_scales:
        sa, sb = torch.tensor([base * 1.5], device=dev), 2.0 / 3.0
    else:
        sa = (torch.rand(m, device=dev) + 0.5) * base
        sb = torch.rand(n, device=dev) + 0.5
    uses_bias = epilogue.startswith("bias")
    bias = torch.randn(n, device=dev).to(bias_dtype or out_dtype) if uses_bias else None
    return a, w, bias, sa, sb


def run_and_check(kind, m, n, k, epilogue="bias_silu", out_dtype=torch.bfloat16, **kw):
    a, w, bias, sa, sb = make_problem(kind, m, n, k, epilogue=epilogue, out_dtype=out_dtype, **kw)
    wq = fg.preshuffle(w)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")  # poisoned
    got = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue=epilogue, out_dtype=out_dtype, out=out)
    torch.cuda.synchronize()
    assert got is out
    ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue=epilogue, out_dtype=out_dtype, unrounded=True)
    assert not torch.isnan(got).any(), "unwritten (poisoned) output elements remain"
    err = rel_error(got, ref)
    return err, (a, w, wq, bias, sa, sb, got, ref)


def blas_plus_epilogue(a, w, bias, sa, sb, epilogue, out_dtype):
    """What users run today: a vendor GEMM rounding its output, then separate bias and activation kernels.
    fp8: torch._scaled_mm with row-wise scales (cuBLASLt supports those with bf16 output only, so fp16 output
    is converted from that); int8: torch._int_mm, then the scales in fp32, rounded to out_dtype."""
    act = "none" if epilogue == "bias" else epilogue.replace("bias_", "")
    if a.dtype == torch.int8:
        y = (torch._int_mm(a, w.T).float() * sa[:, None] * sb[None, :]).to(out_dtype)
    else:
        y = torch._scaled_mm(a, w.T, scale_a=sa.reshape(-1, 1), scale_b=sb.reshape(1, -1),
                             out_dtype=torch.bfloat16).to(out_dtype)
    if bias is not None:
        y = y + bias.to(out_dtype)
    return ACTS[act](y)


@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("epilogue", fg.EPILOGUES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_every_dtype_epilogue_out_dtype(kind, epilogue, out_dtype, seed):
    err, _ = run_and_check(kind, 33, 48 * 4, 512, epilogue=epilogue, out_dtype=out_dtype)
    assert err <= ONE_ROUNDING[out_dtype], err
    print(f"rel_err {kind} {epilogue} {out_dtype}: {err:.3e}")


@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("m", [1, 7, 33, 1000])
@pytest.mark.parametrize("n", [16, 48, 1040])
def test_ragged_m_and_n(kind, m, n, seed):
    err, _ = run_and_check(kind, m, n, 256)
    assert err <= ONE_ROUNDING[torch.bfloat16], err


@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("k", [16, 32, 48, 96, 4096, 16384])
@pytest.mark.parametrize("m", [5, 130])
def test_k_range(kind, k, m, seed):
    err, _ = run_and_check(kind, m, 96, k, epilogue="bias_gelu")
    assert err <= ONE_ROUNDING[torch.bfloat16], err


# (1700, 272, 64): 9 to 27 row blocks per config, with ragged rows and columns; (1700, 2064, 208): more than one wave
# of CTAs for every CTA-per-tile config.
PLAN_SHAPES = [(1, 400, 1040), (37, 1040, 16), (130, 400, 1040), (200, 144, 4096), (1700, 272, 64),
               (1700, 2064, 208)]


@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("plan", sorted({p for a in ("sm_90a", "gfx942") for p in plans(a)}),
                         ids=lambda p: f"{p[0]}-s{p[1]}")
def test_every_plan_against_the_oracle(kind, plan, seed):
    """Each tile config x split-K factor on ragged M / N (not multiples of the tile) and K (a partial last
    K block; K = 16 leaves most split-K ranks without a K block). Split-K results are deterministic."""
    from fusedgemm.gemm_a8 import forced_config

    if plan not in plans(arch()) and kernels.GEMM_CONFIGS[plan[0]].unit != "portable_gemm":
        pytest.skip(f"{plan} is not built for {arch()}")
    with forced_config(*plan):
        for m, n, k in PLAN_SHAPES:
            err, (a, w, wq, bias, sa, sb, got, ref) = run_and_check(kind, m, n, k)
            assert err <= ONE_ROUNDING[torch.bfloat16], (m, n, k, err)
            again = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
            assert torch.equal(again, got), (m, n, k)


@pytest.mark.parametrize("m,n,k", [(128, 1024, 5120), (300, 1040, 16384), (512, 1024, 5120), (97, 2576, 8192)])
def test_fp8_few_tile_plans_by_the_heuristic(m, n, k, seed):
    """The plan's own choice (tile_64x128 with split-K at M > 64 when 128 x 128 tiles are few) on ragged shapes."""
    from fusedgemm.gemm_a8 import _choose_config

    if arch() != "sm_90a":
        pytest.skip("sm_90a plan")
    assert _choose_config(m, n, k, "sm_90a", 132, in_kind="fp8")[0].name == "tile_64x128"
    err, _ = run_and_check("fp8", m, n, k)
    assert err <= ONE_ROUNDING[torch.bfloat16], err


@pytest.mark.parametrize("config", ["swap_16x128", "tile_64x128", "tile_128x128", "tile_192x128", "persistent_128x128", "pair_persistent_128x128",
                                    "persistent_128x128_epi7_1chain", "persistent_128x128_epi7"])
def test_grouped_tile_order_for_weights_larger_than_l2(config, seed):
    """Weights over 48 MiB take tiles in groups of 8 row blocks (tile_of_block in sm90_gemm.hpp): every
    tile is computed once, including the ragged last group and ragged last column tile."""
    from fusedgemm.gemm_a8 import forced_config

    if arch() != "sm_90a":
        pytest.skip("sm_90a tile order")
    m, n, k = 1700, 6160, 8192  # N x K = 50.5 MB > 48 MiB; 9-27 row blocks; N % 128 = 16
    with forced_config(config, 1):
        err, _ = run_and_check("fp8", m, n, k)
    assert err <= ONE_ROUNDING[torch.bfloat16], err


@pytest.mark.parametrize("bias_dtype", [torch.float32, None])
@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_scalar_scales_and_fp32_bias(kind, bias_dtype, seed):
    err, _ = run_and_check(kind, 20, 64, 128, epilogue="bias_relu", scalar_scales=True, bias_dtype=bias_dtype)
    assert err <= ONE_ROUNDING[torch.bfloat16], err


def test_no_scales_means_one(seed):
    a, w, *_ = make_problem("fp8", 9, 32, 64)
    got = fg.gemm_a8(a, fg.preshuffle(w), epilogue="none")
    ref = gemm_a8_reference(a, w, epilogue="none", unrounded=True)
    assert rel_error(got, ref) <= ONE_ROUNDING[torch.bfloat16]


@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("epilogue", ["bias_silu", "bias_gelu", "bias_relu", "bias"])
def test_error_no_worse_than_blas_plus_epilogue(kind, out_dtype, epilogue, seed):
    m = 64  # _int_mm needs M > 16
    err, (a, w, wq, bias, sa, sb, got, ref) = run_and_check(kind, m, 256, 1024, epilogue=epilogue,
                                                            out_dtype=out_dtype)
    base = rel_error(blas_plus_epilogue(a, w, bias, sa, sb, epilogue, out_dtype), ref)
    print(f"{kind} {epilogue} {out_dtype}: fused {err:.3e}  blas+epilogue {base:.3e}")
    assert err <= base * 1.02, (err, base)


def test_out_into_a_slice_detects_writes_past_the_end(seed):
    m, n, k = 37, 1040, 128
    a, w, bias, sa, sb = make_problem("fp8", m, n, k)
    guard = 4096
    buf = torch.full((guard + m * n + guard,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = buf[guard: guard + m * n].view(m, n)
    fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)
    torch.cuda.synchronize()
    assert torch.isnan(buf[:guard]).all() and torch.isnan(buf[guard + m * n:]).all(), "wrote outside out"
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("config", ["tile_128x128", "persistent_128x128", "pair_persistent_128x128", "persistent_128x128_epi7"])
def test_two_chain_groups_for_every_k_block_count(config, seed):
    """fp8 with two partial tiles runs its K blocks in unrolled groups of 8, then 4, 2 and 1 (consumer_mainloop):
    K block counts that leave every combination of the remainder groups, with and without a partial last K
    block, against the oracle."""
    from fusedgemm.gemm_a8 import forced_config

    if arch() != "sm_90a":
        pytest.skip("sm_90a two-chain configs")
    with forced_config(config, 1):
        for blocks in (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 14, 15, 16, 23, 31):
            for k in (128 * blocks, 128 * blocks - 48):
                err, _ = run_and_check("fp8", 300, 400, k)
                assert err <= ONE_ROUNDING[torch.bfloat16], (blocks, k, err)


@pytest.mark.parametrize("config, m", [("persistent_128x128", 2000), ("persistent_128x128_epi7_1chain", 2000), ("persistent_128x128_epi7", 2000),
                                       ("pair_persistent_128x128", 2000), ("pair_persistent_128x128", 1900)])
@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("scalar_scales", [False, True])
def test_persistent_ctas_loop_over_tiles(config, m, kind, scalar_scales, seed):
    """persistent_128x128 (and persistent_128x128_epi7_1chain / persistent_128x128_epi7: seven epilogue warps, so rows are dealt unevenly) with more tiles than
    SMs (16 x 17 = 272: each CTA takes 2-3, so the parked tile, its barriers' phases and the staged row and column
    operands are reused; the last tile's rows go to the consumer warps too), ragged M and N, a partial last K
    block, and an output that is only 4-byte aligned (the epilogue warps' 8-byte stores become two 4-byte ones); nothing is
    written outside it. pair_persistent_128x128 (B-multicast pairs) also with an odd number of row blocks (M = 1900: 15), whose
    last pair's second CTA has no rows."""
    from fusedgemm.gemm_a8 import forced_config

    if arch() != "sm_90a":
        pytest.skip("sm_90a persistent kernel")
    n, k = 2064, 1040
    a, w, bias, sa, sb = make_problem(kind, m, n, k, scalar_scales=scalar_scales)
    guard = 4098  # an odd number of 4-byte words: out starts 4-byte but not 8-byte aligned
    buf = torch.full((guard + m * n + guard,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = buf[guard: guard + m * n].view(m, n)
    with forced_config(config, 1):
        got = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)
        torch.cuda.synchronize()
        assert torch.isnan(buf[:guard]).all() and torch.isnan(buf[guard + m * n:]).all(), "wrote outside out"
        aligned = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    assert not torch.isnan(got).any(), "unwritten (poisoned) output elements remain"
    ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=torch.bfloat16,
                            unrounded=True)
    assert rel_error(got, ref) <= ONE_ROUNDING[torch.bfloat16]
    assert torch.equal(aligned, got)


@pytest.mark.parametrize("config", ["persistent_128x128", "persistent_128x128_epi7", "tile_128x128"])
def test_fp8_output_four_codes_one_store_or_pairs(config, seed):
    """1-byte outputs: a thread's four codes of a row are one 4-byte store where the address allows (epilogue.hpp
    store_row), else two pair stores (an output 2 bytes off a 4-byte boundary, row stride odd in words); both equal
    the same kernel's fp32 output converted to fp8, and nothing is written outside the output."""
    from fusedgemm.gemm_a8 import forced_config

    if arch() != "sm_90a":
        pytest.skip("sm_90a wgmma configs")
    fp8 = fg.FP8_DTYPE_FOR_ARCH[arch()]
    m, n, k = 1100, 2064, 384  # more 128 x 128 tiles than SMs: the persistent CTAs take several
    a, w, bias, sa, sb = make_problem("fp8", m, n, k, bias_dtype=torch.float32)
    wq = fg.preshuffle(w)
    guard, ld = 4098, n + 2
    buf = torch.full((guard + m * ld + guard,), 0x7F, dtype=torch.uint8, device="cuda")  # 0x7F: NaN in e4m3fn
    with forced_config(config, 1):
        y32 = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=torch.float32)
        aligned = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=fp8)
        out = buf[guard: guard + m * ld].view(m, ld)[:, :n].view(fp8)
        fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=fp8, out=out)
        torch.cuda.synchronize()
    assert (buf[:guard] == 0x7F).all() and (buf[guard + m * ld:] == 0x7F).all(), "wrote outside out"
    assert (buf[guard: guard + m * ld].view(m, ld)[:, n:] == 0x7F).all(), "wrote into the row padding"
    want = y32.to(fp8).view(torch.uint8)
    for got in (aligned, out):
        differ = (got.view(torch.uint8) != want).float().mean().item()
        assert differ < 1e-3, f"{differ:.2%} of the codes differ from the fp32 output's (FMA contraction aside)"
    assert torch.equal(aligned.view(torch.uint8), out.view(torch.uint8))


def test_empty_m_and_deterministic(seed):
    a, w, bias, sa, sb = make_problem("fp8", 0, 64, 64)
    y = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    assert y.shape == (0, 64)
    a, w, bias, sa, sb = make_problem("fp8", 70, 128, 512)
    wq = fg.preshuffle(w)
    y1 = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    y2 = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    assert torch.equal(y1, y2)


def test_graph_capture_on_side_stream_100_replays(seed):
    m, n, k = 24, 256, 512
    a, w, bias, sa, sb = make_problem("fp8", m, n, k)
    wq = fg.preshuffle(w)
    static_a, static_sa = a.clone(), sa.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fg.gemm_a8(static_a, wq, bias, scale_a=static_sa, scale_b=sb, epilogue="bias_silu")  # warm-up / load
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        static_out = fg.gemm_a8(static_a, wq, bias, scale_a=static_sa, scale_b=sb, epilogue="bias_silu")
    for _ in range(100):
        new_a, _, _, new_sa, _ = make_problem("fp8", m, n, k)
        static_a.copy_(new_a)
        static_sa.copy_(new_sa)
        g.replay()
        eager = fg.gemm_a8(new_a, wq, bias, scale_a=new_sa, scale_b=sb, epilogue="bias_silu")
        assert torch.equal(static_out, eager)


def test_two_streams_at_once(seed):
    probs = [make_problem(kind, 300, 1024, 2048) for kind in ("fp8", "int8")]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = []
    for (a, w, bias, sa, sb), s in zip(probs, streams):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            outs.append(fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu"))
    torch.cuda.synchronize()
    for (a, w, bias, sa, sb), y in zip(probs, outs):
        ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", unrounded=True)
        assert rel_error(y, ref) <= ONE_ROUNDING[torch.bfloat16]


def test_torch_compile_traces_the_op(seed):
    a, w, bias, sa, sb = make_problem("fp8", 16, 128, 256)
    wq = fg.preshuffle(w)

    def f(x, s):
        return fg.gemm_a8(x, wq, bias, scale_a=s, scale_b=sb, epilogue="bias_silu") * 2

    compiled = torch.compile(f, fullgraph=True)
    assert torch.equal(compiled(a, sa), f(a, sa))


def test_wrong_fp8_variant_on_this_device():
    other = torch.float8_e4m3fnuz if fg.FP8_DTYPE_FOR_ARCH[arch()] == torch.float8_e4m3fn else torch.float8_e4m3fn
    a = torch.randn(16, 64, device="cuda").to(other)
    wq = fg.preshuffle(torch.randn(32, 64, device="cuda").to(other))
    with pytest.raises(TypeError, match="needs fp8 as"):
        fg.gemm_a8(a, wq)
