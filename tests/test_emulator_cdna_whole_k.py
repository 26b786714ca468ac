"""The CDNA LDS configs' two kernels (cdna_gemm.hpp): one for any K, whose loads carry a K-edge test, and
CdnaWholeKBlocks<Config> for K filling whole 128-byte K blocks, without it (its loop stops before the last blocks and
a tail runs them: the loads of a block past K would read past the buffer windows). The host launches the second
exactly where K * bytes % 128 == 0 (runtime/gemm_spec.py whole_k_blocks, in the launch plans). In the emulator on
gfx942 and gfx950, through the public API with the configs forced: each call launches the kernel its K asks for (its
name says which) and matches the float64 oracle, outputs poisoned -- gemm_a8's ahead-of-time presets (fp8, int8) on
both sides of the block, block-scaled gemm_a8 and grouped_gemm_a8, grouped_matmul (bf16) and grouped_gemm_a8 (int8),
and the group-quantised gate / up pairs (cdna_lds_128x256; with block scales cdna_lds_64x256). matmul_fused's
bf16 / fp16 and the presets' ragged shapes: tests/test_emulator_cdna_gemm16.py, tests/test_emulator_cdna_gemm.py."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
from fusedgemm.plan import forced_config  # noqa: E402
from fusedgemm.reference import block_scaled_acc, gemm_a8_block_reference, gemm_a8_reference  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from poisoned_outputs import check_group_codes, launched_cdna_kernel, poisoned_outputs, rel_error  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

ARCHES = ("gfx942", "gfx950")
FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
CONFIG = "cdna_lds_128x128"


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_presets_take_the_kernel_their_k_asks_for(arch, kind, seed):
    """K just below, at and above whole K blocks (1, 2 and 3 blocks and ragged neighbours): the preset bias + SiLU
    kernel of the ahead-of-time unit, the whole-K one exactly where K % 128 == 0."""
    g = torch.Generator().manual_seed(seed)
    m, n = 37, 48
    for k in (112, 128, 144, 240, 256, 384, 400):
        if kind == "fp8":
            a, w = ((torch.randn(r, k, generator=g) * 2).to(FP8[arch]) for r in (m, n))
        else:
            a, w = (torch.randint(-128, 128, (r, k), dtype=torch.int8, generator=g) for r in (m, n))
        bias = torch.randn(n, generator=g).to(torch.bfloat16)
        sa = torch.rand(m, generator=g) + 0.5
        sb = torch.rand(n, generator=g) * (0.01 if kind == "int8" else 0.5) + 0.001
        with poisoned_outputs(), forced_config(CONFIG), emulate(arch) as dev:
            y = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, activation="silu",
                           out_dtype=torch.bfloat16)
        what = f"{arch} {kind} K={k}"
        launched_cdna_kernel(dev, CONFIG, k % 128 == 0, what)
        ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=torch.float64,
                                unrounded=True)
        assert rel_error(y, ref) < 8e-3, what


@pytest.mark.parametrize("arch", ARCHES)
def test_block_scaled(arch, seed):
    """DeepSeek block scales (1 x 128 activations, 128 x 128 weights) with K of 3 whole blocks on the whole-K kernel;
    K of 3.125 blocks is tests/test_emulator_blockscale.py's."""
    torch.manual_seed(seed)
    m, n, k = 37, 272, 384
    x, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    with poisoned_outputs(), emulate(arch) as dev:
        xq, sx = fg.quantize_rows(x, "fp8", group=128)
        wq, sw = fg.quantize_weight(w, "fp8", block=128)
        dev.launches.clear()
        with forced_config(CONFIG):
            y = fg.gemm_a8(xq, fg.preshuffle(wq), bias, scale_a=sx, scale_b=sw, epilogue="bias_gelu",
                           out_dtype=torch.float32)
    launched_cdna_kernel(dev, CONFIG, True, f"{arch} block-scaled")
    ref = gemm_a8_block_reference(xq, wq, bias, scale_a=sx, scale_b=sw, epilogue="bias_gelu", unrounded=True)
    assert rel_error(y, ref) < 1e-6


@pytest.mark.parametrize("arch", ARCHES)
def test_grouped_block_scaled(arch, seed):
    """grouped_gemm_a8 with block scales, ragged groups, K of 1 and 2 blocks, on the whole-K kernel (its prefetch
    clamped to the last block: a single block, and an even count; the pairs below take an odd one). The loader
    once dropped `v_accvgpr_write_b32 ... ;  Reload Reuse` lines of such listings
    (tests/test_emulator_loader_comments.py)."""
    for k in (128, 256):
        _grouped_block_scaled(arch, seed, k)


