"""The three code objects build on a CPU-only machine; their ISA and metadata are what we designed.

Builds go through the same BuildSpec the runtime uses (cached, so a second run is fast)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fusedgemm.epilogue.presets import ACTIVATIONS, spec_for_activation
from fusedgemm.runtime import kernels, tile_configs
from fusedgemm.runtime.arch import SUPPORTED_ARCHES
from fusedgemm.runtime.build import BuildSpec, code_object_dir, find_nvidia_tool
from fusedgemm.runtime.codeobject import cubin_params, hsaco_kernels, hsaco_params

from code_objects import sass_functions

ROOT = Path(__file__).resolve().parents[1]
# Every preset kernel has the same packing: A, B, M, N, K, the preset epilogue's Params (one struct).
PRESET_SPEC = spec_for_activation("silu")
PORTABLE_GEMM_SIG = kernels.gemm_signature("portable_gemm", PRESET_SPEC)
SM90_GEMM_SIG = kernels.gemm_signature("sm90_gemm", PRESET_SPEC)
UNIT_KERNELS = {"portable_gemm": (kernels.gemm_a8_kernel_names, PORTABLE_GEMM_SIG),
                "sm90_gemm": (lambda: kernels.gemm_a8_kernel_names("sm90_gemm"), SM90_GEMM_SIG),
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
    spec = BuildSpec("portable_gemm", arch)
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


def test_the_tile_config_header_is_generated_from_the_one_table(tmp_path):
    """gemm_configs.hpp holds every config of runtime/tile_configs.py with all its fields named, and a stale header
    fails `ci/hipify.py --check` (the header and cuda_src are generated together)."""
    header = (ROOT / "hip_src" / tile_configs.HEADER_PATH).read_text()
    assert header == tile_configs.render_header()
    for name, t in tile_configs.CONFIGS.items():
        body = header.split(f"// {name}\n", 1)[1].split("};", 1)[0]
        fields = dict(re.findall(r"static constexpr \w+ (k\w+) = (\w+);", body))
        if isinstance(t, tile_configs.Sm90Tile):
            assert fields == {"kBlockM": str(t.block_m), "kBlockN": str(t.block_n), "kStages": str(t.stages),
                              "kMinBlocksPerSm": str(t.min_blocks_per_sm), "kSwapAB": str(t.swap_ab).lower(),
                              "kChains": str(t.chains), "kPersistent": str(t.persistent).lower(),
                              "kPairB": str(t.pair_b).lower(), "kEpilogueWarps": str(t.epilogue_warps),
                              "kTileLoop": str(t.tile_loop).lower()}, name
        elif isinstance(t, tile_configs.CdnaTile):
            assert fields == {"kWarpsM": str(t.warps_m), "kWarpsN": str(t.warps_n), "kWarpsK": str(t.warps_k),
                              "kTilesM": str(t.tiles_m), "kTilesN": str(t.tiles_n),
                              "kBlockKBytes": str(t.block_k_bytes)}, name
        else:
            assert fields == {"kWarpsM": str(t.warps_m), "kWarpsN": str(t.warps_n), "kWarpsK": str(t.warps_k),
                              "kTilesM": str(t.tiles_m), "kTilesN": str(t.tiles_n),
                              "kStepsInFlight": str(t.steps_in_flight)}, name
        assert f"using {tile_configs.cpp_type(name)} = " in header
    # The entry files instantiate the configs with 8-bit kernels through the generated lists, nothing else.
    for unit in ("portable_gemm", "cdna_gemm", "sm90_gemm"):
        listed = re.findall(rf"X\((\w+), fg::\w+\)", header.split(f"#define FG_{unit.upper()}_A8_CONFIGS(X)")[1]
                            .split("#define")[0])
        assert listed == [c for c, cfg in kernels.GEMM_CONFIGS.items()
                          if cfg.unit == unit and cfg.serves("fp8") and cfg.presets]
    # every config named before the rename keeps its former name (configs added since have none)
    assert set(tile_configs.FORMER_NAMES.values()) <= set(tile_configs.CONFIGS)
    assert set(tile_configs.CONFIGS) - set(tile_configs.FORMER_NAMES.values()) == {
        "cdna_lds_128x128", "cdna_lds_128x256", "cdna_lds_64x256", "cdna_lds_64x32_k4", "cdna_lds_32x32_k8",
        "cdna_lds_64x64_k2", "cdna_lds_64x128"}


def test_config_names_say_what_the_config_is():
    """A name decodes to its config's shape and kind: <kind>_<M>x<N>[_...] with the tile's own sizes."""
    for name, cfg in kernels.GEMM_CONFIGS.items():
        kind, size = name.split("_")[0], next(p for p in name.split("_") if re.fullmatch(r"\d+x\d+", p))
        assert size == f"{cfg.block_m}x{cfg.block_n}", name
        assert kind == {"portable_gemm": "portable"}.get(cfg.unit, kind)
        if cfg.unit == "sm90_gemm":
            assert (kind == "persistent" or name.startswith("pair_persistent")) == cfg.persistent, name
            assert name.startswith("pair") == cfg.pair_b and (kind == "swap") == cfg.swap_ab, name
            assert ("loop" in name.split("_")) == cfg.tile_loop, name
        t = tile_configs.CONFIGS[name]
        if isinstance(t, (tile_configs.CdnaTile, tile_configs.PortableTile)):  # _k<S>: K split S ways in the block
            assert (re.search(r"_k(\d+)$", name) or [None, "1"])[1] == str(t.warps_k), name


def test_the_probe_patch_applies_to_the_kernel_sources(tmp_path):
    """The timing probes are no part of the shipped kernels: tools/probes/sm90_probes.patch adds them to a copy of
    hip_src (tools/probes/probe_sm90.py). A kernel change that breaks it fails here (refresh the patch as the
    script's docstring says), not on the GPU machine."""
    import shutil

    if shutil.which("patch") is None:
        pytest.skip("no `patch` program")
    shutil.copytree(ROOT / "hip_src", tmp_path / "hip_src")
    proc = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(tmp_path), "-i",
                           str(ROOT / "tools" / "probes" / "sm90_probes.patch")], capture_output=True, text=True)
    assert proc.returncode == 0 and "offset" not in proc.stdout and "fuzz" not in proc.stdout, proc.stdout + proc.stderr
    patched = (tmp_path / "hip_src" / "include" / "fusedgemm" / "sm90_gemm.hpp").read_text()
    assert "int kProbe = kProbeNone" in patched and "FG_PROBE_STAMPS" in patched
    shipped = "".join(f.read_text() for f in (ROOT / "hip_src").rglob("*") if f.is_file())
    assert "kProbe" not in shipped and "FG_PROBE" not in shipped


