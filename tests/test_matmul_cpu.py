"""matmul_fused without a GPU: every bad input's message, the keyword form's epilogue expression, specs and
plans of the 16/32-bit kinds, the backward's formulas against torch autograd in float64, FusedLinear's CPU
path, and (slow) the sm_90a kernels' build: wgmma of each kind in the SASS, no spills, kernarg layout."""
import re

import pytest
import torch

import fusedgemm as fg
from fusedgemm.autograd import matmul_fused_grads
from fusedgemm.checks import check_matmul_fused_args, matmul_expression
from fusedgemm.epilogue.codegen import EpilogueSpec
from fusedgemm.epilogue.evaluate import _UNARY
from fusedgemm.plan import choose_config, plans
from fusedgemm.runtime import kernels
from fusedgemm.runtime.gemm_spec import GemmKernel

from code_objects import sass

BF = torch.bfloat16


def check(a, b, bias=None, c=None, alpha=1.0, beta=0.0, activation="none", epilogue=None, operands=None,
          layout="nk", out_dtype=None, out=None, precision=None, arch="sm_90a", **kw):
    return check_matmul_fused_args(a, b, bias, c, alpha, beta, activation, epilogue, operands, layout, out_dtype,
                                   out, precision, arch=arch, **kw)


def t(*shape, dtype=BF):
    return torch.randn(*shape).to(dtype)


BAD = [
    (lambda: check(t(4, 64), t(32, 48)), ValueError, r"K=64.*K=48; K must agree"),
    (lambda: check(t(4, 64), t(32, 64, dtype=torch.float16)), TypeError, r"same dtype.*bfloat16.*float16"),
    (lambda: check(torch.ones(4, 64, dtype=torch.int32), torch.ones(32, 64, dtype=torch.int32)), TypeError,
     r"A must be bfloat16, float16 or float32, got torch.int32"),
    (lambda: check(t(4, 64, dtype=torch.float8_e4m3fn), t(32, 64, dtype=torch.float8_e4m3fn)), TypeError,
     r"8-bit inputs: fusedgemm.gemm_a8"),
    (lambda: check(t(4, 64, dtype=torch.float64), t(32, 64, dtype=torch.float64)), TypeError, r"got torch.float64"),
    (lambda: check(t(4, 64), t(32, 64), c=t(5, 32), beta=1.0), ValueError, r"c must be \[M=4, N=32\]"),
    (lambda: check(t(4, 64), t(32, 64), c=t(4, 32, dtype=torch.float64), beta=1.0), TypeError, r"c must be"),
    (lambda: check(t(4, 64), t(32, 64), bias=t(31)), ValueError, r"bias must have shape \[N=32\]"),
    (lambda: check(t(4, 64), t(32, 64), bias=torch.ones(32, dtype=torch.int64)), TypeError, r"bias must be"),
    (lambda: check(t(4, 64), t(32, 64), activation="swish"), ValueError, r"unknown activation 'swish'"),
    (lambda: check(t(4, 64), t(32, 64), alpha=torch.ones(1, dtype=torch.float64)), TypeError,
     r"alpha must be a number or a 1-element float32 tensor"),
    (lambda: check(t(4, 64), t(32, 64), alpha="2"), TypeError, r"alpha must be a number"),
    (lambda: check(t(4, 64), t(32, 64), beta=0.5), ValueError, r"beta is given but c is None"),
    (lambda: check(t(4, 64), t(32, 64), layout="tn"), ValueError, r"layout must be 'nk'.*or 'kn'"),
    (lambda: check(t(4, 0), t(32, 0)), ValueError, r"K must be positive, got K=0"),  # any other N, K: padded
    (lambda: check(t(4, 64), t(32, 64), precision="fast"), ValueError, r"precision must be"),
    (lambda: check(t(4, 64), t(32, 64), out=t(4, 33)), ValueError, r"out must be \[4, 32\]"),
    (lambda: check(t(4, 64), t(32, 64), out_dtype=torch.int8), TypeError, r"out_dtype must be"),
    (lambda: check(t(4, 64), t(32, 64), bias=t(32), epilogue=fg.epilogue.parse("relu(acc)")), ValueError,
     r"with epilogue=<expression>, pass every operand by name"),
    (lambda: check(t(4, 64), t(32, 64), epilogue=3), TypeError, r"epilogue must be a preset name, an epilogue "),
    (lambda: check(t(4, 64), t(32, 64), epilogue=fg.epilogue.parse("acc + aux(r)")), ValueError,
     r"aux\(r\) has no value"),
    (lambda: fg.matmul_fused(t(4, 64).to("meta"), t(32, 64).to("meta")), ValueError,
     r"must be on a GPU \(cuda/ROCm device\) or the CPU, A is on meta"),
    (lambda: fg.matmul_fused([1.0], t(32, 64)), TypeError, r"A must be a torch.Tensor, got list"),
]


