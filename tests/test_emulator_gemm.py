"""The real gfx942 / gfx950 GEMM code objects, executed by the AMD emulator on CPU tensors, against the float64
oracle (fusedgemm.reference). Outputs are poisoned (NaN) first and sit in front of a poisoned tail that must stay
untouched; shapes are small and ragged (M not a multiple of the tile, N and K multiples of 16 as the API asks)."""
from __future__ import annotations

import time

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
from fusedgemm.reference import gemm_a8_reference  # noqa: E402
from fusedgemm.testing.emulator import codeobjects  # noqa: E402
from fusedgemm.testing.emulator.machine import coverage  # noqa: E402
from fusedgemm.testing.emulator.runner import CodeObject, run_gemm_a8  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

ARCHES = ("gfx942", "gfx950")
FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
ACTS = ("none", "relu", "silu", "gelu", "gelu_erf")
RATES: list[float] = []


def _operands(kind, arch, m, n, k):
    if kind == "fp8":
        a = (torch.randn(m, k) * 2).to(FP8[arch])
        w = (torch.randn(n, k) * 2).to(FP8[arch])
    else:
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8)
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8)
    return a, w


def check_case(arch, config, kind, act, out_dtype, m, n, k, bias, scales):
    a, w = _operands(kind, arch, m, n, k)
    wq = fg.preshuffle(w)
    store = torch.full((m * n + 64,), float("nan"), dtype=out_dtype)  # output, then a poisoned tail
    out = store[:m * n].view(m, n)
    b = torch.randn(n).to(out_dtype) if bias else None
    sa = torch.rand(m) + 0.5 if scales else None
    sb = torch.rand(n) * (0.01 if kind == "int8" else 0.5) + 0.001 if scales else None
    stats = run_gemm_a8(arch, config, a, wq.data, out, act=act, bias=b, scale_a=sa, scale_b=sb)
    RATES.append(stats.rate)
    epi = (("bias_" + act if act != "none" else "bias") if bias else act)
    ref = gemm_a8_reference(a, w, b, scale_a=sa, scale_b=sb, epilogue=epi, out_dtype=out_dtype, unrounded=True)
    assert not out.isnan().any(), f"{int(out.isnan().sum())} outputs never written"
    assert store[m * n:].isnan().all(), "the kernel wrote past the end of the output"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    exact = (out == ref.to(out_dtype)).double().mean().item()
    tol = 8e-3 if out_dtype == torch.bfloat16 else 1e-3
    assert err < tol and exact > 0.75, f"rel error {err:.2e}, {exact:.3f} of outputs equal the rounded oracle"
    return stats


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_every_config(arch, kind, seed):
    """Every tile config of the arch, ragged M (one partial row tile) and K over several K steps."""
    for i, config in enumerate(codeobjects.amd_gemm_configs(arch)):
        act = ACTS[(i + (kind == "int8")) % len(ACTS)]
        out_dtype = (torch.bfloat16, torch.float16)[i % 2]
        cfg = codeobjects.tile_config(config)
        m = cfg.block_m + 3 if cfg.block_m <= 64 else 37
        check_case(arch, config, kind, act, out_dtype, m, 48, 272 if cfg.block_m <= 64 else 160, True, True)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias", [False, True])
def test_every_preset_epilogue(arch, act, bias, seed):
    """Every preset (activation x bias) on every config of both arches; the input kind and output type rotate."""
    for i, config in enumerate(codeobjects.amd_gemm_configs(arch)):
        kind = ("fp8", "int8")[(i + bias) % 2]
        out_dtype = (torch.bfloat16, torch.float16)[(i + ACTS.index(act)) % 2]
        check_case(arch, config, kind, act, out_dtype, 19, 32, 96, bias, True)


@pytest.mark.parametrize("arch", ARCHES)
def test_ragged_shapes(arch, seed):
    config = codeobjects.amd_gemm_configs(arch)[0]
    for m, n, k in ((1, 16, 16), (17, 16, 48), (5, 64, 16)):
        check_case(arch, config, "fp8", "silu", torch.float16, m, n, k, True, False)


def test_instruction_rate_and_coverage(capsys):
    """Report the opcode coverage of every kernel of the GEMM unit and the emulator's speed (test output)."""
    arch = "gfx942"
    config = codeobjects.amd_gemm_configs(arch)[0]
    t0 = time.perf_counter()
    stats = check_case(arch, config, "fp8", "gelu", torch.bfloat16, 33, 48, 512, True, True)
    dt = time.perf_counter() - t0
    unit = codeobjects.gemm_a8_kernel(arch, config, "fp8", "bf16", "none")[0]
    obj = CodeObject.build(unit, arch)
    from fusedgemm.runtime.codeobject import hsaco_kernels

    seen: dict[str, int] = {}
    for name in hsaco_kernels(obj.data):
        for mn, c in coverage(obj.kernel(name)).items():
            seen[mn] = seen.get(mn, 0) + c
    with capsys.disabled():
        print(f"\n[emulator] {stats.instructions} instructions in {stats.seconds:.3f} s = {stats.rate:,.0f} "
              "instructions/s "
              f"({dt:.2f} s with load); opcodes executed: {len(stats.opcodes)}; {unit} ({arch}) uses {len(seen)} "
              f"mnemonics: {' '.join(sorted(seen))}")
    assert stats.rate > 1000
