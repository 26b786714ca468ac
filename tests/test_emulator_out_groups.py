"""gemm_a8(out_group=128) in the AMD emulator: the real gfx942 / gfx950 code objects of the LDS kernel with the
group-quantised store (cdna_gemm.hpp cdna_store_groups) through the public API on CPU tensors, held to the float64
oracle -- the epilogue's values rounded to fp32, then quantize_rows' rule per 128-column group -- with outputs
poisoned, ragged M / N / K (a partial last group, rows past M), fp8 and int8 inputs, per-token / per-channel and
DeepSeek block scales, an expression with an aux operand; every hazard check on. A planted bug: the barrier between
the waves' LDS partial maxima and their reads deleted must be reported as an LDS race."""
from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
import fusedgemm.epilogue as E  # noqa: E402
from fusedgemm.epilogue.codegen import EpilogueSpec  # noqa: E402
from fusedgemm.reference import block_scaled_acc  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from fusedgemm.testing.emulator import codeobjects, loader  # noqa: E402
from fusedgemm.testing.emulator.errors import HazardError  # noqa: E402
from fusedgemm.testing.emulator.machine import Machine  # noqa: E402
from fusedgemm.testing.emulator.memory import Memory  # noqa: E402
from fusedgemm.testing.emulator.runner import CodeObject, pack  # noqa: E402
from poisoned_outputs import POISON_BYTE, check_group_codes as _check, poisoned_outputs  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

ARCHES = ("gfx942", "gfx950")
FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
# (M, N, K): two row blocks, the second of 3 rows, and a last group of 16 columns (144 = 128 + 16), K of 2.5 K
# blocks; one row block of 37 rows, two whole groups, K of one partial K block.
SHAPES = ((131, 144, 320), (37, 256, 96))


def _call(arch, *args, grouped=False, **kwargs):
    """gemm_a8 (grouped: grouped_gemm_a8) with out_group=128 in the emulator, every tensor it allocates poisoned."""
    with poisoned_outputs(), emulate(arch) as dev:
        codes, scales = (fg.grouped_gemm_a8 if grouped else fg.gemm_a8)(*args, out_group=128, **kwargs)
    paired = isinstance(kwargs.get("epilogue"), str) and "gate" in kwargs["epilogue"]
    config = "cdna_lds_128x256" if paired else "cdna_lds_128x128"
    assert len(dev.launches) == 1 and dev.launches[0][0].endswith(config), dev.launches
    return codes, scales