def _config_of(kernel_name: str) -> kernels.TileConfig:
    """The tile config a preset kernel's name ends with (the longest such name: pair_persistent_128x128 ends with
    persistent_128x128 too)."""
    return kernels.GEMM_CONFIGS[max((c for c in kernels.GEMM_CONFIGS if kernel_name.endswith("_" + c)), key=len)]


def _kernel_names(unit):
    return UNIT_KERNELS[unit][0]()


@pytest.mark.slow
def test_every_kernel_is_in_the_code_object_with_the_packed_layout(built):
    """Kernel-argument metadata of the code object == the Python packing (offsets and sizes)."""
    arch, d, spec = built
    data = (d / spec.file_name()).read_bytes()
    names, sig = _kernel_names("portable_gemm"), UNIT_KERNELS["portable_gemm"][1]
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
    sig = PORTABLE_GEMM_SIG  # one argument, PortableGemmArgs: a, b, M, N, K, then the 8-aligned Params fields
    assert sig.offsets == (0,) and sig.sizes == (32 + 80,)
    args = sig.params[0][1]
    assert args.offsets[:6] == (0, 8, 16, 20, 24, 32) and [f for f, _c in args.fields[:6]] == ["a", "b", "M", "N",
                                                                                                  "K", "out"]
    assert kernels.gemm_arg_offsets("portable_gemm", PRESET_SPEC) == (16, 32)  # what the entry points assert
    # Every preset has the same Params (alpha, scale_a, scale_b, bias; the activation is the functor's code).
    assert all(kernels.gemm_signature("portable_gemm", spec_for_activation(a)) == sig for a in ACTIVATIONS)


