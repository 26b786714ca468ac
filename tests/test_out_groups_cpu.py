"""gemm_a8(out_group=128) on CPU tensors and its refusals: the result is quantize_rows(y, group=128) of the same
call's fp32 output, bit for bit (presets, expressions, int8, block scales, any N and K); bad arguments get a clear
error before anything runs; the functor and kernel key of plain outputs are unchanged."""
from __future__ import annotations

import warnings

import pytest
import torch

import fusedgemm as fg
import fusedgemm.epilogue as E
from fusedgemm import out_groups
from fusedgemm.epilogue.codegen import EpilogueSpec, render_functor
from fusedgemm.runtime.gemm_spec import GemmKernel
from poisoned_outputs import POISON_BYTE, poisoned_outputs

FP8 = torch.float8_e4m3fn


def _data(m, n, k, g, dtype=FP8):
    if dtype == torch.int8:
        return (torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g),
                torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g))
    return (torch.randn(m, k, generator=g) * 2).to(dtype), (torch.randn(n, k, generator=g) * 2).to(dtype)


def _same(got, want):
    (codes, scales), (wc, ws) = got, want
    assert codes.dtype == wc.dtype and codes.shape == wc.shape and scales.shape == ws.shape
    assert torch.equal(codes.view(torch.uint8), wc.view(torch.uint8)) and torch.equal(scales, ws)


