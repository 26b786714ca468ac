"""matmul_fused on AMD (gfx942, gfx950): the generated bf16 / fp16 / tf32 kernels of portable_gemm_tile build on the
CPU; the packed argument struct equals the code object's kernarg metadata; the MFMA instruction of the kind
(and no other) is in the ISA, as many times per K step as the atom issues; the mainloop moves operands as
16-byte loads; nothing spills. The lane mapping itself is checked by tests/test_fragment_model.py."""
import re

import pytest

import fusedgemm.epilogue as E
from fusedgemm.epilogue.codegen import EpilogueSpec
from fusedgemm.runtime.build import BuildSpec, code_object_dir
from fusedgemm.runtime.codeobject import hsaco_kernels, hsaco_params
from fusedgemm.runtime.gemm_spec import MATMUL_IN, GemmKernel

# A bias-and-residual epilogue (scalars, a bf16 [M, N] operand, a bf16 per-column vector) and a bare one.
EPILOGUES = {
    "silu_res": EpilogueSpec.of(E.parse("silu(acc * scalar(alpha) + aux(c) * scalar(beta) + n_vec(bias, 0.0))"),
                                {"c": "bf16", "bias": "bf16"}),
    "acc": EpilogueSpec.of(E.parse("acc"), {}),
}
# (arch, kind) -> (MFMA mnemonic, MFMAs per 16-byte chunk of K): arch/gfx942_mfma.hpp, arch/gfx950_mfma.hpp.
MFMA = {
    ("gfx942", "bf16"): ("v_mfma_f32_16x16x16_bf16", 2),
    ("gfx942", "fp16"): ("v_mfma_f32_16x16x16_f16", 2),
    ("gfx942", "tf32"): ("v_mfma_f32_16x16x8_xf32", 2),
    ("gfx950", "bf16"): ("v_mfma_f32_16x16x32_bf16", 1),
    ("gfx950", "fp16"): ("v_mfma_f32_16x16x32_f16", 1),
    ("gfx950", "tf32"): ("v_mfma_f32_16x16x4_f32", 4),  # no xf32 on gfx950: Tf32 runs exact fp32
}
# config -> (warps, kTilesM, kTilesN, kStepsInFlight): the Config* aliases of portable_gemm.hpp.
CONFIGS = {"portable_128x128": (8, 4, 2, 1), "portable_16x16_k8": (8, 1, 1, 4), "portable_64x16_k8": (8, 4, 1, 2)}
OUTS = {"bf16": "bf16", "fp16": "fp16", "tf32": "fp32"}  # one output type per kind keeps the run short

CASES = [(arch, config, kind, OUTS[kind], epi) for (arch, kind) in MFMA for config in CONFIGS
         for epi in EPILOGUES if epi == "silu_res" or config == "portable_128x128"]


def _build(arch, config, kind, out, epi):
    spec = GemmKernel(arch, config, kind, out, EPILOGUES[epi])
    build = BuildSpec(spec.unit, arch, spec.source())
    d = code_object_dir(build)
    meta = hsaco_kernels((d / build.file_name()).read_bytes())[spec.kernel_name]
    return spec, meta, (d / f"{spec.unit}.s").read_text()


def test_cases_cover_every_kind():
    # every matmul_fused kind but F32x3 (sm_90a only: on AMD 'ieee' takes the unfused path)
    assert {kind for _, kind in MFMA} == set(MATMUL_IN) - {"f32x3"}
    src = GemmKernel("gfx942", "portable_128x128", "tf32", "fp32", EPILOGUES["acc"]).source()
    assert "fg::portable_gemm_tile<fg::Tf32, " in src and "matmul_fused tf32" in src


@pytest.mark.slow
@pytest.mark.parametrize("arch,config,kind,out,epi", CASES, ids=["-".join(c) for c in CASES])
def test_matmul_kernel_builds_with_layout_isa_and_no_spills(arch, config, kind, out, epi):
    spec, k, asm = _build(arch, config, kind, out, epi)
    sig = spec.signature
    assert [(p.offset, p.size) for p in hsaco_params(k)] == list(zip(sig.offsets, sig.sizes)), "argument packing"
    assert k[".kernarg_segment_size"] >= sig.struct.size
    warps, tiles_m, tiles_n, steps = CONFIGS[config]
    assert (k[".wavefront_size"], k[".max_flat_workgroup_size"]) == (64, 64 * warps)
    assert (k[".private_segment_fixed_size"], k[".vgpr_spill_count"], k[".sgpr_spill_count"]) == (0, 0, 0)
    assert not re.search(r"\bscratch_", asm), "scratch memory traffic"

    body = asm[asm.index(f"{spec.kernel_name}:"):asm.index(".Lfunc_end0")]
    mnemonic, per_chunk = MFMA[(arch, kind)]
    assert set(re.findall(r"\bv_mfma_\w+", body)) == {mnemonic}
    # One pass of the K loop: per step in flight, every (tm, tn) tile issues per_chunk MFMAs over the lane's
    # chunk, and the lane loads one 16-byte vector per A tile and per B tile.
    n_mfma = len(re.findall(rf"\b{mnemonic}\b", body))
    n_vec_loads = len(re.findall(r"\bglobal_load_dwordx4\b", body))
    assert n_mfma > 0 and n_mfma % (steps * tiles_m * tiles_n * per_chunk) == 0, n_mfma
    assert n_vec_loads > 0 and n_vec_loads % (steps * (tiles_m + tiles_n)) == 0, n_vec_loads