@pytest.mark.slow
def test_cubin_param_reader_agrees_with_cuobjdump(built):
    arch, d, spec = built
    if not arch.startswith("sm_"):
        pytest.skip("cubin only")
    text = subprocess.run([find_nvidia_tool("cuobjdump"), "-elf", str(d / spec.file_name())], check=True,
                          capture_output=True, text=True).stdout
    name = _kernel_names("portable_gemm")[0]
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
    names = _kernel_names("portable_gemm")
    if arch.startswith("sm_"):
        bodies = sass_functions(d / spec.file_name())
        log = (d / "portable_gemm.log").read_text()
        spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert len(spills) == len(names) and all(s == ("0", "0", "0") for s in spills), spills
        # C7510-C7520: ptxas serialised some kernel's wgmma pipeline (a wait after every MMA), which costs 20% or
        # more at large M without failing anything else.
        assert not re.search(r"C75\d\d", log), re.findall(r"C75\d\d.*", log)[:4]
    else:
        bodies = _split_amdgcn_asm((d / "portable_gemm.s").read_text())
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
    from fusedgemm.tiny_bmm import _ASYNC_REGS

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
    spec = BuildSpec("sm90_gemm", "sm_90a")
    d = code_object_dir(spec)
    return d, (d / spec.file_name()).read_bytes()


def test_sm90_unit_is_nvidia_only():
    from fusedgemm.runtime.build import units_for

    assert "sm90_gemm" in units_for("sm_90a")
    assert "sm90_gemm" not in units_for("gfx942") and "sm90_gemm" not in units_for("gfx950")
    with pytest.raises(ValueError, match="built only for"):
        BuildSpec("sm90_gemm", "gfx942")


def test_sm90_tensor_map_packing():
    sig = SM90_GEMM_SIG
    # One 64-byte-aligned struct (its tensor maps must be) in the constant bank, whose parameter block starts at
    # bank offset 0x210: at 48. Inside: the two 128-byte maps, M, N, K, the epilogue's Params at 272.
    assert sig.offsets == (48,) and sig.sizes == (384,)
    args = sig.params[0][1]
    assert args.offsets[:6] == (0, 128, 256, 260, 264, 272)
    assert kernels.gemm_arg_offsets("sm90_gemm", PRESET_SPEC) == (256, 272)
    assert sig.struct.size == 48 + 384


@pytest.mark.slow
def test_sm90_kernels_layout_isa_and_registers(built_sm90):
    """Every wgmma kernel: packed layout == cubin metadata; QGMMA (fp8) / IGMMA (int8) tensor-core MMAs and
    TMA loads (UTMALDG) in SASS; no local memory; registers allow the config's CTAs per SM."""
    d, data = built_sm90
    names = _kernel_names("sm90_gemm")
    sig = SM90_GEMM_SIG
    params = cubin_params(data)
    want = list(zip(sig.offsets, sig.sizes))
    bodies = sass_functions(d / "sm90_gemm.cubin")
    log = (d / "sm90_gemm.log").read_text()
    # Registers the launch reserves per thread (ptxas -v reports the largest setmaxnreg region instead).
    usage = subprocess.run([find_nvidia_tool("cuobjdump"), "-res-usage", str(d / "sm90_gemm.cubin")], check=True,
                           capture_output=True, text=True).stdout
    regs = dict(re.findall(r"Function (\S+):\n\s*REG:(\d+)", usage))
    for name in names:
        assert [(p.offset, p.size) for p in params[name]] == want, name
        body = bodies[name]
        cfg = _config_of(name)
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


