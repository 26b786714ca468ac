"""Every bad input gets a clear error (checked on CPU tensors with an explicit arch)."""
import pytest
import torch

import numpy as np

import fusedgemm as fg
from fusedgemm.epilogue.presets import spec_for_activation
from fusedgemm.gemm_a8 import check_gemm_a8_args

FP8 = torch.float8_e4m3fn
M, N, K = 8, 32, 64


def make(dtype=FP8, m=M, n=N, k=K):
    a = torch.randn(m, k).to(dtype) if dtype != torch.int8 else torch.randint(-8, 8, (m, k), dtype=torch.int8)
    w = torch.randn(n, k).to(dtype) if dtype != torch.int8 else torch.randint(-8, 8, (n, k), dtype=torch.int8)
    return a, fg.preshuffle(w)


def check(a, b, bias=None, scale_a=None, scale_b=None, epilogue="none", out_dtype=torch.bfloat16, out=None,
          arch="sm_90a"):
    return check_gemm_a8_args(a, b, bias, scale_a, scale_b, epilogue, out_dtype, out, arch=arch)


def test_valid_inputs_pass():
    a, b = make()
    p = check(a, b, torch.randn(N), scale_a=torch.rand(M), scale_b=torch.rand(N), epilogue="bias_silu")
    v = p["values"]
    assert (p["m"], p["n"], p["k"], v["op_scale_a_stride"], v["op_scale_b_stride"]) == (M, N, K, 1, 1)
    assert p["epi"] == spec_for_activation("silu") and v["op_bias_kind"] == 1  # fp32 bias
    p = check(a, b, scale_a=2.0, scale_b=torch.tensor([3.0]), epilogue="gelu")
    v = p["values"]
    assert v["op_alpha"] == 2.0 and v["op_scale_a"] == 0 and v["op_scale_b_stride"] == 0 and v["op_bias"] == 0
    p = check(a, b, scale_a=np.float32(0.5), scale_b=torch.rand(1, N), epilogue="gelu")
    assert p["values"]["op_alpha"] == 0.5 and p["values"]["op_scale_b_stride"] == 1
    assert check(a, b, scale_a=torch.rand(M, 1))["values"]["op_scale_a_stride"] == 1
    a8, b8 = make(torch.int8)
    assert check(a8, b8, arch="gfx942")["in_kind"] == "int8"
    af, bf = make(torch.float8_e4m3fnuz)
    assert check(af, bf, arch="gfx942")["in_kind"] == "fp8"


@pytest.mark.parametrize("bad,match", [
    (dict(epilogue="swish"), "gemm_a8: unknown epilogue 'swish'"),
    (dict(epilogue="bias_relu"), "adds a bias, but bias is None"),
    (dict(bias=torch.randn(N)), "does not use one"),
    (dict(bias=torch.randn(N + 16), epilogue="bias"), r"bias must have shape \[N=32\]"),
    (dict(bias=torch.randn(N, dtype=torch.float64), epilogue="bias"), "bias must be float32 or the out_dtype"),
    (dict(bias=torch.randn(N).half(), epilogue="bias"), "bias must be float32 or the out_dtype"),
    (dict(bias=torch.randn(2 * N)[::2], epilogue="bias"), "bias must be contiguous"),
    (dict(bias=[0.0] * N, epilogue="bias"), "bias must be a tensor"),
    (dict(scale_a=torch.rand(M + 1)), "scale_a must hold 1 or 8 values"),
    (dict(scale_b=torch.rand(M)), "scale_b must hold 1 or 32 values"),
    (dict(scale_b=torch.rand(1, 1, N)), r"scale_b must hold 1 or 32 values as \[32\] or \[1, 32\]"),
    (dict(scale_a=torch.rand(1, M)), r"scale_a must hold 1 or 8 values as \[8\] or \[8, 1\]"),
    (dict(scale_a="2"), "scale_a must be a float32 tensor, a real number or None, got builtins.str"),
    (dict(scale_a=torch.rand(M).double()), "scale_a must be float32"),
    (dict(scale_b=torch.rand(N).half()), "scale_b must be float32"),
    (dict(scale_a=True), "scale_a must be a float32 tensor, a real number or None"),
    (dict(scale_a=torch.rand(2 * M)[::2]), "scale_a must be contiguous"),
    (dict(out_dtype=torch.float64), "out_dtype must be one of torch.bfloat16, torch.float16"),
    (dict(out_dtype=torch.float8_e4m3fnuz), "sm_90a writes fp8 as torch.float8_e4m3fn"),
    (dict(out=torch.empty(M, N, dtype=torch.float16)), "out is torch.float16 but out_dtype is torch.bfloat16"),
    (dict(out=torch.empty(M, N + 16, dtype=torch.bfloat16)), r"out must be \[8, 32\]"),
    (dict(out=torch.empty(N, M, dtype=torch.bfloat16).T), "out must be contiguous"),
    (dict(out=torch.empty(M * N + 1, dtype=torch.bfloat16)[1:].view(M, N)), "out must be 4-byte aligned"),
    (dict(out=torch.empty(M, N, dtype=torch.bfloat16, device="meta")), "out is on meta"),
])
def test_bad_arguments(bad, match):
    a, b = make()
    with pytest.raises((TypeError, ValueError), match=match):
        check(a, b, **bad)


