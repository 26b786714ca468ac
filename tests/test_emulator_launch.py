"""End to end through the package: runtime/launch.py's real HIP path (hipModuleLoadData, hipModuleGetFunction,
hipModuleLaunchKernel with the packed `extra` buffer) against the emulated HIP backend, and the public ops on CPU
tensors inside `fusedgemm.testing.emulate`."""
from __future__ import annotations

import sys

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
from fusedgemm.reference import gemm_a8_reference  # noqa: E402
from fusedgemm.runtime import launch  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from fusedgemm.testing.emulator import codeobjects  # noqa: E402
from fusedgemm.testing.emulator.errors import LoadError  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}


def rel(y, ref):
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_launcher_hip_path(arch, seed):
    """The launcher's own module loading and argument packing, with pointers of CPU tensors."""
    config = codeobjects.amd_gemm_configs(arch)[0]
    cfg = codeobjects.tile_config(config)
    unit, name, sig, source = codeobjects.gemm_a8_kernel(arch, config, "fp8", "bf16", "silu")
    m, n, k = 21, 48, 128
    a, w = (torch.randn(m, k) * 2).to(FP8[arch]), (torch.randn(n, k) * 2).to(FP8[arch])
    wq = fg.preshuffle(w)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    bias = torch.randn(n).to(torch.bfloat16)
    values = codeobjects.preset_values(bias.data_ptr(), 2, 0, 1, 0, 1, 1.0)
    values.update(a=a.data_ptr(), b=wq.data.data_ptr(), M=m, N=n, K=k, out=out.data_ptr(), ld_out=n)
    with emulate(arch, api=False) as dev:
        kern = launch.module_for(unit, 0, source).kernel(name, sig)
        kern((-(-n // cfg.block_n), -(-m // cfg.block_m), 1), cfg.warps * 64, 0, 0, *sig.values_in_order(values))
    assert [x[0] for x in dev.launches] == [name]
    ref = gemm_a8_reference(a, w, bias, epilogue="bias_silu", out_dtype=torch.float64, unrounded=True)
    assert not out.isnan().any() and rel(out, ref) < 8e-3


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_gemm_a8_api(arch, seed):
    m, n, k = 21, 48, 512
    a, w = (torch.randn(m, k) * 2).to(FP8[arch]), (torch.randn(n, k) * 2).to(FP8[arch])
    wq = fg.preshuffle(w)
    bias, sa, sb = torch.randn(n).to(torch.bfloat16), torch.rand(m) + 0.5, torch.rand(n) + 0.5
    with emulate(arch) as dev:
        y = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    assert len(dev.launches) == 1 and dev.launches[0][0].startswith("fg_gemm_a8_fp8_bf16_silu")
    assert dev.launches[0][2][0] % 64 == 0  # whole 64-lane waves
    ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=torch.float64,
                            unrounded=True)
    assert rel(y, ref) < 8e-3


def test_matmul_fused_bf16_api(seed):
    m, n, k = 21, 48, 64
    x, w, b = torch.randn(m, k).to(torch.bfloat16), torch.randn(n, k).to(torch.bfloat16), torch.randn(n)
    with emulate("gfx942") as dev:
        y = fg.matmul_fused(x, w, bias=b.to(torch.bfloat16), activation="gelu")
    assert len(dev.launches) == 1 and dev.launches[0][0].startswith("fg_matmul_bf16")
    ref = torch.nn.functional.gelu(x.double() @ w.double().T + b.to(torch.bfloat16).double(), approximate="tanh")
    assert rel(y, ref) < 8e-3


def test_outside_the_context_nothing_changes():
    before = (sys.modules.get("hip"), dict(launch._BACKENDS), launch._MODULES, launch.device_arch,
              launch.code_object_path, torch.version.hip)
    with emulate("gfx942"):
        assert sys.modules["hip"].hip.emulated_device.arch == "gfx942"
    after = (sys.modules.get("hip"), dict(launch._BACKENDS), launch._MODULES, launch.device_arch,
             launch.code_object_path, torch.version.hip)
    assert before == after


def test_foreign_image_is_refused():
    config = codeobjects.amd_gemm_configs("gfx950")[0]
    unit, _name, _sig, source = codeobjects.gemm_a8_kernel("gfx950", config, "fp8", "bf16", "none")
    image = codeobjects.code_object(unit, "gfx950", source).read_bytes()
    with emulate("gfx942") as dev:
        with pytest.raises(LoadError, match="gfx950"):
            dev.hipModuleLoadData(image)


def test_unknown_arch_is_refused():
    with pytest.raises(ValueError, match="gfx942 and gfx950"):
        with emulate("gfx90a"):
            pass