@pytest.mark.parametrize("arch", ARCHES)
def test_presets_fp8_and_int8(arch, seed):
    g = torch.Generator().manual_seed(seed)
    for m, n, k in SHAPES:
        a = (torch.randn(m, k, generator=g) * 2).to(FP8[arch])
        w = (torch.randn(n, k, generator=g) * 2).to(FP8[arch])
        bias, sa, sb = torch.randn(n, generator=g), torch.rand(m, generator=g) + 0.5, torch.rand(n, generator=g) + 0.5
        codes, scales = _call(arch, a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
        assert codes.shape == (m, n) and codes.dtype == FP8[arch] and scales.shape == (m, -(-n // 128))
        pre = (a.double() @ w.double().T) * sa.double()[:, None] * sb.double() + bias.double()
        _check(codes, scales, torch.nn.functional.silu(pre), f"{arch} fp8 bias_silu {m}x{n}x{k}")
    m, n, k = SHAPES[0]
    ai = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    wi = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    sa = torch.rand(m, generator=g) * 0.01
    codes, scales = _call(arch, ai, fg.preshuffle(wi), scale_a=sa, epilogue="gelu_erf")
    pre = (ai.double() @ wi.double().T) * sa.double()[:, None]
    _check(codes, scales, torch.nn.functional.gelu(pre), f"{arch} int8 gelu_erf")


@pytest.mark.parametrize("arch", ARCHES)
def test_expression_with_aux_and_block_scales(arch, seed):
    """An expression reading an [M, N] aux operand (rows past M must never be evaluated: their aux loads would be
    out of bounds) on DeepSeek block scales (1x128 activations, 128x128 weights): the layer that feeds the next."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = SHAPES[0]
    a = (torch.randn(m, k, generator=g) * 2).to(FP8[arch])
    w = (torch.randn(n, k, generator=g) * 2).to(FP8[arch])
    sa = torch.rand(m, -(-k // 128), generator=g) + 0.5
    sb = torch.rand(-(-n // 128), -(-k // 128), generator=g) + 0.5
    res = torch.randn(m, n, generator=g).to(torch.bfloat16)
    s = torch.rand(n, generator=g) + 0.5
    expr = E.parse("silu(acc * n_vec(s)) + aux(res)")
    codes, scales = _call(arch, a, fg.preshuffle(w), scale_a=sa, scale_b=sb, epilogue=expr,
                          operands={"s": s, "res": res})
    acc = block_scaled_acc(a, w, sa, sb)
    _check(codes, scales, torch.nn.functional.silu(acc * s.double()) + res.double(), f"{arch} block expression")


@pytest.mark.parametrize("arch", ARCHES)
def test_swiglu_pairs_on_the_256_column_config(arch, seed):
    """A gate / up pair (SwiGLU): groups of 128 outputs are 256 GEMM columns, the block of cdna_lds_128x256 (2 x 4
    waves); the gate meets its up by a lane exchange before the group's maximum."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 131, 288, 320  # 144 outputs: a group of 128 and one of 16
    a = (torch.randn(m, k, generator=g) * 2).to(FP8[arch])
    w = (torch.randn(n, k, generator=g) * 2).to(FP8[arch])
    s = torch.rand(n // 2, generator=g) + 0.5  # a pair's operands are per output column
    with poisoned_outputs(), emulate(arch) as dev:
        codes, scales = fg.gemm_a8(a, fg.preshuffle(w), epilogue="silu(gate * n_vec(s)) * up", operands={"s": s},
                                   out_group=128)
    assert len(dev.launches) == 1 and dev.launches[0][0].endswith("cdna_lds_128x256"), dev.launches
    assert codes.shape == (m, n // 2) and scales.shape == (m, 2)
    acc = a.double() @ w.double().T
    gate = acc[:, 0::2] * s.double()
    _check(codes, scales, torch.nn.functional.silu(gate) * acc[:, 1::2], f"{arch} swiglu pairs")
    spec = EpilogueSpec.of(E.parse("silu(gate) * up"), {}, out_group=128)
    unit, name, _sig, source = codeobjects.gemm_a8_expression_kernel(arch, "cdna_lds_128x256", "fp8",
                                                                     "fp8e4m3fnuz" if arch == "gfx942" else "fp8e4m3fn",
                                                                     spec)
    meta = CodeObject.build(unit, arch, source).kernel(name).metadata
    assert int(meta.get(".private_segment_fixed_size", 0)) == 0 and int(meta.get(".vgpr_spill_count", 0)) == 0


@pytest.mark.parametrize("arch", ARCHES)
def test_grouped_swiglu_masked(arch, seed):
    """fg.grouped_swiglu(out_group=128), the masked (decode) layout: each expert's rows through the grouped kernel of
    cdna_lds_128x256; rows past masked_m keep their poison, codes and scales alike."""
    g = torch.Generator().manual_seed(seed)
    groups, inter, k, mmax = 3, 144, 96, 20
    x = (torch.randn(groups, mmax, k, generator=g) * 2).to(FP8[arch])
    w = (torch.randn(groups, 2 * inter, k, generator=g) * 0.5).to(FP8[arch])
    sa, sb = torch.rand(groups, mmax, generator=g) + 0.5, torch.rand(groups, 2 * inter, generator=g) + 0.5
    masked = torch.tensor([5, 0, 17], dtype=torch.int32)
    with poisoned_outputs(), emulate(arch) as dev:
        codes, scales = fg.grouped_swiglu(x, w, masked_m=masked, scale_a=sa, scale_b=sb, out_group=128)
    assert dev.launches[-1][0].endswith("cdna_lds_128x256"), dev.launches
    for e in range(groups):
        r = int(masked[e])
        acc = (x[e, :r].double() @ w[e].double().T) * sa[e, :r, None].double() * sb[e].double()
        if r:
            _check(codes[e, :r], scales[e, :r], torch.nn.functional.silu(acc[:, :inter]) * acc[:, inter:],
                   f"{arch} expert {e}")
        assert scales[e, r:].isnan().all() and (codes[e, r:].view(torch.uint8) == POISON_BYTE[FP8[arch]]).all()


@pytest.mark.parametrize("arch", ARCHES)
def test_deepseek_expert_gate_up_block_scaled(arch, seed):
    """The DeepSeek-V3 FP8 expert GEMM on the grouped kernels: the checkpoint's merged-order 128x128 gate / up scales,
    pair-ordered for the interleaved weight (block_scales.hpp scale_b_row: a gate column and its up column read
    different blocks), on the register-direct and the LDS template; then its SwiGLU output requantised in the same
    kernel (out_group=128) for the down projection."""
    from fusedgemm.plan import forced_config
    from fusedgemm.reference import block_scaled_acc

    g = torch.Generator().manual_seed(seed)
    groups, inter, hidden, kb = 3, 256, 320, 3
    offs = torch.tensor([20, 20, 70], dtype=torch.int32)
    x = (torch.randn(70, hidden, generator=g) * 2).to(FP8[arch])
    w13 = (torch.randn(groups, 2 * inter, hidden, generator=g) * 0.5).to(FP8[arch])
    sx = torch.rand(70, kb, generator=g) + 0.5
    s13 = torch.rand(groups, 2 * inter // 128, kb, generator=g) + 0.5
    want = torch.zeros(70, inter, dtype=torch.float64)
    lo = 0
    for e, hi in enumerate(offs.tolist()):
        if hi > lo:
            gate = block_scaled_acc(x[lo:hi], w13[e, :inter], sx[lo:hi], s13[e, :2])
            up = block_scaled_acc(x[lo:hi], w13[e, inter:], sx[lo:hi], s13[e, 2:])
            want[lo:hi] = torch.nn.functional.silu(gate) * up
        lo = hi
    for config in ("portable_64x16_k8", "cdna_lds_128x128"):
        with forced_config(config), emulate(arch) as dev:
            h = fg.grouped_swiglu(x, w13, offs=offs, scale_a=sx, scale_b=s13, out_dtype=torch.float32)
        assert dev.launches[-1][0].endswith(config), dev.launches
        err = ((h.double() - want).norm() / want.norm()).item()
        assert err < 1e-6, f"{arch} {config}: relative error {err:.2e}"
    # ... and requantised for the down projection in the same kernel: the 4-wave 64 x 256 block (cdna_lds_64x256),
    # whose waves may use the AGPRs beside 256 VGPRs (the 8-wave 128 x 256 one spills: the test below)
    with poisoned_outputs(), emulate(arch) as dev:
        codes, scales = fg.grouped_swiglu(x, w13, offs=offs, scale_a=sx, scale_b=s13, out_group=128)
    assert dev.launches[-1][0].endswith("cdna_lds_64x256"), dev.launches
    assert codes.shape == (70, inter) and scales.shape == (70, 2)
    _check(codes, scales, want, f"{arch} DeepSeek gate / up, block scales, requantised")


def test_deleted_epilogue_barrier_is_an_lds_race(seed):
    """Planted bug: the kernel's last s_barrier -- between the waves' writes of their row maxima to LDS and every
    wave's reads of all four -- deleted. The emulator must report the race; the kernel as built runs clean on the
    same inputs, with no scratch and the LDS of the plain kernel (the maxima reuse A's buffers)."""
    arch = "gfx942"
    spec = EpilogueSpec.of(E.parse("acc"), {}, out_group=128)
    unit, name, sig, source = codeobjects.gemm_a8_expression_kernel(arch, "cdna_lds_128x128", "fp8", "fp8e4m3fnuz",
                                                                    spec)
    obj = CodeObject.build(unit, arch, source)
    meta = obj.kernel(name).metadata
    assert int(meta.get(".private_segment_fixed_size", 0)) == 0 and int(meta.get(".vgpr_spill_count", 0)) == 0
    assert obj.kernel(name).lds_bytes == 32 * 1024  # the plain kernel's: 2 workgroups per CU on gfx942
    body = loader.function_text(obj.listing, name)
    assert len(re.findall(r"\ts_barrier\n", body)) == 4, "the K loop's three barriers and the epilogue's"
    head, _sep, tail = body.rpartition("\ts_barrier\n")
    code = CodeObject.from_listing(obj.listing.replace(body, head + tail), arch)
    g = torch.Generator().manual_seed(seed)
    m, n, k = 37, 256, 96
    # A of zeros: the LDS words a wave reads too early then hold A's zeros, not bits that make the scale's
    # division take the range-scaling cases the emulator does not model (the race is the finding, not that)
    a = torch.zeros(m, k).to(torch.float8_e4m3fnuz)
    w = (torch.randn(n, k, generator=g) * 2).to(torch.float8_e4m3fnuz)

    def run(code_object):
        codes = torch.zeros(m, n, dtype=torch.uint8)
        scales = torch.full((m, 2), float("nan"))
        mem = Memory()
        values = dict(a=mem.register(a, "A"), b=mem.register(fg.preshuffle(w).data, "B"), M=m, N=n, K=k,
                      out=mem.register(codes, "out"), ld_out=n, out_scale=mem.register(scales, "scales"), ld_scale=2)
        Machine(mem).launch(code_object.kernel(name), (2, 1, 1), 256, pack(sig, values), arch=arch)
        return scales

    assert torch.equal(run(obj), torch.ones(m, 2))  # all-zero groups: scale 1
    with pytest.raises(HazardError, match="LDS race"):
        run(code)


def test_a_kernel_that_spills_is_refused_by_name():
    """Planted: the block-scaled gate / up kernel of the 2 x 4-wave config (which no longer spills since its partial
    tile is one row tile's) re-assembled with 32 bytes of scratch per lane in its descriptor: the emulator's loader
    says so -- scratch bytes, the kernel's name -- instead of executing what it does not model."""
    from fusedgemm.runtime.gemm_spec import GemmKernel
    from fusedgemm.testing.emulator.errors import LoadError

    spec = EpilogueSpec.of(E.parse("silu(gate) * up"), {}, out_group=128)
    k = GemmKernel("gfx942", "cdna_lds_128x256", "fp8", "fp8e4m3fnuz", spec, block_scaled=True)
    built = CodeObject.build(k.unit, "gfx942", k.source())
    built.kernel(k.kernel_name)  # no scratch: loads
    planted = built.listing.replace(".amdhsa_private_segment_fixed_size 0", ".amdhsa_private_segment_fixed_size 32")
    assert planted != built.listing
    with pytest.raises(LoadError, match=rf"{k.kernel_name}: uses 32 bytes of scratch per lane \(registers spilled\)"):
        CodeObject.from_listing(planted, "gfx942").kernel(k.kernel_name)


@pytest.mark.parametrize("arch", ARCHES)
def test_gemm_a8_pair_with_block_scales_requantised(arch, seed):
    """gemm_a8 with a gate / up pair, block scales (a pair-ordered scale_b, N % 256 == 0) and out_group=128: one
    4-wave 64 x 256 block (cdna_lds_64x256) holds a group of 128 outputs."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 70, 512, 320  # 256 outputs: two groups
    a = (torch.randn(m, k, generator=g) * 2).to(FP8[arch])
    w = (torch.randn(n, k, generator=g) * 0.5).to(FP8[arch])
    sa = torch.rand(m, -(-k // 128), generator=g) + 0.5
    sb = torch.rand(n // 128, -(-k // 128), generator=g) + 0.5  # row 2 (c // 256) + c % 2 for column c
    with poisoned_outputs(), emulate(arch) as dev:
        codes, scales = fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb, epilogue="silu(gate) * up",
                                   out_group=128)
    assert len(dev.launches) == 1 and dev.launches[0][0].endswith("cdna_lds_64x256"), dev.launches
    rows = torch.tensor([2 * (c // 256) + c % 2 for c in range(n)])
    acc = torch.zeros(m, n, dtype=torch.float64)
    for kb in range(-(-k // 128)):
        part = a[:, 128 * kb:128 * kb + 128].double() @ w[:, 128 * kb:128 * kb + 128].double().T
        acc += part * sa[:, kb:kb + 1].double() * sb[rows, kb].double()
    _check(codes, scales, torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2], f"{arch} gemm_a8 pair block")