def test_bad_a():
    a, b = make()
    with pytest.raises(TypeError, match="A must be float8_e4m3fn, float8_e4m3fnuz or int8, got torch.bfloat16"):
        check(a.to(torch.bfloat16), b)
    with pytest.raises(TypeError, match="A must be a torch.Tensor"):
        check(a.tolist(), b)
    with pytest.raises(ValueError, match="A must be 2-D"):
        check(a.reshape(2, 4, K), b)
    with pytest.raises(ValueError, match="K must agree"):
        check(torch.randn(M, K + 16).to(FP8), b)
    with pytest.raises(ValueError, match="A must be contiguous"):
        check(torch.randn(K, M).to(FP8).T, b)
    raw = torch.empty(M * K + 8, dtype=torch.uint8)
    misaligned = raw[8:].view(FP8).view(M, K) if raw.data_ptr() % 16 == 0 else raw[:M * K].view(FP8).view(M, K)
    with pytest.raises(ValueError, match="A must be 16-byte aligned"):
        check(misaligned, b)


def test_b_must_be_preshuffled_and_match():
    a, b = make()
    with pytest.raises(TypeError, match="B must be preshuffled: pass fusedgemm.preshuffle"):
        check(a, fg.unshuffle(b))
    with pytest.raises(TypeError, match="B must be a PreshuffledWeight"):
        check(a, "weights")
    _, b8 = make(torch.int8)
    with pytest.raises(TypeError, match="B was preshuffled as torch.int8 but A is torch.float8_e4m3fn"):
        check(a, b8)
    wrong_tag = fg.PreshuffledWeight(b.data)
    object.__setattr__(wrong_tag, "layout", "something-else")
    with pytest.raises(ValueError, match="layout 'something-else'"):
        check(a, wrong_tag)


def test_shape_rules():
    # any N, K >= 1 through preshuffle (it pads; tests/test_unaligned_cpu.py); a tensor wrapped as B by hand
    # must still be a (16, 16) layout
    with pytest.raises(ValueError, match=r"B's stored data \[32, 40\] is not a \(16,16\) preshuffled weight"):
        a = torch.randn(M, 40).to(FP8)
        check(a, fg.PreshuffledWeight(torch.randn(N, 40).to(FP8)))
    a = torch.randn(M, K).to(FP8)
    with pytest.raises(ValueError, match=r"B's stored data \[24, 64\] is not a \(16,16\)"):
        check(a, fg.PreshuffledWeight(torch.randn(24, K).to(FP8)))
    with pytest.raises(ValueError, match="K must be positive, got K=0"):
        check(torch.randn(M, 0).to(FP8), fg.PreshuffledWeight(torch.randn(N, 0).to(FP8)))