@pytest.mark.parametrize("i", range(len(BAD)))
def test_bad_input_says_what_was_expected(i):
    fn, exc, pattern = BAD[i]
    with pytest.raises(exc, match=pattern):
        fn()


def test_keyword_form_expression():
    assert str(matmul_expression("silu", "aux", True)) == "silu(acc * scalar(alpha) + aux(c) * scalar(beta) + n_vec(bias))"
    assert str(matmul_expression("none", None, False)) == "acc * scalar(alpha)"
    assert str(matmul_expression("gelu", "m_vec", False, "bf16")) == \
        "gelu(save(acc * scalar(alpha) + m_vec(c) * scalar(beta), bf16))"
    p = check(t(2, 3, 64), t(32, 64), c=t(2, 3, 32), beta=0.5, bias=t(32, dtype=torch.float32), activation="relu")
    assert p["m"] == 6 and p["lead"] == (2, 3) and dict(p["epi"].operand_dtypes) == {"c": "bf16", "bias": "f32"}
    p0 = check(t(4, 64), t(32, 64), c=t(32), beta=0.0)  # beta = 0 ignores c, as torch.addmm
    assert "(c)" not in str(p0["expr"])
    assert check(t(4, 64), t(32, 64), c=t(4, 1), beta=2.0)["expr"].args[1].args[0].op == "m_vec"
    assert check(t(4, 64), t(64, 32), layout="kn")["b_nk"] is None  # the caller transposes (with a warning)


def test_fp32_precision_follows_torch():
    a, b = t(4, 64, dtype=torch.float32), t(32, 64, dtype=torch.float32)
    prev = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert check(a, b)["precision"] == "ieee"
        torch.set_float32_matmul_precision("high")
        assert check(a, b)["precision"] == "tf32"
        assert check(a, b, precision="ieee")["precision"] == "ieee"
    finally:
        torch.set_float32_matmul_precision(prev)


def test_specs_and_plans_of_the_wide_kinds():
    spec = EpilogueSpec.of(matmul_expression("silu", None, True), {"bias": "bf16"})
    k = GemmKernel("sm_90a", "tile_128x192", "bf16", "bf16", spec)
    assert k.preset is None and k.unit.startswith("matmul_sm90_bf16_bf16_tile_128x192_e")
    assert k.kernel_name.startswith("fg_matmul_bf16_bf16_e") and "sm90_gemm<fg::Bf16," in k.source()
    # The plan counts K in bytes (K x the element size): bf16 up to K = 4096 takes the persistent kernel from one
    # wave of tiles, but above K = 2048 the 128 x 256 tile in pairs looping over the tiles where its units fill two
    # waves (tile_loop_fills); above K = 4096 that tile loop (TILE_RATE_WIDE measured on an H100); from half a wave to
    # one wave, persistent_128x128_epi7_1chain (qkv M = 256: 96 tiles of 128 x 128); fewer, the modelled tiles.
    assert choose_config(1024, 6144, 4096, "sm_90a", 132, True, "bf16")[0].name == "persistent_128x128"  # 96 units, 66 pairs
    assert choose_config(1024, 4096, 4096, "sm_90a", 132, True, "bf16")[0].name == "persistent_128x128"  # one wave of units
    for m, n in ((2048, 6144), (8192, 6144), (2048, 4096), (1024, 28672)):
        assert choose_config(m, n, 4096, "sm_90a", 132, True, "bf16")[0].name == "pair_loop_128x256", (m, n)
        assert choose_config(m, n, 2048, "sm_90a", 132, True, "bf16")[0].name == "persistent_128x128", (m, n)  # K 4096 bytes
    assert choose_config(4096, 4096, 14336, "sm_90a", 132, True, "bf16")[0].name == "pair_loop_128x256"  # long K: pairs
    assert choose_config(8192, 7168, 2048, "sm_90a", 132, True, "bf16")[0].name == "persistent_128x128"
    assert choose_config(256, 6144, 4096, "sm_90a", 132, True, "bf16")[0].name == "persistent_128x128_epi7_1chain"
    assert not choose_config(256, 4096, 4096, "sm_90a", 132, True, "bf16")[0].persistent  # 64 tiles < 66
    assert choose_config(128, 131072, 2048, "sm_90a", 132, True, "bf16")[0].name == "persistent_128x128"  # one row block
    assert choose_config(1, 6144, 4096, "sm_90a", 132, True, "bf16")[0].name == "swap_16x128"


