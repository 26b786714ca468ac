"""Generated (just-in-time) gemm_a8 kernels for an epilogue expression: the translation unit of each spec builds
for sm_90a, gfx942 and gfx950 on the CPU; the packed arguments equal the code object's metadata; the MMA
instructions are there and nothing spills. Also: spec naming and keys, and the build CLI's --epilogue."""
import re
import subprocess
import sys

import pytest

import fusedgemm.epilogue as E
from fusedgemm.epilogue.codegen import EpilogueSpec
from fusedgemm.runtime.build import BuildSpec, code_object_dir
from fusedgemm.runtime.codeobject import cubin_params, hsaco_kernels, hsaco_params
from fusedgemm.runtime.gemm_spec import GemmKernel, preset_kernel

from code_objects import sass

EXPR = E.parse("clamp(save(gelu(acc * m_vec(sa) + n_vec(bias)), bf16) + aux(res) * scalar(beta), -8.0, 8.0)")
SPEC = EpilogueSpec.of(EXPR, {"sa": "f32", "bias": "bf16", "res": "f16"})
# (arch, config, input kind, output type, MMA instruction the SASS / ISA must show)
CASES = [
    ("sm_90a", "tile_128x128", "fp8", "fp32", r"\bQGMMA\.64x128x32\.F32\.E4M3\.E4M3\b"),
    ("sm_90a", "swap_16x128", "int8", "fp8e4m3fn", r"\bIGMMA\.64x16x32\.S8\.S8\b"),
    ("sm_90a", "tile_64x128", "fp8", "bf16", r"\bQGMMA\.64x128x32\.F32\.E4M3\.E4M3\b"),
    ("gfx942", "portable_128x128", "fp8", "fp8e4m3fnuz", r"\bv_mfma_f32_16x16x32_fp8_fp8\b"),
    ("gfx950", "portable_16x16_k8", "int8", "fp32", r"\bv_mfma_i32_16x16x64_i8\b"),
]


def test_presets_are_the_ahead_of_time_kernels():
    k = preset_kernel("sm_90a", "tile_128x128", "fp8", "bf16", "silu")
    assert k.preset == "silu" and k.unit == "sm90_gemm" and k.source() is None
    assert k.kernel_name == "fg_gemm_a8_fp8_bf16_silu_tile_128x128"
    # the same expression with an fp32 output is generated
    k32 = preset_kernel("sm_90a", "tile_128x128", "fp8", "fp32", "silu")
    assert k32.preset is None and k32.source() is not None and k32.unit != k.unit


def test_spec_names_follow_the_key():
    a = GemmKernel("sm_90a", "tile_128x128", "fp8", "fp32", SPEC)
    b = GemmKernel("sm_90a", "tile_128x128", "fp8", "fp32", EpilogueSpec.of(E.parse(str(EXPR)), dict(SPEC.operand_dtypes)))
    assert a.unit == b.unit and a.kernel_name == b.kernel_name  # same tree, same names
    c = GemmKernel("sm_90a", "tile_128x128", "fp8", "fp32", EpilogueSpec.of(EXPR, {"sa": "f32", "bias": "f32", "res": "f16"}))
    assert c.kernel_name != a.kernel_name  # operand types are part of the spec
    assert SPEC.key in a.unit and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]*", a.unit)


@pytest.mark.slow
@pytest.mark.parametrize("arch,config,kind,out,mma", CASES, ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_generated_kernel_builds_with_layout_isa_and_no_spills(arch, config, kind, out, mma):
    spec = GemmKernel(arch, config, kind, out, SPEC)
    build = BuildSpec(spec.unit, arch, spec.source())
    d = code_object_dir(build)
    data = (d / build.file_name()).read_bytes()
    sig = spec.signature
    want = list(zip(sig.offsets, sig.sizes))
    if arch == "sm_90a":
        params = cubin_params(data)
        assert [(p.offset, p.size) for p in params[spec.kernel_name]] == want
        text = sass(d / build.file_name())
        assert re.search(mma, text), f"no {mma}"
        assert not re.search(r"\b(LDL|STL)\b", text), "local memory traffic"
        log = (d / f"{spec.unit}.log").read_text()
        assert re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log) == [("0", "0")], log[-2000:]
    else:
        k = hsaco_kernels(data)[spec.kernel_name]
        assert [(p.offset, p.size) for p in hsaco_params(k)] == want
        assert (k[".private_segment_fixed_size"], k[".vgpr_spill_count"], k[".sgpr_spill_count"]) == (0, 0, 0)
        asm = (d / f"{spec.unit}.s").read_text()
        assert re.search(mma, asm), f"no {mma}"


@pytest.mark.slow
def test_build_cli_takes_an_epilogue(tmp_path):
    """python -m fusedgemm.runtime.build --epilogue TEXT builds the expression's kernels ahead of time."""
    proc = subprocess.run([sys.executable, "-m", "fusedgemm.runtime.build", "--arch", "gfx942", "--epilogue",
                           "relu(acc * scalar(s)) + aux(r)", "--operand-dtype", "r=bf16", "--out-dtype", "float32",
                           "--config", "portable_128x128", "--in-kind", "int8"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    paths = [line for line in proc.stdout.splitlines() if line.endswith(".hsaco")]
    assert len(paths) == 1 and "portable_128x128" in paths[0]


@pytest.mark.slow
def test_build_cli_builds_matmul_fused_kernels(tmp_path):
    """--in-kind bf16 builds matmul_fused's kernels of an expression ahead of time (its keyword form:
    fusedgemm.checks.matmul_expression), for each arch's configs; --b-layout kn only where a kernel reads [K, N]."""
    from fusedgemm.checks import matmul_expression

    args = [sys.executable, "-m", "fusedgemm.runtime.build", "--arch", "gfx942", "--arch", "sm_90a", "--epilogue",
            str(matmul_expression("silu", None, True)), "--operand-dtype", "bias=bf16", "--in-kind", "bf16",
            "--config", "portable_16x16_k8", "--config", "swap_16x128"]
    proc = subprocess.run(args, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    paths = [line for line in proc.stdout.splitlines() if line.endswith((".hsaco", ".cubin"))]
    assert len(paths) == 2 and all("matmul" in p and "_bf16_bf16_" in p for p in paths), paths
    proc = subprocess.run(args + ["--b-layout", "kn"], capture_output=True, text=True)
    paths = [line for line in proc.stdout.splitlines() if line.endswith((".hsaco", ".cubin"))]
    assert proc.returncode == 0 and len(paths) == 1 and "_bf16_kn_" in paths[0] and paths[0].endswith(".cubin")