def test_fp8_variant_must_match_the_arch():
    a, b = make(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="gfx942 needs fp8 as torch.float8_e4m3fnuz, got torch.float8_e4m3fn"):
        check(a, b, arch="gfx942")
    af, bf = make(torch.float8_e4m3fnuz)
    for arch in ("sm_90a", "gfx950"):
        with pytest.raises(TypeError, match=f"{arch} needs fp8 as torch.float8_e4m3fn, got torch.float8_e4m3fnuz"):
            check(af, bf, arch=arch)


def test_tensors_on_different_devices():
    a, b = make()
    with pytest.raises(ValueError, match="B is on meta, expected cpu"):
        check(a, b.to("meta"))
    with pytest.raises(ValueError, match="scale_a is on meta"):
        check(a, b, scale_a=torch.rand(M, device="meta"))


def test_cpu_tensors_run_the_torch_reference():
    """CPU policy: gemm_a8 on CPU tensors runs the same checks, then the torch reference (tests/test_api_cpu.py
    checks its values); tensors on a device that is neither a GPU nor the CPU are refused."""
    a, b = make()
    y = fg.gemm_a8(a, b)
    assert y.shape == (M, N) and y.dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"tensors must be on a GPU \(cuda/ROCm device\) or the CPU, A is on meta"):
        check(a.to("meta"), fg.PreshuffledWeight(b.data.to("meta")), arch=None)


def test_unsupported_arch_is_named():
    from fusedgemm.runtime.arch import arch_from_properties

    assert arch_from_properties(is_hip=False, major=9, minor=0) == "sm_90a"
    assert arch_from_properties(is_hip=True, gcn_arch_name="gfx942:sramecc+:xnack-") == "gfx942"
    assert arch_from_properties(is_hip=True, gcn_arch_name="gfx950") == "gfx950"
    with pytest.raises(fg.UnsupportedArchError, match=r"NVIDIA A100.*arch sm_80.*supported arches: sm_90a, gfx942, gfx950"):
        arch_from_properties(is_hip=False, major=8, minor=0, device_name="NVIDIA A100")
    with pytest.raises(fg.UnsupportedArchError, match="arch gfx90a"):
        arch_from_properties(is_hip=True, gcn_arch_name="gfx90a:sramecc+:xnack-")