def test_tile_loop_fills_two_waves_of_pairs_as_fully_as_the_persistent_tiles():
    from fusedgemm.plan.sm90 import tile_loop_fills

    assert not tile_loop_fills(1024, 4096, 132)  # 64 units: one wave of 66 pairs
    assert not tile_loop_fills(1024, 6144, 132)  # 96 units: 73% of two waves; persistent_128x128's 384 tiles 97% of three
    assert tile_loop_fills(2048, 4096, 132)  # 128 units: 97% of two waves
    assert tile_loop_fills(8192, 6144, 132)
    # N 6272: a half-empty last column tile; 25 x 32 = 800 units in 13 waves of 66 pairs fill 91% of them, persistent_128x128's
    # 49 x 64 = 3136 tiles 99% of 24 waves of 132
    assert not tile_loop_fills(8192, 6144 + 128, 132)


def test_b_multicast_pairs_plan_without_split_k_and_with_two_row_blocks():
    """pair_128x256 (tile_128x256 in clusters of two CTAs sharing B by TMA multicast): the wide kinds only, never split-K
    (its cluster is the pair), only where M has two row blocks, and its CTA count includes the idle partner of
    an odd last row block."""
    from fusedgemm.plan import forced_config
    from fusedgemm.plan.sm90 import tile_count

    pair, single = kernels.GEMM_CONFIGS["pair_128x256"], kernels.GEMM_CONFIGS["tile_128x256"]
    assert pair.pair_b and not single.pair_b and pair.smem == single.smem and pair.in_kinds == single.in_kinds
    for kind in ("bf16", "fp16", "tf32"):
        assert [p for p in plans("sm_90a", kind) if p[0] == "pair_128x256"] == [("pair_128x256", 1)]
    assert all(name != "pair_128x256" for kind in ("fp8", "int8") for name, _s in plans("sm_90a", kind))
    with pytest.raises(ValueError, match="B-multicast pairs"):
        with forced_config("pair_128x256", 2):
            pass
    assert tile_count(pair, 384, 512) == 2 * 4 and tile_count(single, 384, 512) == 2 * 3
    for m in (65, 128):
        cfg, _s = choose_config(m, 28672, 4096, "sm_90a", 132, True, "bf16")
        assert not cfg.pair_b, (m, cfg.name)
    for m, n, k in ((4096, 4096, 14336), (2048, 28672, 8192), (8192, 6144, 8192)):  # K > 4096: not persistent
        cfg, splits = choose_config(m, n, k, "sm_90a", 132, True, "bf16")
        assert (cfg.name, splits) == ("pair_loop_128x256", 1), (m, n, k)


def test_tile_loop_configs_are_one_wave_without_split_k():
    """loop_128x256 / pair_loop_128x256 (WgmmaConfig::kTileLoop): tile_128x256 / pair_128x256's kernel and shared memory plus a 64 x 64
    fp32 store buffer per consumer warpgroup (32 KB, within the 227 KB a CTA may have) and the handed chunk's two
    barriers, launched as one wave of CTAs that loop over the tiles; never split-K; the wide kinds only."""
    from fusedgemm.plan import forced_config

    for loop, base in (("loop_128x256", "tile_128x256"), ("pair_loop_128x256", "pair_128x256")):
        lc, bc = kernels.GEMM_CONFIGS[loop], kernels.GEMM_CONFIGS[base]
        assert lc.tile_loop and lc.one_wave and not lc.persistent and not lc.splits_k
        assert (lc.smem - 2 * 64 * 64 * 4 - 2 * 8, lc.warps, lc.pair_b, lc.in_kinds) == (bc.smem, bc.warps, bc.pair_b,
                                                                                 bc.in_kinds)
        assert lc.smem <= 227 * 1024
        for kind in ("bf16", "fp16", "tf32"):
            assert [p for p in plans("sm_90a", kind) if p[0] == loop] == [(loop, 1)]
        assert all(name != loop for kind in ("fp8", "int8") for name, _s in plans("sm_90a", kind))
        with pytest.raises(ValueError):
            with forced_config(loop, 2):
                pass


