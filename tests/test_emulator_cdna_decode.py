"""The CDNA LDS tiles with K split inside the block (cdna_gemm.hpp kWarpsK > 1: cdna_lds_64x32_k4, 4 K slices of 2
waves; cdna_lds_32x32_k8, 8 slices of 2 waves, 16 waves a block; cdna_lds_64x64_k2, 2 slices of 4 waves). A pipeline
stage is one K block per slice (512, 1024 or 256 bytes of K); the slices' partial tiles are summed through LDS and
each tile's epilogue runs on one slice. In the emulator on gfx942 and gfx950 with the configs forced, outputs
poisoned, float64 oracles: gemm_a8's presets (fp8, int8) on ragged M / N and K from one 16-byte chunk to three whole
stages (the kernel for any K on partial stages, where whole slices see no K at all; the whole-K kernel exactly where
K fills whole stages); matmul_fused bf16 / fp16; a gate / up pair; and a planted bug: the barrier before the slices'
partial sums are read deleted must be reported as an LDS race. Block scales and grouped calls on these configs:
tests/test_emulator_blockscale.py, tests/test_emulator_grouped.py (both parametrised over the plan's configs)."""
from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
import fusedgemm.epilogue as E  # noqa: E402
from fusedgemm.plan import forced_config  # noqa: E402
from fusedgemm.reference import gemm_a8_reference  # noqa: E402
from fusedgemm.runtime import tile_configs  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from fusedgemm.testing.emulator import codeobjects, loader  # noqa: E402
from fusedgemm.testing.emulator.errors import HazardError  # noqa: E402
from fusedgemm.testing.emulator.runner import CodeObject, run_gemm_a8  # noqa: E402
from poisoned_outputs import launched_cdna_kernel, poisoned_outputs, rel_error  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

ARCHES = ("gfx942", "gfx950")
CONFIGS = ("cdna_lds_64x32_k4", "cdna_lds_32x32_k8", "cdna_lds_64x64_k2")
FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}


def _stage_bytes(config: str) -> int:
    return tile_configs.CONFIGS[config].stage_k_bytes


def _shapes(config: str):
    """(M, N, K) for 8-bit K: one row; rows past the block (two row blocks, the second ragged); N of one 16-column
    tile (the block's second wave has no columns) and ragged 48 / 144; K of one chunk, of a partial stage (whole slices
    past K), and of 1, 2 and 3 whole stages (the whole-K kernel: a tail of one stage, of two, the loop then one)."""
    s = _stage_bytes(config)
    block_m = tile_configs.CONFIGS[config].block_m
    return ((1, 48, 16), (block_m + 5, 144, s // 2 + 48), (3, 16, s), (block_m, 48, 2 * s), (1, 144, 3 * s),
            (block_m - 3, 48, s + 128))


def _operands(kind, arch, m, n, k, g):
    if kind == "fp8":
        return ((torch.randn(m, k, generator=g) * 2).to(FP8[arch]), (torch.randn(n, k, generator=g) * 2).to(FP8[arch]))
    return (torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g),
            torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g))


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_presets_ragged(arch, config, kind, seed):
    """The ahead-of-time bias + SiLU and plain presets through gemm_a8, the kernel K asks for."""
    g = torch.Generator().manual_seed(seed)
    for i, (m, n, k) in enumerate(_shapes(config)):
        a, w = _operands(kind, arch, m, n, k, g)
        silu = i % 2 == 0
        bias = torch.randn(n, generator=g).to(torch.bfloat16) if silu else None
        sa = torch.rand(m, generator=g) + 0.5
        sb = torch.rand(n, generator=g) * (0.01 if kind == "int8" else 0.5) + 0.001
        with poisoned_outputs(), forced_config(config), emulate(arch) as dev:
            y = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, activation="silu" if silu else None,
                           out_dtype=torch.bfloat16)
        what = f"{arch} {config} {kind} {m}x{n}x{k}"
        launched_cdna_kernel(dev, config, k % _stage_bytes(config) == 0, what)
        ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu" if silu else "none",
                                out_dtype=torch.float64, unrounded=True)
        assert rel_error(y, ref) < 8e-3, what


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("config", CONFIGS)
def test_matmul_fused_16_bit(arch, config, seed):
    """bf16 and fp16 with plain B (K in elements: a stage is half as many), ragged N (N % 16 == 8), bias + SiLU."""
    g = torch.Generator().manual_seed(seed)
    s = _stage_bytes(config) // 2
    for dtype, (m, n, k) in ((torch.bfloat16, (5, 40, s + 24)), (torch.float16, (33, 72, 2 * s)),
                             (torch.bfloat16, (1, 48, 3 * s))):
        a, b = (torch.randn(r, k, generator=g).to(dtype) for r in (m, n))
        bias = torch.randn(n, generator=g).to(dtype)
        with poisoned_outputs(), forced_config(config), emulate(arch) as dev:
            y = fg.matmul_fused(a, b, bias, activation="silu")
        what = f"{arch} {config} {dtype} {m}x{n}x{k}"
        launched_cdna_kernel(dev, config, k % s == 0, what)
        ref = torch.nn.functional.silu(a.double() @ b.double().T + bias.double())
        assert rel_error(y, ref) < 1e-2, what