def test_op_is_registered_with_a_fake_implementation():
    """torch.compile sees fusedgemm::gemm_a8 as an ordinary op: its fake implementation gives the output's
    shape and dtype without a GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(5, 64, dtype=FP8)
        b = torch.empty(32, 64, dtype=FP8)
        y = torch.ops.fusedgemm.gemm_a8(a, b, None, None, None, 1.0, "none", torch.float16)
        assert y.shape == (5, 32) and y.dtype == torch.float16
        with pytest.raises(ValueError, match="must agree in K"):
            torch.ops.fusedgemm.gemm_a8(a, torch.empty(32, 48, dtype=FP8), None, None, None, 1.0, "none",
                                        torch.float16)


def test_heuristic_picks_only_plans_the_gpu_tests_run():
    """gemm_a8's config choice stays inside `plans(arch)`, which tests/test_gpu_gemm_a8.py runs one by one."""
    from fusedgemm.gemm_a8 import _choose_config, plans

    for arch_name in ("sm_90a", "gfx942", "gfx950"):
        allowed = set(plans(arch_name))
        for m in (1, 16, 64, 65, 256, 1024, 8192):
            for n, k in ((16, 16), (4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (7168, 2048)):
                cfg, splits = _choose_config(m, n, k, arch_name, 132)
                assert (cfg.name, splits) in allowed, (arch_name, m, n, k, cfg.name, splits)


@pytest.mark.parametrize("m,n,k,kind,want", [
    (128, 1024, 5120, "fp8", ("tile_64x128", 4)), (256, 1024, 16384, "fp8", ("tile_64x128", 4)),  # <= a quarter wave
    (512, 1024, 5120, "fp8", ("tile_64x128", 2)), (128, 4096, 4096, "fp8", ("tile_64x128", 2)),  # CTAs <= 1.25 waves
    (128, 2560, 8192, "fp8", ("tile_64x128", 4)),
    (256, 2560, 8192, "fp8", ("tile_128x128", 2)), (1024, 1024, 5120, "fp8", ("tile_128x128", 2)),  # above a quarter
    (128, 1024, 5120, "int8", ("tile_128x128", 2)),  # int8: not measured, unchanged
])
def test_fp8_few_tiles_take_tile_64x128(m, n, k, kind, want):
    """fp8 at M > 64 with at most a quarter wave of 128 x 128 tiles and no persistent plan: tile_64x128, split-K up to 4
    while its CTAs stay within 1.25 waves (plan/sm90.py, measured on an H100)."""
    from fusedgemm.gemm_a8 import _choose_config

    cfg, splits = _choose_config(m, n, k, "sm_90a", 132, in_kind=kind)
    assert (cfg.name, splits) == want


@pytest.mark.parametrize("m,n,k,kind,want", [
    (8192, 7168, 2048, "fp8", "persistent_128x128_epi7"), (1024, 7168, 2048, "fp8", "persistent_128x128_epi7"),  # short K (two chains from 2048)
    (256, 6144, 4096, "fp8", "persistent_128x128_epi7"), (1024, 6144, 4096, "fp8", "persistent_128x128_epi7"),   # half a wave to 4 waves
    (8192, 6144, 4096, "fp8", "persistent_128x128"), (8192, 4096, 3072 + 16, "fp8", "persistent_128x128"),  # above: no pairs
    (4096, 5120, 3072, "fp8", "persistent_128x128_epi7"), (256, 1024, 768, "fp8", "persistent_128x128_epi7_1chain"),  # fp8: K <= 3072; few tiles
    (4096, 5120, 1536, "fp8", "persistent_128x128_epi7_1chain"), (256, 4096, 4096, "fp8", "persistent_128x128_epi7"),  # K < 2048: one chain; 64 tiles
    (8192, 4096, 14336, "fp8", "persistent_128x128"), (1024, 4096, 14336, "fp8", "persistent_128x128"),  # long K
    (8192, 7168, 2048, "int8", "persistent_128x128_epi7"), (8192, 6144, 4096, "int8", "persistent_128x128"),   # int8: fp8's rules
    (256, 6144, 4096, "int8", "persistent_128x128_epi7"), (1024, 4096, 14336, "int8", "persistent_128x128"),  # ... few tiles; long K
    (256, 6144, 4096, "bf16", "persistent_128x128_epi7_1chain"), (256, 7168, 2048, "bf16", "persistent_128x128_epi7_1chain"),     # 16-bit: half a wave to one
    (1024, 6144, 4096, "bf16", "persistent_128x128"), (8192, 7168, 2048, "fp16", "persistent_128x128"),  # a wave and more (K 4096 B:
    (1024, 4096, 4096, "fp16", "persistent_128x128"),  # above it, where the tile loop's pair units fill two waves, pair_loop_128x256)
])
def test_persistent_plans_on_sm90(m, n, k, kind, want):
    """The 8-bit kinds' persistent 128 x 128 kernels (plan/sm90.py, one rule set for fp8 and int8): seven epilogue
    warps at K <= 3072 bytes (moe_dn M = 8192: 16% faster than two chains with three epilogue warps) and up to four
    waves of tiles at K <= 4096 (from half a wave, or any number at M > 128), with two chains (persistent_128x128_epi7) from K =
    2048 and one (persistent_128x128_epi7_1chain) below; above, persistent_128x128, up to K = 16384 (the B-multicast pairs, pair_persistent_128x128, are no longer
    taken: persistent_128x128 leads them at K = 4096 since 8445445). The 16-bit kinds take persistent_128x128_epi7_1chain from half a wave to one
    wave of tiles, persistent_128x128 from a wave (above K = 4096 bytes only where pair_loop_128x256's tile loop would fill its waves
    less: plan/sm90.py tile_loop_fills)."""
    from fusedgemm.gemm_a8 import _choose_config

    cfg, splits = _choose_config(m, n, k, "sm_90a", 132, in_kind=kind)
    assert (cfg.name, splits) == (want, 1) and cfg.persistent


@pytest.mark.parametrize("m,n,k,want", [(256, 4096, 14336, ("tile_128x128", 2)), (128, 6144, 4096, ("tile_128x128", 2))])
def test_fp8_few_tiles_at_long_k_or_below_half_a_wave_split_k(m, n, k, want):
    """Between a quarter and half a wave of tiles at M <= 128, or at long K with few tiles, fp8 keeps the
    CTA-per-tile plans with split-K (down M = 256: 44.3 us against 49.6 on persistent_128x128_epi7_1chain)."""
    from fusedgemm.gemm_a8 import _choose_config

    cfg, splits = _choose_config(m, n, k, "sm_90a", 132)
    assert (cfg.name, splits) == want


@pytest.mark.parametrize("m,n,k,want", [(1, 6144, 4096, ("swap_16x128", 4)), (16, 4096, 14336, ("swap_16x128", 4)),
                                        (1, 28672, 4096, ("swap_16x128", 1)), (17, 6144, 4096, ("swap_16x128", 1)),
                                        (32, 4096, 4096, ("swap_16x128", 2)), (32, 4096, 14336, ("swap_16x128", 2)),
                                        (33, 6144, 4096, ("tile_64x128", 4)), (64, 4096, 14336, ("tile_64x128", 4))])
@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_decode_plans_on_sm90(m, n, k, want, kind):
    """sm_90a decode: the swapped 16-row tiles up to M = 16 (a quarter of an m64 tile's tensor-core work at
    M = 1), for the 8-bit kinds up to 32 (split-K only while the CTAs fit one per SM), 64 x 128 tiles up to 64;
    split-K over a cluster while the tiles leave SMs idle."""
    from fusedgemm.gemm_a8 import _choose_config

    cfg, splits = _choose_config(m, n, k, "sm_90a", 132, True, kind)
    assert (cfg.name, splits) == want and cfg.swap_ab == (cfg.name == "swap_16x128")
    assert cfg.warps == 5 and cfg.block_m == (16 if cfg.swap_ab else 64)  # one consumer warpgroup + producer warp


@pytest.mark.parametrize("m,n,k", [(64, 7168, 2048), (48, 28672, 4096), (64, 4096, 1024)])
@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_decode_takes_the_persistent_tile_where_tile_64x128_gets_little_split_k(m, n, k, kind):
    """At 32 < M <= 64 the 8-bit kinds take persistent_128x128 where tile_64x128 would get no split-K (gate_up: 224 tiles) or fewer
    than 8 K blocks a CTA (moe_dn, K 2048: split 4 leaves 4); the 64-row tile where the epilogue does not fit the
    persistent staging."""
    from fusedgemm.gemm_a8 import _choose_config

    assert _choose_config(m, n, k, "sm_90a", 132, True, kind)[0].name == "persistent_128x128"
    assert _choose_config(m, n, k, "sm_90a", 132, False, kind)[0].name == "tile_64x128"


@pytest.mark.parametrize("m", [17, 32, 48, 64])
@pytest.mark.parametrize("kind", ["bf16", "fp16"])
def test_16bit_decode_takes_the_persistent_tile_below_12_k_blocks_a_cta(m, kind):
    """At 16 < M <= 64 the 16-bit kinds take persistent_128x128 only where tile_64x128's split leaves fewer than 12 K blocks a CTA
    (moe_dn, K 2048 = 32 blocks, split 4: 8), not without a split (gate_up: they tie) nor at 16 a CTA (qkv)."""
    from fusedgemm.gemm_a8 import _choose_config

    assert _choose_config(m, 7168, 2048, "sm_90a", 132, True, kind)[0].name == "persistent_128x128"
    assert _choose_config(m, 7168, 2048, "sm_90a", 132, False, kind)[0].name == "tile_64x128"
    assert (lambda c: (c[0].name, c[1]))(_choose_config(m, 6144, 4096, "sm_90a", 132, True, kind)) == ("tile_64x128", 4)
    assert _choose_config(m, 28672, 4096, "sm_90a", 132, True, kind)[0].name == "tile_64x128"


def test_forced_config_rejects_unknown_plans():
    from fusedgemm.gemm_a8 import forced_config

    with pytest.raises(ValueError, match="unknown gemm_a8 config"):
        with forced_config("m1n1"):
            pass
    with pytest.raises(ValueError, match="splits"):
        with forced_config("portable_128x128", 2):
            pass


def test_expression_epilogues_trace_as_one_op():
    """Under torch.compile, gemm_a8 with an epilogue expression is one op, fusedgemm::gemm_a8_expr (canonical
    text + operands by name), whose fake implementation gives both outputs' shapes and dtypes."""
    import fusedgemm.epilogue as E
    from fusedgemm.preshuffle import PreshuffledWeight
    from torch._subclasses.fake_tensor import FakeTensorMode

    expr = E.parse("silu(save(acc * n_vec(s), fp16)) + aux(r) * scalar(q)")

    def fn(a, wd, s, r):
        y, pre = fg.gemm_a8(a, PreshuffledWeight(wd), epilogue=expr, operands={"s": s, "r": r, "q": 0.5},
                            out_dtype=torch.float32)
        return y + 1, pre

    graphs = []

    def backend(gm, example_inputs):  # records the graph; runs nothing (no GPU here)
        graphs.append(gm)
        return lambda *args: [torch.zeros(M, N), torch.zeros(M, N, dtype=torch.float16)]

    a, w = make()
    torch._dynamo.reset()
    torch.compile(fn, backend=backend, fullgraph=True)(a, w.data, torch.rand(N), torch.rand(M, N))
    calls = [n for n in graphs[0].graph.nodes if n.target in (torch.ops.fusedgemm.gemm_a8_expr,
                                                               torch.ops.fusedgemm.gemm_a8_expr.default)]
    assert len(calls) == 1 and calls[0].args[2] == str(expr) and calls[0].args[3] == "s,r"
    with FakeTensorMode():
        ys = torch.ops.fusedgemm.gemm_a8_expr(torch.empty(M, K, dtype=FP8), torch.empty(N, K, dtype=FP8), str(expr),
                                              "s,r", [torch.empty(N), torch.empty(M, N)], "q", [0.5], torch.float32)
        assert [(y.shape, y.dtype) for y in ys] == [((M, N), torch.float32), ((M, N), torch.float16)]


@pytest.mark.parametrize("m,n,k,int8_plan", [(8192, 28672, 4096, "persistent_128x128_epi7"), (32768, 6144, 4096, "persistent_128x128_epi7"),
                                             (16384, 12288, 5120, "persistent_128x128_epi7"), (8192, 6144, 4096, "persistent_128x128"),
                                             (32768, 4096, 14336, "persistent_128x128"), (8192, 12288, 5120, "persistent_128x128")])
def test_int8_takes_two_chains_beside_seven_epilogue_warps_at_many_tiles(m, n, k, int8_plan):
    """int8 from ~10000 tiles up to K = 5120 bytes takes persistent_128x128_epi7 where persistent_128x128 was taken (gate_up M >= 16384 11-12%
    faster, H100); fp8 keeps persistent_128x128 there (it led on every such row), and so do int8's longer K and fewer tiles."""
    from fusedgemm.gemm_a8 import _choose_config

    assert _choose_config(m, n, k, "sm_90a", 132, True, "int8")[0].name == int8_plan
    assert _choose_config(m, n, k, "sm_90a", 132, True, "fp8")[0].name == "persistent_128x128"