def test_the_256_wide_tile_serves_the_wide_kinds_only():
    """tile_128x256 (ConfigTile128x256: 4 x 48 KB stages, two consumer warpgroups + a producer warpgroup) runs bf16 / fp16 /
    tf32 only: gemm_a8's plans, its heuristic and the ahead-of-time unit's kernel list never hold it."""
    cfg = kernels.GEMM_CONFIGS["tile_128x256"]
    assert (cfg.block_m, cfg.block_n, cfg.warps, cfg.unit) == (128, 256, 12, "sm90_gemm")
    assert cfg.smem == 4 * (128 + 256) * 128 + 4 * 2 * 8 + 1024 <= 227 * 1024
    assert cfg.in_kinds == ("bf16", "fp16", "tf32") and not cfg.serves("fp8") and not cfg.serves("int8")
    for kind in ("fp8", "int8"):
        assert all(name != "tile_128x256" for name, _s in plans("sm_90a", kind))
    assert plans("sm_90a") == plans("sm_90a", "fp8") == plans("sm_90a", "int8")
    assert not any("tile_128x256" in name for unit in ("portable_gemm", "sm90_gemm")
                   for name in kernels.gemm_a8_kernel_names(unit))
    for kind in ("bf16", "fp16", "tf32"):
        wide = plans("sm_90a", kind)
        assert [("tile_128x256", s) for s in (1, 2, 4, 8)] == [p for p in wide if p[0] == "tile_128x256"]
        assert all(kernels.GEMM_CONFIGS[name].unit == "sm90_gemm" for name, _s in wide)  # wgmma only there
    assert "tile_128x256" not in {name for name, _s in plans("gfx942", "bf16")}
    with pytest.raises(ValueError, match="in_kind must be one of"):
        plans("sm_90a", "fp4")
    # The heuristic of each family stays inside that family's plans (which the GPU tests run).
    for kind in ("fp8", "bf16", "tf32"):
        allowed = set(plans("sm_90a", kind))
        for m in (1, 16, 64, 65, 256, 1024, 4096, 8192):
            for n, k in ((16, 16), (4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (7168, 2048)):
                got = choose_config(m, n, k, "sm_90a", 132, True, kind)
                assert (got[0].name, got[1]) in allowed, (kind, m, n, k, got[0].name, got[1])


class _Ctx:
    def __init__(self, act, layout, c, bias, needs):
        self.activation, self.layout = act, layout
        self.c_shape = None if c is None else tuple(c.shape)
        self.c_dtype = None if c is None else c.dtype
        self.bias_shape = None if bias is None else tuple(bias.shape)
        self.bias_dtype = None if bias is None else bias.dtype
        self.needs_input_grad = needs


@pytest.mark.parametrize("act", ["none", "relu", "silu", "gelu", "gelu_erf", "tanh", "sigmoid", "square"])
@pytest.mark.parametrize("c_shape,layout", [((2, 3, 16), "nk"), ((16,), "kn"), ((6, 1), "nk"), (None, "nk")])
def test_backward_formulas_match_torch_autograd_in_float64(act, c_shape, layout):
    """The backward (autograd.matmul_fused_grads, what the op's autograd calls) against torch's autograd of the
    same float64 expression: the reference path of the gradcheck."""
    g = torch.Generator().manual_seed(7)
    d = torch.float64
    x = torch.randn(2, 3, 8, dtype=d, generator=g).requires_grad_()
    w = torch.randn(*((16, 8) if layout == "nk" else (8, 16)), dtype=d, generator=g).requires_grad_()
    bias = torch.randn(16, dtype=d, generator=g).requires_grad_()
    c = None if c_shape is None else torch.randn(*c_shape, dtype=d, generator=g).requires_grad_()
    alpha, beta = 1.25, -0.5
    w_nk = w if layout == "nk" else w.t()
    pre = alpha * torch.nn.functional.linear(x, w_nk) + bias
    if c is not None:
        cc = c if c.dim() != 2 or c.shape[1] != 1 else c.reshape(2, 3, 1)
        pre = pre + beta * cc
    y = _UNARY[act](pre) if act != "none" else pre
    dy = torch.randn(y.shape, dtype=d, generator=g)
    inputs = [x, w, bias] + ([c] if c is not None else [])
    want = torch.autograd.grad(y, inputs, dy)
    ctx = _Ctx(act, layout, c, bias, (True, True, True, c is not None))
    got = matmul_fused_grads(ctx, x.detach(), w.detach(), pre.detach(), alpha, beta, dy)
    for gw, gg, name in zip(want, got, ("x", "w", "bias", "c")):
        assert gg.shape == gw.shape, name
        torch.testing.assert_close(gg, gw, rtol=1e-10, atol=1e-10, msg=name)


def test_fused_linear_on_cpu_matches_torch_and_keeps_state_dict():
    lin = torch.nn.Linear(16, 8)
    for act in ("none", "silu", "gelu_erf"):
        f = fg.nn.FusedLinear.from_linear(lin, activation=act, alpha=0.5)
        assert list(f.state_dict()) == list(lin.state_dict()) and f.weight is lin.weight
        x, r = torch.randn(3, 16), torch.randn(3, 8)
        y = 0.5 * torch.nn.functional.linear(x, lin.weight) + lin.bias + 2.0 * r
        torch.testing.assert_close(f(x, residual=r, beta=2.0), _UNARY[act](y) if act != "none" else y)
    with pytest.raises(ValueError, match="unknown activation"):
        fg.nn.FusedLinear(4, 8, activation="swish")


def test_fp32_ieee_takes_the_split_tf32_kernel_on_sm90():
    from fusedgemm.plan import plans

    a, b = t(4, 64, dtype=torch.float32), t(32, 64, dtype=torch.float32)
    assert check(a, b, precision="ieee")["in_kind"] == "f32x3"
    assert check(a, b, precision="tf32")["in_kind"] == "tf32"
    assert check(a, b, precision="ieee", arch="gfx942")["in_kind"] == "tf32"  # the unfused path there
    assert choose_config(4096, 4096, 4096, "sm_90a", 132, True, "f32x3")[0].name == "f32x3_128x128"
    assert {c for c, _s in plans("sm_90a", "f32x3")} == {"f32x3_128x128"}
    assert all(c != "f32x3_128x128" for kind in ("fp8", "bf16", "tf32") for c, _s in plans("sm_90a", kind))


@pytest.mark.slow
@pytest.mark.parametrize("kind,config,mma,layout", [
    ("bf16", "tile_128x192", r"\bHGMMA\.64x192x16\.F32\.BF16\b", "nk"),
    ("fp16", "persistent_128x128", r"\bHGMMA\.64x128x16\.F32\b", "nk"),
    ("tf32", "swap_16x128", r"\bHGMMA\.64x16x8\.F32\.TF32\b", "nk"),
    ("bf16", "tile_128x128", r"\bHGMMA\.64x128x16\.F32\.BF16\b", "nk"),
    ("bf16", "tile_128x256", r"\bHGMMA\.64x256x16\.F32\.BF16\b", "nk"),
    ("fp16", "tile_128x256", r"\bHGMMA\.64x256x16\.F32\b", "kn"),
    ("tf32", "tile_128x256", r"\bHGMMA\.64x256x8\.F32\.TF32\b", "nk"),
    ("bf16", "pair_128x256", r"\bHGMMA\.64x256x16\.F32\.BF16\b", "nk"),
    ("fp16", "pair_128x256", r"\bHGMMA\.64x256x16\.F32\b", "kn"),
    ("bf16", "loop_128x256", r"\bHGMMA\.64x256x16\.F32\.BF16\b", "nk"),
    ("bf16", "pair_loop_128x256", r"\bHGMMA\.64x256x16\.F32\.BF16\b", "nk"),
    ("fp16", "pair_loop_128x256", r"\bHGMMA\.64x256x16\.F32\b", "kn"),
    ("tf32", "loop_128x256", r"\bHGMMA\.64x256x8\.F32\.TF32\b", "nk"),
    ("f32x3", "f32x3_128x128", r"\bHGMMA\.64x128x8\.F32\.TF32\b", "nk"),
])
def test_sm90_kernels_build_with_wgmma_no_spills_and_layout(kind, config, mma, layout):
    from fusedgemm.runtime.build import BuildSpec, code_object_dir
    from fusedgemm.runtime.codeobject import cubin_params

    spec = EpilogueSpec.of(matmul_expression("gelu", "aux", True, None), {"c": "f32", "bias": "bf16"})
    k = GemmKernel("sm_90a", config, kind, "bf16", spec, layout)
    build = BuildSpec(k.unit, "sm_90a", k.source())
    d = code_object_dir(build)
    path = d / build.file_name()
    params = cubin_params(path.read_bytes())
    assert [(p.offset, p.size) for p in params[k.kernel_name]] == list(zip(k.signature.offsets, k.signature.sizes))
    text = sass(path)
    assert re.search(mma, text), f"no {mma}"
    assert not re.search(r"\b(LDL|STL)\b", text), "local memory traffic"
    log = (d / f"{k.unit}.log").read_text()
    assert re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log) == [("0", "0")], log[-2000:]
    # ptxas serialising the wgmma chain (fence_regs in sm90_async.hpp) says so in the log
    assert not re.search(r"\bC75(14|17|19)\b", log), log[-2000:]