def _grouped_block_scaled(arch, seed, k):
    torch.manual_seed(seed)
    sizes, n = (5, 0, 130, 1), 144
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32)
    x, w = torch.randn(sum(sizes), k), torch.randn(len(sizes), n, k)
    with poisoned_outputs(), emulate(arch) as dev:
        xq, sx = fg.quantize_rows(x, "fp8", group=128)
        per = [fg.quantize_weight(w[e], "fp8", block=128) for e in range(len(sizes))]
        w8, sw = torch.stack([q for q, _s in per]), torch.stack([s for _q, s in per])
        w8_shuffled = fg.preshuffle(w8)
        dev.launches.clear()
        with forced_config(CONFIG):
            y = fg.grouped_gemm_a8(xq, w8_shuffled, scale_a=sx, scale_b=sw, offs=offs, epilogue="silu",
                                   out_dtype=torch.float32)
    launched_cdna_kernel(dev, CONFIG, True, f"{arch} grouped block-scaled")
    r0 = 0
    for e, s in enumerate(sizes):
        if s:
            ref = gemm_a8_block_reference(xq[r0:r0 + s], w8[e], scale_a=sx[r0:r0 + s],
                                          scale_b=sw[e], epilogue="silu", unrounded=True)
            assert rel_error(y[r0:r0 + s], ref) < 1e-6, e
        r0 += s


@pytest.mark.parametrize("arch", ARCHES)
def test_grouped_on_both_kernels(arch, seed):
    """grouped_matmul bf16 (bias + SiLU per expert) with K of 2 blocks (whole-K kernel) and of 1.125 blocks (the
    other); grouped_gemm_a8 int8 with K of one block."""
    torch.manual_seed(seed)
    sizes = (5, 0, 1, 130)
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32)
    n = 48
    for k in (128, 72):
        x = torch.randn(sum(sizes), k).bfloat16()
        w = (torch.randn(len(sizes), n, k) / 8).bfloat16()
        bias = torch.randn(len(sizes), n)
        with poisoned_outputs(), forced_config(CONFIG), emulate(arch) as dev:
            y = fg.grouped_matmul(x, w, offs=offs, bias=bias, activation="silu")
        launched_cdna_kernel(dev, CONFIG, k % 64 == 0, f"{arch} grouped bf16 K={k}")
        ref, r0 = [], 0
        for e, s in enumerate(sizes):
            ref.append(torch.nn.functional.silu(x[r0:r0 + s].double() @ w[e].double().T + bias[e].double()))
            r0 += s
        assert rel_error(y, torch.cat(ref)) < 1e-2, k
    k = 128
    xi = torch.randint(-20, 20, (sum(sizes), k), dtype=torch.int8)
    wi = torch.randint(-20, 20, (len(sizes), n, k), dtype=torch.int8)
    with poisoned_outputs(), forced_config(CONFIG), emulate(arch) as dev:
        y = fg.grouped_gemm_a8(xi, fg.preshuffle(wi), offs=offs, out_dtype=torch.float32)
    launched_cdna_kernel(dev, CONFIG, True, f"{arch} grouped int8")
    starts = [0, *offs.tolist()[:-1]]
    ref = torch.cat([xi[r0:r0 + s].double() @ wi[e].double().T for e, (r0, s) in enumerate(zip(starts, sizes))])
    assert torch.equal(y.double(), ref)


@pytest.mark.parametrize("arch", ARCHES)
def test_group_quantised_pairs(arch, seed):
    """Gate / up pairs with out_group=128 and K of 2 whole blocks: the 2 x 4-wave 128 x 256 block, and with block
    scales the 4-wave 64 x 256 one (K of 3 blocks), each on its whole-K kernel."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 131, 288, 256  # 144 outputs: a group of 128 and one of 16
    a = (torch.randn(m, k, generator=g) * 2).to(FP8[arch])
    w = (torch.randn(n, k, generator=g) * 2).to(FP8[arch])
    with poisoned_outputs(), emulate(arch) as dev:
        wq = fg.preshuffle(w)
        dev.launches.clear()
        codes, scales = fg.gemm_a8(a, wq, epilogue="silu(gate) * up", out_group=128)
    launched_cdna_kernel(dev, "cdna_lds_128x256", True, f"{arch} pairs")
    acc = a.double() @ w.double().T
    check_group_codes(codes, scales, torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2], f"{arch} pairs")

    m, n, k = 70, 512, 384
    a = (torch.randn(m, k, generator=g) * 2).to(FP8[arch])
    w = (torch.randn(n, k, generator=g) * 0.5).to(FP8[arch])
    sa = torch.rand(m, k // 128, generator=g) + 0.5
    sb = torch.rand(n // 128, k // 128, generator=g) + 0.5  # pair-ordered: row 2 (c // 256) + c % 2 for column c
    with poisoned_outputs(), emulate(arch) as dev:
        wq = fg.preshuffle(w)
        dev.launches.clear()
        codes, scales = fg.gemm_a8(a, wq, scale_a=sa, scale_b=sb, epilogue="silu(gate) * up", out_group=128)
    launched_cdna_kernel(dev, "cdna_lds_64x256", True, f"{arch} block-scaled pairs")
    acc = block_scaled_acc(a, w, sa, sb, pairs=True)
    check_group_codes(codes, scales, torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2],
                      f"{arch} block-scaled pairs")