# ---- the LDS-staged CDNA template (cdna_gemm.hpp, unit cdna_gemm): gfx942 / gfx950 only ----------------------------
CDNA_ARCHES = ("gfx942", "gfx950")


@pytest.fixture(scope="session", params=CDNA_ARCHES)
def built_cdna(request):
    arch = request.param
    spec = BuildSpec("cdna_gemm", arch)
    return arch, code_object_dir(spec), spec


def test_cdna_unit_is_amd_only():
    from fusedgemm.runtime.build import units_for

    assert all("cdna_gemm" in units_for(a) for a in CDNA_ARCHES) and "cdna_gemm" not in units_for("sm_90a")
    names = kernels.gemm_a8_kernel_names("cdna_gemm")
    assert names and all(_config_of(n).unit == "cdna_gemm" for n in names)
    assert not set(names) & set(kernels.gemm_a8_kernel_names("portable_gemm"))
    # the same argument struct as the portable template's kernels (PortableGemmArgs)
    assert kernels.gemm_signature("cdna_gemm", PRESET_SPEC) == PORTABLE_GEMM_SIG


def _a_copy_into_lds(arch: str, body: str) -> bool:
    """A's copy into LDS: gfx950 by 16-byte buffer loads straight into LDS (no ds_write_b128 in the K loop's copy),
    gfx942 by registers and ds_write_b128 (arch/cdna_buffer.hpp kLoadsToLdsVec16)."""
    if arch == "gfx950":
        return bool(re.search(r"buffer_load_dwordx4 v\d+, s\[\d+:\d+\], s\d+ offen lds", body))
    return "ds_write_b128" in body and not re.search(r"offen lds\b", body)


@pytest.mark.slow
def test_cdna_kernels_layout_isa_and_registers(built_cdna):
    """Every preset kernel of the unit: in the code object with the packed layout; MFMAs of the kind; no scratch or
    spills; the pipeline's instructions (16-byte buffer loads with the descriptor's range check, A through LDS by
    ds_write_b128 -- gfx950: loads straight into LDS -- and ds_read_b128, barriers); LDS = the two A buffers;
    registers for two workgroups per CU."""
    from fusedgemm.runtime import tile_configs

    arch, d, spec = built_cdna
    data = (d / spec.file_name()).read_bytes()
    kmeta = hsaco_kernels(data)
    bodies = _split_amdgcn_asm((d / "cdna_gemm.s").read_text())
    names = kernels.gemm_a8_kernel_names("cdna_gemm")
    want = list(zip(PORTABLE_GEMM_SIG.offsets, PORTABLE_GEMM_SIG.sizes))
    assert set(kmeta) == set(names)
    for name in names:
        k = kmeta[name]
        t = tile_configs.CONFIGS[_config_of(name).name]
        assert [(p.offset, p.size) for p in hsaco_params(k)] == want, name
        assert k[".kernarg_segment_size"] >= PORTABLE_GEMM_SIG.struct.size
        assert (k[".private_segment_fixed_size"], k[".vgpr_spill_count"], k[".sgpr_spill_count"]) == (0, 0, 0), name
        assert k[".group_segment_fixed_size"] == t.lds_bytes, name
        assert k[".max_flat_workgroup_size"] == 64 * t.warps, name
        assert k[".vgpr_count"] + k.get(".agpr_count", 0) <= 256, f"{name}: more than 2 waves per SIMD's registers"
        kind = name.split("_")[3]
        body = bodies[name]
        assert re.search(EXPECTED_MMA[(arch, kind)], body), f"{name}: no {EXPECTED_MMA[(arch, kind)]}"
        assert "scratch_" not in body and "buffer_store" not in body, name
        assert re.search(r"buffer_load_dwordx4 v\[\d+:\d+\], v\d+, s\[\d+:\d+\], (0|s\d+) offen", body), name
        # the operands' 16-byte loads all go through the range-checked buffers (the epilogue's loads are narrower)
        assert "global_load_dwordx4" not in body, f"{name}: operand loads outside the range-checked buffers"
        assert _a_copy_into_lds(arch, body) and "ds_read_b128" in body and "s_barrier" in body, name


