"""The LDS-staged, pipelined CDNA GEMM (hip_src/include/fusedgemm/cdna_gemm.hpp, config cdna_lds_128x128) in the
AMD emulator: its real gfx942 and gfx950 code objects on CPU tensors, fp8 and int8, ragged M / N / K (rows past M and
K chunks past K through the buffer descriptors' range check; K not a multiple of the 128-byte K block) and whole K
blocks, presets and
an expression epilogue with an aux operand through the public API, outputs poisoned, a float64 oracle, every hazard
check on (waits, LDS races across waves, LDS writes not completed before a barrier); and a planted bug: the barrier
between the LDS write of a K block and its reads deleted must be reported as an LDS race."""
from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
import fusedgemm.epilogue as E  # noqa: E402
from fusedgemm.plan import forced_config  # noqa: E402
from fusedgemm.reference import gemm_a8_reference  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from fusedgemm.testing.emulator import codeobjects, loader  # noqa: E402
from fusedgemm.testing.emulator.errors import HazardError  # noqa: E402
from fusedgemm.testing.emulator.runner import CodeObject, run_gemm_a8  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

CONFIG = "cdna_lds_128x128"
ARCHES = ("gfx942", "gfx950")
FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
# (M, N, K): one row; a partial row tile; two row tiles, the second of 3 rows, and a partial column tile (144 =
# 128 + 16); K of 2.5 K blocks (320), of one partial block (96), of one chunk (16), and of 1.5 blocks (192); then
# whole K blocks (K % 128 == 0, every LLM shape; the whole-K kernel, CdnaWholeKBlocks): 3 (its loop once, then a
# tail of one block), 2 (a tail of two), 1 and 4 (the loop, then a tail of two).
SHAPES = ((131, 144, 320), (37, 48, 96), (1, 144, 16), (37, 144, 192), (131, 144, 384), (37, 48, 256),
          (1, 144, 128), (37, 48, 512))


def _operands(kind, arch, m, n, k, g):
    if kind == "fp8":
        return (torch.randn(m, k, generator=g) * 2).to(FP8[arch]), (torch.randn(n, k, generator=g) * 2).to(FP8[arch])
    return (torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g),
            torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g))


def _check(out, ref, tol, what):
    assert not out.isnan().any(), f"{what}: {int(out.isnan().sum())} outputs never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < tol, f"{what}: relative error {err:.2e}"


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("config", [CONFIG, "cdna_lds_64x128"])
def test_presets_ragged(arch, kind, config, seed):
    """bias_silu (bias, both scales) and none on every shape, the shipped (ahead-of-time) kernels of the 128 x 128
    block and of its 64-row twin (cdna_lds_64x128: the same 4 waves along N, 64 rows each); the output sits in
    front of a poisoned tail that must stay untouched."""
    g = torch.Generator().manual_seed(seed)
    for i, (m, n, k) in enumerate(SHAPES):
        a, w = _operands(kind, arch, m, n, k, g)
        out_dtype = (torch.bfloat16, torch.float16)[i % 2]
        act, bias_on = ("silu", True) if i % 2 == 0 else ("none", False)
        store = torch.full((m * n + 64,), float("nan"), dtype=out_dtype)
        out = store[:m * n].view(m, n)
        bias = torch.randn(n, generator=g).to(out_dtype) if bias_on else None
        sa = torch.rand(m, generator=g) + 0.5
        sb = torch.rand(n, generator=g) * (0.01 if kind == "int8" else 0.5) + 0.001
        run_gemm_a8(arch, config, a, fg.preshuffle(w).data, out, act=act, bias=bias, scale_a=sa, scale_b=sb)
        epi = "bias_silu" if bias_on else "none"
        ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue=epi, out_dtype=torch.float64,
                                unrounded=True)
        _check(out, ref, 8e-3, f"{arch} {kind} {epi} {m}x{n}x{k}")
        assert store[m * n:].isnan().all(), "the kernel wrote past the end of the output"


