"""The three code objects build on a CPU-only machine; their ISA and metadata are what we designed.

Builds go through the same BuildSpec the runtime uses (cached, so a second run is fast)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fusedgemm.epilogue.presets import ACTIVATIONS, spec_for_activation
from fusedgemm.runtime import kernels
from fusedgemm.runtime.arch import SUPPORTED_ARCHES
from fusedgemm.runtime.build import BuildSpec, code_object_dir, find_nvidia_tool
from fusedgemm.runtime.codeobject import cubin_params, hsaco_kernels, hsaco_params

from code_objects import sass_functions

ROOT = Path(__file__).resolve().parents[1]
# Every preset kernel has the same packing: A, B, M, N, K, the preset epilogue's Params (one struct).
PRESET_SPEC = spec_for_activation("silu")
GEMM_A8_SIG = kernels.gemm_a8_signature("gemm_a8", PRESET_SPEC)
GEMM_A8_SM90_SIG = kernels.gemm_a8_signature("gemm_a8_sm90", PRESET_SPEC)
UNIT_KERNELS = {"gemm_a8": (kernels.gemm_a8_kernel_names, GEMM_A8_SIG),
                "gemm_a8_sm90": (lambda: kernels.gemm_a8_kernel_names("gemm_a8_sm90"), GEMM_A8_SM90_SIG),
                "bmm_tiny": (kernels.bmm_tiny_kernel_names, kernels.BMM_TINY)}
# The MMA instructions each arch's kernels must use, by input kind.
EXPECTED_MMA = {
    ("sm_90a", "fp8"): r"\bHMMA\.16816\.F32\b",  # sm_90 runs fp8 mma.sync as f16 HMMA
    ("sm_90a", "i8"): r"\bIMMA\.16832\.S8\.S8\b",
    ("gfx942", "fp8"): r"\bv_mfma_f32_16x16x32_fp8_fp8\b",
    ("gfx942", "i8"): r"\bv_mfma_i32_16x16x32_i8\b",
    ("gfx950", "fp8"): r"\bv_mfma_f32_16x16x128_f8f6f4\b",
    ("gfx950", "i8"): r"\bv_mfma_i32_16x16x64_i8\b",
}


@pytest.fixture(scope="session", params=sorted(SUPPORTED_ARCHES))
def built(request):
    arch = request.param
    spec = BuildSpec("gemm_a8", arch)
    return arch, code_object_dir(spec), spec


@pytest.fixture(scope="session", params=sorted(SUPPORTED_ARCHES))
def built_bmm(request):
    arch = request.param
    spec = BuildSpec("bmm_tiny", arch)
    return arch, code_object_dir(spec), spec


def test_cuda_src_is_fresh():
    proc = subprocess.run([sys.executable, str(ROOT / "ci" / "hipify.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_hipify_is_a_mechanical_rename():
    sys.path.insert(0, str(ROOT / "ci"))
    try:
        import hipify
    finally:
        sys.path.pop(0)
    src = "#include <hip/hip_runtime.h>\nhipStream_t s; hipLaunchKernelGGL(k); HIP_LAUNCH_PARAM_END; __HIP__"
    assert hipify.convert(src) == ("#include <cuda_runtime.h>\ncudaStream_t s; cudaLaunchKernelGGL(k); "
                                   "CUDA_LAUNCH_PARAM_END; __HIP__")


def _kernel_names(unit):
    return UNIT_KERNELS[unit][0]()


@pytest.mark.slow
def test_every_kernel_is_in_the_code_object_with_the_packed_layout(built):
    """Kernel-argument metadata of the code object == the Python packing (offsets and sizes)."""
    arch, d, spec = built
    data = (d / spec.file_name()).read_bytes()
    names, sig = _kernel_names("gemm_a8"), UNIT_KERNELS["gemm_a8"][1]
    want = list(zip(sig.offsets, sig.sizes))
    if arch.startswith("sm_"):
        params = cubin_params(data)
        for name in names:
            assert name in params, f"{name} missing from the cubin"
            assert [(p.offset, p.size) for p in params[name]] == want, name
    else:
        kmeta = hsaco_kernels(data)
        for name in names:
            assert name in kmeta, f"{name} missing from the hsaco"
            assert [(p.offset, p.size) for p in hsaco_params(kmeta[name])] == want, name
            assert kmeta[name][".kernarg_segment_size"] >= sig.struct.size


def test_packing_layout_is_natural_alignment():
    sig = GEMM_A8_SIG  # one argument, GemmA8Args: a, b, M, N, K, then the 8-aligned Params fields
    assert sig.offsets == (0,) and sig.sizes == (32 + 80,)
    args = sig.params[0][1]
    assert args.offsets[:6] == (0, 8, 16, 20, 24, 32) and [f for f, _c in args.fields[:6]] == ["a", "b", "M", "N",
                                                                                                  "K", "out"]
    assert kernels.gemm_a8_arg_offsets("gemm_a8", PRESET_SPEC) == (16, 32)  # what the entry points assert
    # Every preset has the same Params (alpha, scale_a, scale_b, bias; the activation is the functor's code).
    assert all(kernels.gemm_a8_signature("gemm_a8", spec_for_activation(a)) == sig for a in ACTIVATIONS)


@pytest.mark.slow
def test_cubin_param_reader_agrees_with_cuobjdump(built):
    arch, d, spec = built
    if not arch.startswith("sm_"):
        pytest.skip("cubin only")
    text = subprocess.run([find_nvidia_tool("cuobjdump"), "-elf", str(d / spec.file_name())], check=True,
                          capture_output=True, text=True).stdout
    name = _kernel_names("gemm_a8")[0]
    section = text.split(f"\n.nv.info.{name}\n")[1].split("\n.nv.info.")[0]
    found = sorted((int(o, 16), int(off, 16), int(sz, 16)) for o, off, sz in
                   re.findall(r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)\s+Size\s*:\s*(0x[0-9a-f]+)", section))
    ours = [(p.ordinal, p.offset, p.size) for p in cubin_params((d / spec.file_name()).read_bytes())[name]]
    assert found == ours


def _split_amdgcn_asm(text):
    funcs = {}
    for m in re.finditer(r"^(fg_\w+):[^\n]*$(.*?)^\.Lfunc_end", text, re.S | re.M):
        funcs[m.group(1)] = m.group(2)
    return funcs


@pytest.mark.slow
def test_isa_mma_instructions_and_no_spills(built):
    arch, d, spec = built
    names = _kernel_names("gemm_a8")
    if arch.startswith("sm_"):
        bodies = sass_functions(d / spec.file_name())
        log = (d / "gemm_a8.log").read_text()
        spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert len(spills) == len(names) and all(s == ("0", "0", "0") for s in spills), spills
        # C7510-C7520: ptxas serialised some kernel's wgmma pipeline (a wait after every MMA), which costs 20% or
        # more at large M without failing anything else.
        assert not re.search(r"C75\d\d", log), re.findall(r"C75\d\d.*", log)[:4]
    else:
        bodies = _split_amdgcn_asm((d / "gemm_a8.s").read_text())
        kmeta = hsaco_kernels((d / spec.file_name()).read_bytes())
        for name in names:
            k = kmeta[name]
            assert (k[".private_segment_fixed_size"], k[".vgpr_spill_count"], k[".sgpr_spill_count"]) == (0, 0, 0), name
    for name in names:
        kind = name.split("_")[3]  # fg_gemm_a8_<kind>_...
        body = bodies[name]
        assert re.search(EXPECTED_MMA[(arch, kind)], body), f"{name}: no {EXPECTED_MMA[(arch, kind)]}"
        if arch.startswith("sm_"):
            assert not re.search(r"\b(LDL|STL)\b", body), f"{name}: local memory traffic"
            assert "LDG.E.128" in body, f"{name}: operand loads are not 16 bytes wide"
        else:
            assert "scratch_" not in body and "buffer_store" not in body, name
            assert "global_load_dwordx4" in body, f"{name}: operand loads are not 16 bytes wide"


@pytest.mark.slow
def test_hsaco_targets(built):
    arch, d, spec = built
    if arch.startswith("sm_"):
        pytest.skip("hsaco only")
    from fusedgemm.runtime.codeobject import hsaco_metadata

    meta = hsaco_metadata((d / spec.file_name()).read_bytes())
    assert meta["amdhsa.target"].startswith(f"amdgcn-amd-amdhsa--{arch}")


@pytest.mark.slow
def test_bmm_tiny_code_objects(built_bmm):
    """bmm_tiny: every kernel present, argument layout == metadata, FMA arithmetic, no spills."""
    arch, d, spec = built_bmm
    data = (d / spec.file_name()).read_bytes()
    names, sig = _kernel_names("bmm_tiny"), kernels.BMM_TINY
    want = list(zip(sig.offsets, sig.sizes))
    if arch.startswith("sm_"):
        params = cubin_params(data)
        assert all([(p.offset, p.size) for p in params[n]] == want for n in names)
        log = (d / "bmm_tiny.log").read_text()
        spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert len(spills) == len(names) and all(s == ("0", "0", "0") for s in spills), spills
        sass = sass_functions(d / spec.file_name())
        assert all("FFMA" in sass[n] for n in names)
    else:
        kmeta = hsaco_kernels(data)
        for n in names:
            assert [(p.offset, p.size) for p in hsaco_params(kmeta[n])] == want, n
            assert (kmeta[n][".private_segment_fixed_size"], kmeta[n][".vgpr_spill_count"]) == (0, 0), n
        bodies = _split_amdgcn_asm((d / "bmm_tiny.s").read_text())
        assert all(re.search(r"v_(pk_)?fma(c|k)?_f32", bodies[n]) for n in names)


@pytest.mark.slow
def test_bmm_tiny_async_registers_match_the_planner(built_bmm):
    """The planner sizes the resident grid with _ASYNC_REGS: the sm_90a build must not use more registers."""
    from fusedgemm.tiny_gemm import _ASYNC_REGS

    arch, d, _ = built_bmm
    if not arch.startswith("sm_"):
        pytest.skip("register caps are NVIDIA __launch_bounds__")
    log = (d / "bmm_tiny.log").read_text()
    used = dict(re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", log, re.S))
    for (rm, rn), regs in _ASYNC_REGS.items():
        names = [kernels.bmm_tiny_async_kernel_name(rm, rn)] + [
            kernels.bmm_tiny_async_kernel_name(rm, rn, tx) for tx in kernels.BMM_TINY_ASYNC_FIXED_TX.get((rm, rn), ())]
        for name in names:
            assert int(used[name]) <= regs, (name, used[name], regs)


def test_bmm_tiny_layout():
    sig = kernels.BMM_TINY
    assert sig.offsets == (0, 8, 16, 24, 28, 32, 36, 40, 48, 52, 56, 64, 68, 72, 76, 80, 84, 88, 92, 96, 100, 104, 108,
                           112, 116)


# ---- the Hopper wgmma + TMA unit (sm_90a only) -------------------------------------------------------------
@pytest.fixture(scope="session")
def built_sm90():
    spec = BuildSpec("gemm_a8_sm90", "sm_90a")
    d = code_object_dir(spec)
    return d, (d / spec.file_name()).read_bytes()


def test_sm90_unit_is_nvidia_only():
    from fusedgemm.runtime.build import units_for

    assert "gemm_a8_sm90" in units_for("sm_90a")
    assert "gemm_a8_sm90" not in units_for("gfx942") and "gemm_a8_sm90" not in units_for("gfx950")
    with pytest.raises(ValueError, match="built only for"):
        BuildSpec("gemm_a8_sm90", "gfx942")


def test_sm90_tensor_map_packing():
    sig = GEMM_A8_SM90_SIG
    # One 64-byte-aligned struct (its tensor maps must be) in the constant bank, whose parameter block starts at
    # bank offset 0x210: at 48. Inside: the two 128-byte maps, M, N, K, the epilogue's Params at 272.
    assert sig.offsets == (48,) and sig.sizes == (384,)
    args = sig.params[0][1]
    assert args.offsets[:6] == (0, 128, 256, 260, 264, 272)
    assert kernels.gemm_a8_arg_offsets("gemm_a8_sm90", PRESET_SPEC) == (256, 272)
    assert sig.struct.size == 48 + 384


@pytest.mark.slow
def test_sm90_kernels_layout_isa_and_registers(built_sm90):
    """Every wgmma kernel: packed layout == cubin metadata; QGMMA (fp8) / IGMMA (int8) tensor-core MMAs and
    TMA loads (UTMALDG) in SASS; no local memory; registers allow the config's CTAs per SM."""
    d, data = built_sm90
    names = _kernel_names("gemm_a8_sm90")
    sig = GEMM_A8_SM90_SIG
    params = cubin_params(data)
    want = list(zip(sig.offsets, sig.sizes))
    bodies = sass_functions(d / "gemm_a8_sm90.cubin")
    log = (d / "gemm_a8_sm90.log").read_text()
    # Registers the launch reserves per thread (ptxas -v reports the largest setmaxnreg region instead).
    usage = subprocess.run([find_nvidia_tool("cuobjdump"), "-res-usage", str(d / "gemm_a8_sm90.cubin")], check=True,
                           capture_output=True, text=True).stdout
    regs = dict(re.findall(r"Function (\S+):\n\s*REG:(\d+)", usage))
    for name in names:
        assert [(p.offset, p.size) for p in params[name]] == want, name
        body = bodies[name]
        cfg = kernels.GEMM_A8_CONFIGS[name.rsplit("_", 1)[1]]
        shape = f"64x{cfg.block_m if cfg.swap_ab else cfg.block_n}x32"  # swapped: the activation is the N side
        mma = rf"\bQGMMA\.{shape}\.F32\.E4M3\.E4M3\b" if "_fp8_" in name else rf"\bIGMMA\.{shape}\.S8\.S8\b"
        assert re.search(mma, body), f"{name}: no {mma}"
        assert "UTMALDG" in body, f"{name}: operands do not come through TMA"
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name}: local memory traffic"
        assert int(regs[name]) * cfg.warps * 32 * cfg.min_blocks_per_sm <= 65536, (name, regs[name])
        # setmaxnreg only moves registers within the CTA's launch allocation: the consumers' raised count and
        # the producer warpgroup's lowered one must fit it, or setmaxnreg.inc waits forever (a hang, not an error).
        alloc = re.findall(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, (0x[0-9a-f]+)", body)
        dealloc = re.findall(r"USETMAXREG\.DEALLOC\.CTAPOOL (0x[0-9a-f]+)", body)
        if alloc or dealloc:
            consumers = 128 if cfg.swap_ab else 128 * (cfg.block_m // 64)
            need = max(int(x, 16) for x in alloc) * consumers + max(int(x, 16) for x in dealloc) * (
                32 * cfg.warps - consumers)
            assert need <= int(regs[name]) * 32 * cfg.warps, (name, need, regs[name])
        assert cfg.smem * cfg.min_blocks_per_sm <= 228 * 1024, name
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) == len(names) and all(x == ("0", "0", "0") for x in spills), spills