# matmul_fused's 16-bit kinds on the CDNA template (plain B [N, K] straight to registers): generated kernels of the
# bias + SiLU and the alpha / beta / c epilogues.
CDNA16_MMA = {("gfx942", "bf16"): r"\bv_mfma_f32_16x16x16_?bf16(_1k)?\b", ("gfx942", "fp16"): r"\bv_mfma_f32_16x16x16_?f16\b",
              ("gfx950", "bf16"): r"\bv_mfma_f32_16x16x32_bf16\b", ("gfx950", "fp16"): r"\bv_mfma_f32_16x16x32_f16\b"}
CDNA16_EPIS = {"bias_silu": ("silu(acc + n_vec(bias))", {"bias": "bf16"}),
               "alpha_beta_c": ("silu(scalar(alpha) * acc + scalar(beta) * aux(c))", {"c": "bf16"})}


@pytest.mark.slow
@pytest.mark.parametrize("epi", sorted(CDNA16_EPIS))
@pytest.mark.parametrize("kind", ["bf16", "fp16"])
@pytest.mark.parametrize("arch", CDNA_ARCHES)
def test_cdna_matmul16_kernels_layout_isa_and_registers(arch, kind, epi):
    """The generated matmul_fused kernels of cdna_lds_128x128: kernarg metadata = the packing; no scratch or spills;
    the kind's MFMAs; A and B by 16-byte range-checked buffer loads only, A through LDS (ds_write_b128 -- gfx950:
    loads straight into LDS -- and ds_read_b128, barriers); LDS = the two A buffers; registers <= 256 (two waves per
    SIMD)."""
    from fusedgemm.epilogue import parse
    from fusedgemm.epilogue.codegen import EpilogueSpec
    from fusedgemm.runtime import tile_configs
    from fusedgemm.runtime.gemm_spec import GemmKernel

    expr, dtypes = CDNA16_EPIS[epi]
    spec = GemmKernel(arch, "cdna_lds_128x128", kind, "bf16", EpilogueSpec.of(parse(expr), dtypes))
    build = BuildSpec(spec.unit, arch, spec.source())
    d = code_object_dir(build)
    k = hsaco_kernels((d / build.file_name()).read_bytes())[spec.kernel_name]
    sig = spec.signature
    t = tile_configs.CONFIGS["cdna_lds_128x128"]
    assert [(p.offset, p.size) for p in hsaco_params(k)] == list(zip(sig.offsets, sig.sizes)), "argument packing"
    assert k[".kernarg_segment_size"] >= sig.struct.size
    assert (k[".private_segment_fixed_size"], k[".vgpr_spill_count"], k[".sgpr_spill_count"]) == (0, 0, 0)
    assert k[".group_segment_fixed_size"] == t.lds_bytes
    assert k[".max_flat_workgroup_size"] == 64 * t.warps
    assert k[".vgpr_count"] + k.get(".agpr_count", 0) <= 256, "more than 2 waves per SIMD's registers"
    body = _split_amdgcn_asm((d / f"{spec.unit}.s").read_text())[spec.kernel_name]
    assert re.search(CDNA16_MMA[(arch, kind)], body), f"no {CDNA16_MMA[(arch, kind)]}"
    assert "scratch_" not in body and "buffer_store" not in body
    assert len(re.findall(r"buffer_load_dwordx4 v\[\d+:\d+\], v\d+, s\[\d+:\d+\], 0 offen", body)) >= 2
    assert "global_load_dwordx4" not in body, "operand loads outside the range-checked buffers"
    assert _a_copy_into_lds(arch, body) and "ds_read_b128" in body and "s_barrier" in body
