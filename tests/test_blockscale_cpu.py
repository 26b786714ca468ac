"""Block-scaled FP8 in gemm_a8 on CPU tensors (the torch reference path; no kernel runs) and its checks: the float64
oracle with the block formula (reference.gemm_a8_block_reference, written apart from the CPU path's
reference.block_scaled_acc), ragged M / N / K (K not a multiple of 128), every scale combination, outputs
NaN-poisoned; scale shapes of no mode, non-fp32 / non-contiguous scales, and int8 refused before any launch."""
import itertools
import math

import pytest
import torch

import fusedgemm as fg
import fusedgemm.epilogue as E
from fusedgemm.checks import check_gemm_a8_args
from fusedgemm.reference import gemm_a8_block_reference

FP8 = torch.float8_e4m3fn


def cdiv(x, y):
    return -(-x // y)


def problem(m, n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 2).to(FP8)
    w = (torch.randn(n, k, generator=g) * 2).to(FP8)
    return a, w


def make_scale(mode, side, m, n, k, seed=1):
    """A scale argument of a mode: none / number / one (1-element tensor) / vector / vector2d / block."""
    g = torch.Generator().manual_seed(seed)
    length = m if side == "a" else n
    if mode == "none":
        return None
    if mode == "number":
        return 0.75
    if mode == "one":
        return torch.tensor([1.25])
    if mode == "vector":
        return torch.rand(length, generator=g) + 0.5
    if mode == "vector2d":
        return (torch.rand(length, generator=g) + 0.5).reshape((length, 1) if side == "a" else (1, length))
    if mode == "block":
        rows = m if side == "a" else cdiv(n, 128)
        return torch.rand(rows, cdiv(k, 128), generator=g) * 2 + 0.01
    raise AssertionError(mode)


def poisoned(shape, dtype):
    return torch.full(shape, float("nan")).to(dtype)


def assert_rounded_once(y, exact):
    """y is the float64 `exact` rounded once to y's dtype: within half an ulp (eps * |exact| bounds it)."""
    assert not y.isnan().any()
    eps = torch.finfo(y.dtype).eps
    err = (y.double() - exact).abs()
    assert (err <= eps * exact.abs() + 1e-30).all(), err.max()


MODES = ("none", "number", "one", "vector", "vector2d", "block")
# Every combination with a block scale on at least one side.
COMBOS = [(sa, sb) for sa, sb in itertools.product(MODES, MODES) if "block" in (sa, sb)]


@pytest.mark.parametrize("mode_a,mode_b", COMBOS)
def test_every_scale_combination_matches_the_block_formula(mode_a, mode_b):
    m, n, k = 5, 272, 400  # N: three 128-row blocks, the last ragged; K: four blocks, the last of 16
    a, w = problem(m, n, k)
    sa, sb = make_scale(mode_a, "a", m, n, k), make_scale(mode_b, "b", m, n, k, seed=2)
    bias = torch.randn(n)
    out = poisoned((m, n), torch.float32)
    y = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)
    assert y is out
    exact = gemm_a8_block_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", unrounded=True)
    assert_rounded_once(y, exact)


@pytest.mark.parametrize("m,n,k", [(1, 16, 16), (3, 48, 128), (7, 128, 129), (33, 200, 300), (2, 130, 1000),
                                   (17, 100, 200), (4, 3420, 256)])
@pytest.mark.parametrize("epilogue", ["none", "bias_gelu", "relu"])
def test_ragged_shapes(m, n, k, epilogue):
    a, w = problem(m, n, k, seed=m + n + k)
    sa, sb = make_scale("block", "a", m, n, k), make_scale("block", "b", m, n, k, seed=3)
    bias = torch.randn(n) if epilogue.startswith("bias") else None
    for out_dtype in (torch.bfloat16, torch.float32):
        out = poisoned((m, n), out_dtype)
        y = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue=epilogue, out=out)
        exact = gemm_a8_block_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue=epilogue, unrounded=True)
        assert_rounded_once(y, exact)