@pytest.mark.parametrize("m,n,k", [(5, 256, 64), (33, 200, 129), (1, 16, 16), (0, 128, 32)])
def test_equals_fp32_output_then_quantize_rows(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    a, w = _data(m, n, k, g)
    wq = fg.preshuffle(w)
    bias, sa, sb = torch.randn(n, generator=g), torch.rand(m, generator=g) + 0.5, torch.rand(n, generator=g) + 0.5
    got = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, activation="silu", out_group=128)
    with warnings.catch_warnings():  # (the padding copies of K % 16 / N % 16 warn once per process)
        warnings.simplefilter("ignore")
        y = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, activation="silu", out_dtype=torch.float32)
    _same(got, fg.quantize_rows(y, FP8, group=128))
    assert got[1].shape == (m, -(-n // 128))


def test_expression_int8_and_block_scales(seed):
    g = torch.Generator().manual_seed(seed)
    m, n, k = 9, 384, 256
    a, w = _data(m, n, k, g)
    res = torch.randn(m, n, generator=g)
    expr = E.parse("gelu(acc) + aux(res)")
    y = fg.gemm_a8(a, fg.preshuffle(w), epilogue=expr, operands={"res": res}, out_dtype=torch.float32)
    _same(fg.gemm_a8(a, fg.preshuffle(w), epilogue="gelu(acc) + aux(res)", operands={"res": res}, out_group=128),
          fg.quantize_rows(y, FP8, group=128))
    sa, sb = torch.rand(m, 2, generator=g) + 0.5, torch.rand(3, 2, generator=g) + 0.5  # 1x128 / 128x128
    y = fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    _same(fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb, out_group=128), fg.quantize_rows(y, FP8, group=128))
    ai, wi = _data(m, n, k, g, torch.int8)
    codes, scales = fg.gemm_a8(ai, fg.preshuffle(wi), scale_a=None, out_group=128)  # unscaled int sums
    assert codes.dtype == FP8 and torch.equal(scales, fg.quantize_rows(ai.float() @ wi.float().T, FP8, group=128)[1])


def test_gate_up_pairs(seed):
    """A paired epilogue (SwiGLU over a gate / up interleaved weight): groups of 128 outputs = 256 GEMM columns."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 7, 288, 64  # 144 outputs: a group of 128 and one of 16
    a, w = _data(m, n, k, g)
    y = fg.gemm_a8(a, fg.preshuffle(w), epilogue="silu(gate) * up", out_dtype=torch.float32)
    codes, scales = fg.gemm_a8(a, fg.preshuffle(w), epilogue="silu(gate) * up", out_group=128)
    assert codes.shape == (m, n // 2) and scales.shape == (m, 2)
    _same((codes, scales), fg.quantize_rows(y, FP8, group=128))


@pytest.mark.parametrize("layout", ["offs", "masked", "m_indices"])
def test_grouped_swiglu_and_grouped_gemm_a8(layout, seed):
    """The grouped ops' out_group: each group's rows quantised as gemm_a8's; rows no group owns are not written."""
    g = torch.Generator().manual_seed(seed)
    groups, inter, k = 3, 144, 64
    w = (torch.randn(groups, 2 * inter, k, generator=g) * 0.5).to(FP8)
    sb = torch.rand(groups, 2 * inter, generator=g) + 0.5
    if layout == "masked":
        x = (torch.randn(groups, 9, k, generator=g) * 2).to(FP8)
        where = {"masked_m": torch.tensor([4, 0, 9], dtype=torch.int32)}
        owned = torch.zeros(groups, 9, dtype=torch.bool)
        owned[0, :4], owned[2, :] = True, True
    elif layout == "m_indices":
        x = (torch.randn(256, k, generator=g) * 2).to(FP8)
        idx = torch.full((256,), -1, dtype=torch.int32)
        idx[:100], idx[128:200] = 0, 2
        where, owned = {"m_indices": idx}, idx >= 0
    else:
        x = (torch.randn(40, k, generator=g) * 2).to(FP8)
        where, owned = {"offs": torch.tensor([10, 10, 40], dtype=torch.int32)}, torch.ones(40, dtype=torch.bool)
    with poisoned_outputs():
        codes, scales = fg.grouped_swiglu(x, w, scale_b=sb, out_group=128, **where)
        plain_codes, plain_scales = fg.grouped_gemm_a8(x, fg.preshuffle(w), epilogue="gelu", out_group=128, **where)
    y = fg.grouped_swiglu(x, w, scale_b=sb, out_dtype=torch.float32, **where)
    want = fg.quantize_rows(y[owned], FP8, group=128)
    _same((codes[owned], scales[owned]), want)
    assert codes.shape == (*x.shape[:-1], inter) and scales.shape == (*x.shape[:-1], 2)
    assert scales[~owned].isnan().all(), "rows no group owns"
    assert (codes[~owned].view(torch.uint8) == POISON_BYTE[FP8]).all(), "rows no group owns"
    y = fg.grouped_gemm_a8(x, fg.preshuffle(w), epilogue="gelu", out_dtype=torch.float32, **where)
    _same((plain_codes[owned], plain_scales[owned]), fg.quantize_rows(y[owned], FP8, group=128))


def test_nan_and_zero_groups(seed):
    """A NaN in a group makes its scale NaN (visible downstream); an all-zero group gets scale 1 and zero codes."""
    a = torch.zeros(2, 32).to(FP8)
    a[1, 0] = float("nan")
    w = torch.ones(256, 32).to(FP8)
    codes, scales = fg.gemm_a8(a, fg.preshuffle(w), out_group=128)
    assert torch.equal(scales[0], torch.ones(2)) and not codes[0].float().any()
    assert scales[1].isnan().all()


def test_bad_arguments():
    a, w = torch.zeros(4, 32).to(FP8), fg.preshuffle(torch.zeros(128, 32).to(FP8))
    for group in (64, 256, True, "128", 128.0):
        with pytest.raises(ValueError, match="out_group must be 128"):
            fg.gemm_a8(a, w, out_group=group)
    with pytest.raises(TypeError, match="out_group writes fp8 codes: out_dtype must be an fp8 dtype"):
        fg.gemm_a8(a, w, out_group=128, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="out= is not taken with out_group"):
        fg.gemm_a8(a, w, out_group=128, out=torch.empty(4, 128, dtype=FP8))
    with pytest.raises(ValueError, match=r"without save\(\.\.\.\)"):
        fg.gemm_a8(a, w, epilogue="silu(save(acc, bf16))", out_group=128)
    with pytest.raises(ValueError, match="out_group runs on the 8-bit kernels"):
        fg.grouped_swiglu(torch.zeros(4, 32, dtype=torch.bfloat16), torch.zeros(2, 256, 32, dtype=torch.bfloat16),
                          offs=torch.tensor([1, 4], dtype=torch.int32), out_group=128)
    with pytest.raises(ValueError, match="out_group must be 128"):
        fg.grouped_gemm_a8(a, fg.preshuffle(torch.zeros(2, 128, 32).to(FP8)), offs=torch.tensor([1, 4],
                           dtype=torch.int32), out_group=64)


def test_sm90_runs_a_gate_up_pair_as_the_gemm_then_quantize_rows(monkeypatch, seed):
    """sm_90a fuses out_group on its 128-column tiles; a gate / up pair's group (256 GEMM columns) has no tile, so
    there the call is the GEMM to fp32, then quantize_rows(group=128): the caller's own two-step, the same values
    (here through the CPU reference, arch patched). An arch without a kernel says so with that recipe."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(5, 64, generator=g) * 2).to(FP8)
    w = fg.preshuffle((torch.randn(512, 64, generator=g) * 0.5).to(FP8))
    want = fg.quantize_rows(fg.gemm_a8(a, w, epilogue="silu(gate) * up", out_dtype=torch.float32), FP8, group=128)
    monkeypatch.setattr(out_groups, "arch_of", lambda *_args: "sm_90a")
    got = fg.gemm_a8(a, w, epilogue="silu(gate) * up", out_group=128)
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(got[1], want[1])
    assert out_groups.two_kernels("sm_90a", True) and not out_groups.two_kernels("sm_90a", False)
    assert not out_groups.two_kernels("gfx942", True)
    monkeypatch.setattr(out_groups, "arch_of", lambda *_args: "sm_100a")
    with pytest.raises(NotImplementedError, match=r"no fused kernel on sm_100a.*quantize_rows\(y, 'fp8', group=128\)"):
        fg.gemm_a8(a, w, out_group=128)


def test_plain_kernels_keep_their_keys_and_functors():
    expr = E.parse("silu(acc * n_vec(s))")
    plain, grouped = EpilogueSpec.of(expr, {"s": "f32"}), EpilogueSpec.of(expr, {"s": "f32"}, out_group=128)
    assert plain.key == EpilogueSpec(expr, (("s", "f32"),), 0).key and plain.key != grouped.key
    assert "kOutGroup" not in render_functor(plain) and "out_scale" not in render_functor(plain)
    text = render_functor(grouped)
    assert "static constexpr int kOutGroup = 128;" in text and "store_scale" in text
    with pytest.raises(ValueError, match="out_group must be 128"):
        EpilogueSpec.of(expr, {"s": "f32"}, out_group=64)
    assert "kOutGroup" in GemmKernel("sm_90a", "tile_128x128", "fp8", "fp8e4m3fn", grouped).source()
    for arch, config in (("sm_90a", "pair_128x256"), ("sm_90a", "swap_16x128"), ("sm_90a", "tile_128x192"),
                         ("gfx942", "portable_128x128"), ("gfx942", "tile_64x128")):
        with pytest.raises(ValueError, match="configs whose block holds 128 columns"):
            GemmKernel(arch, config, "fp8", "fp8e4m3fn", grouped).source()


def _deepseek_layer(g, groups=3, inter=256, hidden=320, dtype=FP8):
    """A DeepSeek-V3-style FP8 expert set: x with 1x128 scales, gate / up weights [G, 2I, H] with the checkpoint's
    128x128 scales in merged order (gate blocks, then up blocks), rows grouped by expert."""
    kb = -(-hidden // 128)
    offs = torch.tensor([20, 20, 70], dtype=torch.int32)
    x = (torch.randn(70, hidden, generator=g) * 2).to(dtype)
    w13 = (torch.randn(groups, 2 * inter, hidden, generator=g) * 0.5).to(dtype)
    sx = torch.rand(70, kb, generator=g) + 0.5
    s13 = torch.rand(groups, 2 * inter // 128, kb, generator=g) + 0.5
    return offs, x, w13, sx, s13


def _swiglu_oracle(offs, x, w13, sx, s13):
    """silu(gate) * up per expert, each projection block-scaled with its own blocks (float64)."""
    from fusedgemm.reference import block_scaled_acc

    inter = w13.shape[1] // 2
    out = torch.zeros(x.shape[0], inter, dtype=torch.float64)
    lo = 0
    for e, hi in enumerate(offs.tolist()):
        if hi > lo:
            gate = block_scaled_acc(x[lo:hi], w13[e, :inter], sx[lo:hi], s13[e, :inter // 128])
            up = block_scaled_acc(x[lo:hi], w13[e, inter:], sx[lo:hi], s13[e, inter // 128:])
            out[lo:hi] = torch.nn.functional.silu(gate) * up
        lo = hi
    return out


def test_grouped_swiglu_with_checkpoint_block_scales_then_requantised(seed):
    """The DeepSeek-V3 FP8 expert GEMM: block-scaled gate / up (the checkpoint's merged-order 128x128 tables,
    pair-ordered for the interleaved weight inside), SwiGLU and the 1x128 requantisation, one call; its codes and
    scales feed the down projection's block-scaled GEMM."""
    g = torch.Generator().manual_seed(seed)
    offs, x, w13, sx, s13 = _deepseek_layer(g)
    want = _swiglu_oracle(offs, x, w13, sx, s13)
    h = fg.grouped_swiglu(x, w13, offs=offs, scale_a=sx, scale_b=s13, out_dtype=torch.float32)
    assert ((h.double() - want).norm() / want.norm()).item() < 1e-6
    h8, sh = fg.grouped_swiglu(x, w13, offs=offs, scale_a=sx, scale_b=s13, out_group=128)
    _same((h8, sh), fg.quantize_rows(h, FP8, group=128))
    w2 = (torch.randn(3, 320, 256, generator=g) * 0.5).to(FP8)
    s2 = torch.rand(3, 3, 2, generator=g) + 0.5  # [G, ceil(H/128), ceil(I/128)]
    y = fg.grouped_gemm_a8(h8, fg.preshuffle(w2), offs=offs, scale_a=sh, scale_b=s2, out_dtype=torch.float32)
    assert y.shape == (70, 320) and torch.isfinite(y).all()


def test_pair_ordered_block_scales_refusals():
    g = torch.Generator().manual_seed(0)
    offs, x, w13, sx, s13 = _deepseek_layer(g, inter=192)  # I not a multiple of 128
    with pytest.raises(ValueError, match="I a multiple of 128"):
        fg.grouped_swiglu(x, w13, offs=offs, scale_a=sx, scale_b=torch.rand(3, 3, 3))
    a, w = torch.zeros(4, 256).to(FP8), fg.preshuffle(torch.zeros(384, 256).to(FP8))
    with pytest.raises(ValueError, match="N must be a multiple of 256"):
        fg.gemm_a8(a, w, scale_b=torch.ones(3, 2), epilogue="silu(gate) * up")


# ---- the sm_90a group-quantised kernels build here (no GPU needed) -------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("config,block_scaled,grouped", [("tile_128x128", False, False), ("tile_64x128", True, False),
                                                         ("tile_128x128", False, True),
                                                         ("persistent_128x128", False, False),
                                                         ("persistent_128x128_epi7", True, False)])