@pytest.mark.parametrize("arch", ARCHES)
def test_xcd_tile_order_covers_every_tile_once(arch, seed):
    """The LDS template deals its tiles per XCD (cdna_gemm.hpp cdna_workgroup_tile): on a grid of 5 x 3 tiles (more
    than the 8 XCDs, a partial group of rows, ragged last row and column tiles) every tile is computed exactly once:
    a missed tile leaves NaN, a tile computed twice by two workgroups is the same value, so the map must also be
    onto. The model's copy of the order (plan/cdna_xcd_order.py) is the same bijection."""
    from fusedgemm.plan import cdna_xcd_order as xo
    g = torch.Generator().manual_seed(seed)
    m, n, k = 300, 624, 256
    a, w = _operands("fp8", arch, m, n, k, g)
    store = torch.full((m * n + 64,), float("nan"), dtype=torch.bfloat16)
    out = store[:m * n].view(m, n)
    run_gemm_a8(arch, CONFIG, a, fg.preshuffle(w).data, out)
    _check(out, a.double() @ w.double().T, 8e-3, f"{arch} {m}x{n}x{k}")
    assert store[m * n:].isnan().all(), "the kernel wrote past the end of the output"
    gx, gy = -(-n // 128), -(-m // 128)
    order = [xo.xcd_order_tile(i, gx, gy) for i in range(gx * gy)]
    assert sorted(order) == [(x, y) for x in range(gx) for y in range(gy)]
    assert order[:2] == [(0, 0), (0, 2)], "ids 0 and 1 sit on different XCDs: the second starts its own run"


@pytest.mark.parametrize("arch", ARCHES)
def test_expression_epilogue_with_aux_through_the_api(arch, seed):
    """fg.gemm_a8 inside `emulate` with the config forced: a generated (just-in-time) kernel of an expression with
    column and aux operands, fp32 output allocated poisoned (NaN) by the op."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 37, 144, 320
    a, w = _operands("fp8", arch, m, n, k, g)
    s, res = torch.rand(n, generator=g) + 0.5, torch.randn(m, n, generator=g).to(torch.bfloat16)
    real_empty = torch.empty

    def poisoned(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.dtype.is_floating_point and t.element_size() > 1 and t.numel():
            t.fill_(float("nan"))
        return t

    torch.empty = poisoned
    try:
        with forced_config(CONFIG), emulate(arch) as dev:
            y = fg.gemm_a8(a, fg.preshuffle(w), epilogue=E.parse("silu(acc * n_vec(s)) + aux(res)"),
                           operands={"s": s, "res": res}, out_dtype=torch.float32)
    finally:
        torch.empty = real_empty
    assert len(dev.launches) == 1
    kname = dev.launches[0][0]
    assert kname.startswith("fg_gemm_a8_fp8_f32_e") and kname.endswith(CONFIG), kname
    pre = (a.double() @ w.double().T) * s.double()
    _check(y, torch.nn.functional.silu(pre) + res.double(), 1e-6, f"{arch} expression")


def test_paired_swiglu_store(seed):
    """A paired epilogue (gate 2j, up 2j + 1 -> column j): the lane exchange before the bound checks (gfx950 only:
    the store path is the same code on both arches)."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 37, 144, 96
    a, w = _operands("fp8", "gfx950", m, n, k, g)
    with forced_config(CONFIG), emulate("gfx950") as dev:
        y = fg.gemm_a8(a, fg.preshuffle(w), epilogue=E.parse("silu(gate) * up"), out_dtype=torch.float32)
    assert len(dev.launches) == 1 and dev.launches[0][0].endswith(CONFIG)
    acc = a.double() @ w.double().T
    assert y.shape == (m, n // 2)
    _check(y, torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2], 1e-6, "paired")


@pytest.mark.parametrize("which", ["first", "last"])
def test_deleted_barrier_is_an_lds_race(which, seed):
    """Planted bugs: one s_barrier of the kernel deleted -- the first (after the prologue's LDS write of K block 0,
    before any wave reads it: read-after-write) or the last (the second K block's of the twice-unrolled loop: the
    next block's write into the buffer other waves still read, write-after-read). The emulator must report an LDS
    race either way."""
    arch = "gfx942"
    unit, name, _sig, source = codeobjects.gemm_a8_kernel(arch, CONFIG, "fp8", "bf16", "none")
    obj = CodeObject.build(unit, arch, source)
    body = loader.function_text(obj.listing, name)
    count = len(re.findall(r"\ts_barrier\n", body))
    assert count == 3, f"expected the prologue's barrier and one per K block of the twice-unrolled loop, got {count}"
    if which == "first":
        mutated = body.replace("\ts_barrier\n", "", 1)
    else:
        head, _sep, tail = body.rpartition("\ts_barrier\n")
        mutated = head + tail
    code = CodeObject.from_listing(obj.listing.replace(body, mutated), arch)
    g = torch.Generator().manual_seed(seed)
    m, n, k = 37, 48, 320
    a, w = _operands("fp8", arch, m, n, k, g)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    with pytest.raises(HazardError, match="LDS race"):
        run_gemm_a8(arch, CONFIG, a, fg.preshuffle(w).data, out, code=code)


@pytest.mark.parametrize("which", ["first", "last"])
def test_gfx950_loads_into_lds_wait_before_the_barrier(which, seed):
    """gfx950 copies A straight into LDS (buffer_load_dwordx4 ... lds): the bytes land when the load completes, so
    each wave waits for its loads (vmcnt) before the barrier hands the buffer to the others. Planted bug: that wait
    taken out of the prologue's or the loop's last barrier; the emulator must report the LDS bytes read before they
    were written. The unmutated kernel runs clean (the hazard comes from the mutation alone)."""
    arch = "gfx950"
    unit, name, _sig, source = codeobjects.gemm_a8_kernel(arch, CONFIG, "fp8", "bf16", "none")
    obj = CodeObject.build(unit, arch, source)
    body = loader.function_text(obj.listing, name)
    assert re.search(r"\tbuffer_load_dwordx4 [^\n]* offen lds\n", body), "A is loaded straight into LDS on gfx950"
    waited = "\ts_waitcnt vmcnt(0) lgkmcnt(0)\n\ts_barrier\n"
    assert body.count(waited) == 3, "the prologue's barrier and one per K block of the twice-unrolled loop"
    unwaited = "\ts_waitcnt lgkmcnt(0)\n\ts_barrier\n"
    if which == "first":
        mutated = body.replace(waited, unwaited, 1)
    else:
        head, _sep, tail = body.rpartition(waited)
        mutated = head + unwaited + tail
    g = torch.Generator().manual_seed(seed)
    m, n, k = 37, 48, 320
    a, w = _operands("fp8", arch, m, n, k, g)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    run_gemm_a8(arch, CONFIG, a, fg.preshuffle(w).data, out, code=CodeObject.from_listing(obj.listing, arch))
    _check(out, a.double() @ w.double().T, 1e-2, "unmutated")
    code = CodeObject.from_listing(obj.listing.replace(body, mutated), arch)
    with pytest.raises(HazardError, match="has not written yet"):
        run_gemm_a8(arch, CONFIG, a, fg.preshuffle(w).data, out, code=code)