def test_block_scales_apply_per_k_block_not_after_the_sum():
    """Scales that differ between K blocks give a result that no per-row / per-column scaling of a @ w.T gives:
    the formula is the per-block one."""
    m, n, k = 2, 128, 256
    a = torch.ones(m, k).to(FP8)
    w = torch.ones(n, k).to(FP8)
    sa = torch.tensor([[1.0, 2.0], [3.0, 0.5]])
    sb = torch.tensor([[4.0, 0.25]])
    y = fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    # row 0: 128 * (1 * 4 + 2 * 0.25) = 576; row 1: 128 * (3 * 4 + 0.5 * 0.25) = 1552
    assert torch.equal(y, torch.tensor([[576.0] * n, [1552.0] * n]))


def test_expression_epilogue_with_block_scales():
    m, n, k = 9, 256, 384
    a, w = problem(m, n, k, seed=5)
    sa, sb = make_scale("block", "a", m, n, k), make_scale("block", "b", m, n, k, seed=4)
    bias, res = torch.randn(n), torch.randn(m, n)
    expr = "silu(acc + n_vec(bias)) * 0.5 + aux(res)"
    out = poisoned((m, n), torch.bfloat16)
    y = fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb, epilogue=expr, operands={"bias": bias, "res": res},
                   out=out)
    acc = gemm_a8_block_reference(a, w, scale_a=sa, scale_b=sb, unrounded=True)
    z = acc + bias.double()
    exact = z * torch.sigmoid(z) * 0.5 + res.double()
    assert_rounded_once(y, exact)
    # the IR node form too, and a per-token scale inside the expression beside a block scale_b
    s = torch.rand(m) + 0.5
    y2 = fg.gemm_a8(a, fg.preshuffle(w), scale_b=sb, epilogue=E.acc * E.m_vec("s"), operands={"s": s},
                    out_dtype=torch.float32)
    exact2 = gemm_a8_block_reference(a, w, scale_a=s, scale_b=sb, unrounded=True)
    assert_rounded_once(y2, exact2)


def test_per_token_and_per_channel_calls_are_unchanged():
    """No block scale: the per-token / per-channel path as before ([M, 1] with K <= 128 stays per-token)."""
    m, n, k = 4, 64, 128
    a, w = problem(m, n, k)
    sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    assert check_gemm_a8_args(a, fg.preshuffle(w), None, sa, sb, "none", None, None)["blocks"] is None
    y = fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    exact = gemm_a8_block_reference(a, w, scale_a=sa, scale_b=sb, unrounded=True)
    assert_rounded_once(y, exact)


def test_modes_are_read_off_the_shapes():
    m, n, k = 6, 300, 640
    a, w = problem(m, n, k)
    wq = fg.preshuffle(w)
    p = check_gemm_a8_args(a, wq, None, make_scale("block", "a", m, n, k), torch.rand(n), "none", None, None)
    assert p["blocks"].a.shape == (m, 5) and p["blocks"].b is None and p["operands"]["scale_b"].shape == (n,)
    p = check_gemm_a8_args(a, wq, None, 2.0, make_scale("block", "b", m, n, k), "none", None, None)
    assert p["blocks"].a is None and p["blocks"].b.shape == (3, 5) and p["operands"]["alpha"] == 2.0