def test_sm90_group_kernel_builds_with_layout_and_no_spills(config, block_scaled, grouped):
    """store_groups (sm90_gemm_stores.hpp) on the CTA-per-tile wgmma kernels: packed arguments equal the cubin's
    metadata, fp8 wgmma, each row's group max in two butterfly shuffles (no shared memory), pair stores of the
    codes, nothing spilled. The persistent kernels' store_parked_groups (sm90_gemm_persistent.hpp): a row's max over
    the warp in five shuffles, its codes as 4-byte stores."""
    import re

    from fusedgemm.runtime.build import BuildSpec, code_object_dir
    from fusedgemm.runtime.codeobject import cubin_params
    from fusedgemm.runtime.gemm_spec import GemmKernel

    from code_objects import sass

    expr, dtypes = ("acc * m_vec(w)", {"w": "f32"}) if grouped else ("silu(acc * n_vec(s) + n_vec(b))",
                                                                      {"s": "f32", "b": "f32"})
    spec = GemmKernel("sm_90a", config, "fp8", "fp8e4m3fn", EpilogueSpec.of(E.parse(expr), dtypes, out_group=128),
                      "nk", block_scaled, grouped=grouped)
    build = BuildSpec(spec.unit, "sm_90a", spec.source())
    d = code_object_dir(build)
    sig = spec.signature
    assert "args.out_scale" in sig.flat_names and "args.ld_scale" in sig.flat_names
    params = cubin_params((d / build.file_name()).read_bytes())
    assert [(p.offset, p.size) for p in params[spec.kernel_name]] == list(zip(sig.offsets, sig.sizes))
    text = sass(d / build.file_name())
    assert re.search(r"\bQGMMA\.64x128x32\.F32\.E4M3\.E4M3\b", text)
    if "persistent" in config:  # a row per warp (the epilogue warps' loop, and the last tile's with the consumers)
        shuffles = len(re.findall(r"\bSHFL\.BFLY\b", text))
        assert shuffles and shuffles % 5 == 0, f"{shuffles} butterfly shuffles: xor 1, 2, 4, 8, 16 per row"
        assert re.search(r"\bSTG\.E\s", text), "a lane's 4 codes as one 4-byte store"
    else:
        if not grouped:  # (the grouped kernels' group walk shuffles too)
            assert len(re.findall(r"\bSHFL\.BFLY\b", text)) == 4, "rows row0 and row0 + 8: xor 1 and 2 each"
        assert len(re.findall(r"\bSTG\.E\.U16\b", text)) == 32, "a thread's 64 codes as 32 pair stores"
    assert not re.search(r"\b(LDL|STL)\b", text), "local memory traffic"
    log = (d / f"{spec.unit}.log").read_text()
    assert re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log) == [("0", "0")], log[-2000:]
