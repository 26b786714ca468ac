"""Block-scaled fp8 (DeepSeek-V3's 1 x 128 activation / 128 x 128 weight scales) on AMD: the register-direct MFMA
kernels with PortableBlockScaled<Config> executed in the emulator as gfx942 and gfx950, through gemm_a8, against the
block formula's float64 oracle (reference.gemm_a8_block_reference): every AMD block config (the 8-way split-K decode
tiles, 128 x 128), ragged M / N / K (K not a multiple of 128, N not of 128), block scales on both sides and on one
side only (the other a vector in the epilogue), Linear8(block=128). Outputs poisoned."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
from fusedgemm.blockscale import AMD_BLOCK_CONFIGS  # noqa: E402
from fusedgemm.plan import forced_config  # noqa: E402
from fusedgemm.reference import gemm_a8_block_reference  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from poisoned_outputs import poisoned_outputs  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)


def rel(y, ref):
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
@pytest.mark.parametrize("config", AMD_BLOCK_CONFIGS)
def test_block_scales_every_config(arch, config, seed):
    m, n, k = 37, 272, 400  # N: three 128-row scale blocks, the last ragged; K: four, the last of 16 values
    x, w = torch.randn(m, k), torch.randn(n, k)
    bias = torch.randn(n)
    with poisoned_outputs(), emulate(arch) as dev:
        xq, sx = fg.quantize_rows(x, "fp8", group=128)
        wq, sw = fg.quantize_weight(w, "fp8", block=128)
        with forced_config(config):
            y = fg.gemm_a8(xq, fg.preshuffle(wq), bias, scale_a=sx, scale_b=sw, epilogue="bias_gelu",
                           out_dtype=torch.float32)
    assert any("_bs_" in name for name, _g, _b in dev.launches)
    ref = gemm_a8_block_reference(xq, wq, bias, scale_a=sx, scale_b=sw, epilogue="bias_gelu", unrounded=True)
    assert rel(y, ref) < 1e-6


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
def test_one_side_blocks_and_the_plan(arch, seed):
    """Block scale_b with a per-token scale_a (the epilogue's), block scale_a with no scale_b; the plan's own
    choice (decode and prefill M) and Linear8(block=128) on the emulated kernels."""
    n, k = 256, 256
    w = torch.randn(n, k)
    with poisoned_outputs(), emulate(arch):
        wq, sw = fg.quantize_weight(w, "fp8", block=128)
        for m in (1, 70):
            x = torch.randn(m, k)
            xq, sx = fg.quantize_rows(x, "fp8")
            y = fg.gemm_a8(xq, fg.preshuffle(wq), scale_a=sx, scale_b=sw, out_dtype=torch.float32)
            ref = gemm_a8_block_reference(xq, wq, scale_a=sx, scale_b=sw, unrounded=True)
            assert rel(y, ref) < 1e-6, m
            xg, sg = fg.quantize_rows(x, "fp8", group=128)
            y = fg.gemm_a8(xg, fg.preshuffle(wq), scale_a=sg, out_dtype=torch.float32)
            assert rel(y, gemm_a8_block_reference(xg, wq, scale_a=sg, unrounded=True)) < 1e-6, m
        lin = torch.nn.Linear(k, n)
        mod = fg.nn.Linear8.from_linear(lin, "fp8", activation="silu", block=128)
        x = torch.randn(3, k)
        y = mod(x)
    xg, sg = fg.quantize_rows(x, mod.weight.dtype, group=128)
    ref = gemm_a8_block_reference(xg, fg.unshuffle(fg.PreshuffledWeight(mod.weight)), lin.bias, scale_a=sg,
                                  scale_b=mod.weight_scale, epilogue="bias_silu", out_dtype=torch.float32)
    assert rel(y, ref) < 1e-2  # y is rounded to x's dtype (fp32 here) once; the oracle rounded to fp32 too


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
@pytest.mark.parametrize("config", AMD_BLOCK_CONFIGS)
def test_grouped_block_scales(arch, config, seed):
    """grouped_gemm_a8 with DeepSeek-V3's block scales (scale_a [M, ceil(K/128)], scale_b [G, ceil(N/128),
    ceil(K/128)]): every AMD config, ragged groups (an empty one, one row, one across row blocks), each group
    against the block formula's oracle on its own rows and its own weight's scales."""
    sizes = (5, 0, 130, 1)
    g, n, k = len(sizes), 272, 400
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32)
    x, w = torch.randn(sum(sizes), k), torch.randn(g, n, k)
    with poisoned_outputs(), emulate(arch) as dev:
        xq, sx = fg.quantize_rows(x, "fp8", group=128)
        per = [fg.quantize_weight(w[e], "fp8", block=128) for e in range(g)]
        w8, sw = torch.stack([q for q, _s in per]), torch.stack([s for _q, s in per])
        with forced_config(config):
            y = fg.grouped_gemm_a8(xq, fg.preshuffle(w8), scale_a=sx, scale_b=sw, offs=offs, epilogue="silu",
                                   out_dtype=torch.float32)
    assert any("_bs_" in name and "_grouped_" in name for name, _g, _b in dev.launches)
    r0 = 0
    for e, s in enumerate(sizes):
        if s:
            ref = gemm_a8_block_reference(xq[r0:r0 + s], w8[e], scale_a=sx[r0:r0 + s], scale_b=sw[e],
                                          epilogue="silu", unrounded=True)
            assert rel(y[r0:r0 + s], ref) < 1e-6, e
        r0 += s