# ---- bad input: clear errors before any launch ---------------------------------------------------------------
def test_scale_shapes_of_no_mode_name_the_expected_shapes():
    m, n, k = 4, 256, 512
    a, w = problem(m, n, k)
    wq = fg.preshuffle(w)
    with pytest.raises(ValueError, match=r"scale_a must hold 1 or 4 values as \[4\] or \[4, 1\] \(or one value\), or "
                                         r"block scales \[M, ceil\(K/128\)\] = \[4, 4\].*blocks of 64 along K: only "
                                         r"blocks of 128.*got shape \[4, 8\]"):
        fg.gemm_a8(a, wq, scale_a=torch.ones(m, k // 64))
    with pytest.raises(ValueError, match=r"scale_b must hold .* or block scales \[ceil\(N/128\), ceil\(K/128\)\] = "
                                         r"\[2, 4\].*got shape \[4, 4\]"):
        fg.gemm_a8(a, wq, scale_b=torch.ones(4, 4))
    with pytest.raises(ValueError, match=r"scale_b must hold .*blocks of 64 along K.*got shape \[2, 8\]"):
        fg.gemm_a8(a, wq, scale_b=torch.ones(2, 8))
    with pytest.raises(ValueError, match=r"scale_a must hold .*block scales"):
        fg.gemm_a8(a, wq, scale_a=torch.ones(m, 4, 1))


def test_non_fp32_and_non_contiguous_block_scales_are_refused():
    m, n, k = 4, 256, 512
    a, w = problem(m, n, k)
    wq = fg.preshuffle(w)
    with pytest.raises(TypeError, match=r"scale_a \(block scales\) must be float32, got torch.bfloat16"):
        fg.gemm_a8(a, wq, scale_a=torch.ones(m, 4, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match=r"scale_b \(block scales\) must be float32, got torch.float16"):
        fg.gemm_a8(a, wq, scale_b=torch.ones(2, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"scale_a \(block scales\) must be contiguous"):
        fg.gemm_a8(a, wq, scale_a=torch.ones(4, m).T)
    with pytest.raises(ValueError, match=r"scale_b \(block scales\) must be contiguous"):
        fg.gemm_a8(a, wq, scale_b=torch.ones(4, 2).T)


def test_int8_block_scales_are_refused():
    a = torch.randint(-127, 128, (4, 256), dtype=torch.int8)
    w = torch.randint(-127, 128, (128, 256), dtype=torch.int8)
    with pytest.raises(TypeError, match="block scales .* are for fp8 inputs"):
        fg.gemm_a8(a, fg.preshuffle(w), scale_a=torch.ones(4, 2))


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_amd_block_checks_pass(arch):
    """AMD runs block scales (the register-direct MFMA kernels: tests/test_emulator_blockscale.py executes them)."""
    dtype = fg.FP8_DTYPE_FOR_ARCH[arch]
    a = torch.randn(4, 256).to(dtype)
    w = torch.randn(128, 256).to(dtype)
    p = check_gemm_a8_args(a, fg.preshuffle(w), None, torch.ones(4, 2), torch.ones(1, 2), "none", None, None,
                           arch=arch)
    assert p["blocks"] is not None and p["blocks"].k_blocks == 2


def test_sm90_block_checks_pass_or_say_not_yet():
    """sm_90a: the checks pass when the kernel is wired in, else a clear 'not yet' error (never a wrong answer)."""
    from fusedgemm import blockscale

    a, w = problem(4, 256, 512)
    args = (a, fg.preshuffle(w), None, torch.ones(4, 4), torch.ones(2, 4), "none", None, None)
    if blockscale.SM90_KERNEL:
        assert check_gemm_a8_args(*args, arch="sm_90a")["blocks"] is not None
    else:
        with pytest.raises(ValueError, match="not yet implemented on sm_90a"):
            check_gemm_a8_args(*args, arch="sm_90a")


def test_oracle_block_formula_by_hand():
    """The oracle itself against a loop over k written out."""
    m, n, k = 3, 130, 260
    a, w = problem(m, n, k, seed=9)
    sa, sb = make_scale("block", "a", m, n, k), make_scale("block", "b", m, n, k)
    y = gemm_a8_block_reference(a, w, scale_a=sa, scale_b=sb, unrounded=True)
    a64, w64 = a.double(), w.double()
    i, j = 2, 129
    want = math.fsum(a64[i, t].item() * w64[j, t].item() * sa[i, t // 128].item() * sb[j // 128, t // 128].item()
                     for t in range(k))
    assert abs(y[i, j].item() - want) <= 1e-12 * max(1.0, abs(want))


# ---- the sm_90a block-scaled kernels build here (no GPU needed) ----------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("config", ["swap_16x128", "tile_64x128", "tile_128x128", "tile_192x128", "persistent_128x128",
                                    "persistent_128x128_epi7", "persistent_128x128_epi7_1chain"])
def test_block_scaled_kernel_builds_with_layout_and_no_spills(config):
    """The generated unit of a block-scaled kernel (BlockScaled<Config>, Sm90GemmBlockArgs): its packed arguments
    equal the cubin's metadata, the fp8 wgmma is there, each K block's promotion is an FFMA by the scales, nothing
    spills and ptxas does not serialise the wgmmas."""
    import re

    from fusedgemm.epilogue.presets import spec_for_activation
    from fusedgemm.runtime.build import BuildSpec, code_object_dir
    from fusedgemm.runtime.codeobject import cubin_params
    from fusedgemm.runtime.gemm_spec import GemmKernel

    from code_objects import sass

    spec = GemmKernel("sm_90a", config, "fp8", "bf16", spec_for_activation("silu"), "nk", True)
    assert spec.preset is None and "_bs" in spec.unit and "_bs" in spec.kernel_name
    build = BuildSpec(spec.unit, "sm_90a", spec.source())
    d = code_object_dir(build)
    sig = spec.signature
    assert sig.flat_names[-3:] == ("args.bs_a", "args.bs_b", "args.bs_k_blocks")
    params = cubin_params((d / build.file_name()).read_bytes())
    assert [(p.offset, p.size) for p in params[spec.kernel_name]] == list(zip(sig.offsets, sig.sizes))
    text = sass(d / build.file_name())
    mma_n = 16 if config.startswith("swap") else 128  # the swapped tile: weights are the wgmma's A, 16 activations
    assert re.search(rf"\bQGMMA\.64x{mma_n}x32\.F32\.E4M3\.E4M3\b", text)
    # the scales reach shared memory by cp.async (BlockScaleRows), never a register-writing load in the K loop
    assert re.search(r"\bLDGSTS\.E\b", text) and re.search(r"\bDEPBAR\.LE SB0\b", text)
    assert f"kSmemBytes <= {spec.smem}" in spec.source()  # the generated unit checks the host's launch size
    assert not re.search(r"\b(LDL|STL)\b", text), "local memory traffic"
    log = (d / f"{spec.unit}.log").read_text()
    assert re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log) == [("0", "0")], log[-2000:]
    assert "C7514" not in log and "serialized" not in log.lower(), log[-2000:]


def test_block_scaled_shared_memory_fits():
    """BlockScaled<Config>'s scale ring after the barriers fits every block-scaled sm_90a config: the persistent
    configs give a stage for it (their 5 stages and parked tile leave 416 bytes), the others keep theirs."""
    import dataclasses

    from fusedgemm.blockscale import BLOCK_CONFIGS
    from fusedgemm.runtime import kernels, tile_configs

    for name in BLOCK_CONFIGS:
        cfg, t = kernels.GEMM_CONFIGS[name], tile_configs.CONFIGS[name]
        smem = kernels.block_scaled_smem(name)
        ring = kernels.SCALE_RING_SLOTS * kernels.SCALE_RING_SLOT_FLOATS * 4 * (4 if t.swap_ab else t.block_m // 16)
        assert smem <= 227 * 1024, name
        if t.persistent:
            assert cfg.smem + ring > 227 * 1024  # why a stage goes
            fewer = kernels._sm90_config(name, dataclasses.replace(t, stages=t.stages - 1))
            assert smem == fewer.smem + ring, name
        else:
            assert smem == cfg.smem + ring, name
        if cfg.min_blocks_per_sm > 1:  # as many CTAs per SM as without the ring (228 KB, 1 KB reserved per CTA)
            assert cfg.min_blocks_per_sm * (smem + 1024) <= 228 * 1024, name