@pytest.mark.parametrize("config", CONFIGS)
def test_gate_up_pair(config, seed):
    """A paired epilogue (gate 2j, up 2j + 1 -> column j): the lane exchange inside a slice's epilogue (gfx942)."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 7, 80, _stage_bytes(config) + 64
    a, w = _operands("fp8", "gfx942", m, n, k, g)
    with poisoned_outputs(), forced_config(config), emulate("gfx942") as dev:
        y = fg.gemm_a8(a, fg.preshuffle(w), epilogue=E.parse("silu(gate) * up"), out_dtype=torch.float32)
    launched_cdna_kernel(dev, config, False, "pair")
    acc = a.double() @ w.double().T
    assert y.shape == (m, n // 2)
    assert rel_error(y, torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2]) < 1e-6


def test_deleted_reduction_barrier_is_an_lds_race(seed):
    """Planted bug: the kernel's last s_barrier (between the slices' partial tiles written to LDS and their sums
    read) deleted: the emulator must report an LDS race."""
    arch, config = "gfx942", "cdna_lds_64x32_k4"
    unit, name, _sig, source = codeobjects.gemm_a8_kernel(arch, config, "fp8", "bf16", "none")
    obj = CodeObject.build(unit, arch, source)
    body = loader.function_text(obj.listing, name)
    assert len(re.findall(r"\ts_barrier\n", body)) == 4, "prologue, two in the twice-unrolled loop, the reduction"
    head, _sep, tail = body.rpartition("\ts_barrier\n")
    code = CodeObject.from_listing(obj.listing.replace(body, head + tail), arch)
    g = torch.Generator().manual_seed(seed)
    m, n, k = 37, 48, 320
    a, w = _operands("fp8", arch, m, n, k, g)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    with pytest.raises(HazardError, match="LDS race"):
        run_gemm_a8(arch, config, a, fg.preshuffle(w).data, out, code=code)


def test_block_scales_refused_by_name(seed):
    """cdna_lds_32x32_k8 has no block-scaled kernels (two row tiles a wave; the scale hand-out needs row groups of
    four): pinned, gemm_a8 and grouped_gemm_a8 with block scales are refused naming the configs that have them,
    before any launch; unpinned, a decode call's block-scaled plan takes one of those (plan/cdna.py
    BLOCK_SCALED_CONFIGS) and matches the block oracle. (cdna_lds_64x32_k4's block-scaled kernels:
    tests/test_emulator_blockscale.py and below.)"""
    from fusedgemm.plan import cdna
    from fusedgemm.reference import gemm_a8_block_reference

    m, n, k = 3, 256, 256
    x, w = torch.randn(m, k), torch.randn(2, n, k)
    offs = torch.tensor([1, 3], dtype=torch.int32)
    with poisoned_outputs(), emulate("gfx942") as dev:
        xq, sx = fg.quantize_rows(x, "fp8", group=128)
        per = [fg.quantize_weight(w[e], "fp8", block=128) for e in range(2)]
        w8, sw = torch.stack([q for q, _s in per]), torch.stack([s for _q, s in per])
        launched = len(dev.launches)
        with forced_config("cdna_lds_32x32_k8"):
            with pytest.raises(ValueError, match="block-scaled kernel"):
                fg.gemm_a8(xq, fg.preshuffle(w8[0]), scale_a=sx, scale_b=sw[0], out_dtype=torch.float32)
            with pytest.raises(ValueError, match="block-scaled kernel"):
                fg.grouped_gemm_a8(xq, fg.preshuffle(w8), scale_a=sx, scale_b=sw, offs=offs, out_dtype=torch.float32)
        assert len(dev.launches) == launched
        y = fg.gemm_a8(xq, fg.preshuffle(w8[0]), scale_a=sx, scale_b=sw[0], out_dtype=torch.float32)
    name = dev.launches[-1][0]
    assert "_bs_" in name and any(name.endswith(c) for c in cdna.BLOCK_SCALED_CONFIGS), name
    assert rel_error(y, gemm_a8_block_reference(xq, w8[0], scale_a=sx, scale_b=sw[0], unrounded=True)) < 1e-6


@pytest.mark.parametrize("arch", ARCHES)
def test_block_scaled_split_k(arch, seed):
    """cdna_lds_64x32_k4 with DeepSeek block scales: a slice's K block past K (K of 1 and 5 blocks: the last stage's
    other slices) takes the last block's scales (its products are zero); K of 4 and 8 blocks fills whole stages (the
    whole-K kernel, prefetch clamped). Both scale sides, bias + SiLU; one side only (scale_b a block, scale_a none)."""
    from fusedgemm.reference import gemm_a8_block_reference

    config = "cdna_lds_64x32_k4"
    for m, n, k in ((3, 272, 128), (37, 144, 640), (64, 128, 512), (1, 48, 1024)):
        x, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        with poisoned_outputs(), emulate(arch) as dev:
            xq, sx = fg.quantize_rows(x, "fp8", group=128)
            wq, sw = fg.quantize_weight(w, "fp8", block=128)
            with forced_config(config):
                y = fg.gemm_a8(xq, fg.preshuffle(wq), bias, scale_a=sx, scale_b=sw, epilogue="bias_silu",
                               out_dtype=torch.float32)
                y1 = fg.gemm_a8(xq, fg.preshuffle(wq), scale_b=sw, out_dtype=torch.float32)
        what = f"{arch} {m}x{n}x{k}"
        names = [name for name, _g, _b in dev.launches if "_bs_" in name]
        assert len(names) == 2 and all(nm.endswith(config) for nm in names), what
        assert all(nm.endswith("_whole_k_" + config) == (k % 512 == 0) for nm in names), (what, names)
        ref = gemm_a8_block_reference(xq, wq, bias, scale_a=sx, scale_b=sw, epilogue="bias_silu", unrounded=True)
        assert rel_error(y, ref) < 1e-6, what
        assert rel_error(y1, gemm_a8_block_reference(xq, wq, scale_b=sw, unrounded=True)) < 1e-6, what


@pytest.mark.parametrize("arch", ARCHES)
def test_block_scaled_gate_up_pair_split_k(arch, seed):
    """A gate / up pair with block scales on cdna_lds_64x32_k4 (pair-ordered scale_b: the wave's even and odd columns
    read the gate's and the up's rows), K of a partial stage and of one whole stage."""
    from fusedgemm.reference import block_scaled_acc

    g = torch.Generator().manual_seed(seed)
    config = "cdna_lds_64x32_k4"
    for m, n, k in ((5, 512, 640), (64, 256, 512)):
        a = (torch.randn(m, k, generator=g) * 2).to(FP8[arch])
        w = (torch.randn(n, k, generator=g) * 0.5).to(FP8[arch])
        sa = torch.rand(m, k // 128, generator=g) + 0.5
        sb = torch.rand(n // 128, k // 128, generator=g) + 0.5
        with poisoned_outputs(), forced_config(config), emulate(arch) as dev:
            y = fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb, epilogue="silu(gate) * up",
                           out_dtype=torch.float32)
        what = f"{arch} {m}x{n}x{k}"
        names = [name for name, _g, _b in dev.launches if "_bs_" in name]
        assert len(names) == 1 and names[0].endswith(config), (what, dev.launches)
        acc = block_scaled_acc(a, w, sa, sb, pairs=True)
        assert rel_error(y, torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2]) < 1e-6, what
