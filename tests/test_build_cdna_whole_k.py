"""The CDNA LDS configs' kernels for K filling whole K blocks (CdnaWholeKBlocks<Config>, cdna_gemm.hpp) beside the
kernels for any K, built for gfx942 and gfx950 on the CPU in every family that instantiates the template: gemm_a8's
generated epilogues, matmul_fused's bf16 / fp16, grouped, block-scaled, grouped block-scaled, paired (gate / up)
and group-quantised outputs (cdna_lds_128x128, cdna_lds_128x256, cdna_lds_64x256), and the split-K decode tiles
(cdna_lds_64x32_k4, cdna_lds_32x32_k8, cdna_lds_64x64_k2). Each: the argument packing the
host uses, no scratch, no VGPR spills, no SGPR spills where the kernel for any K has none, registers (VGPR + AGPR)
within the block's budget and the other kernel's occupancy; the whole-K kernel has no K-edge test and names
itself. The ahead-of-time unit's preset kernels of both kinds: tests/test_build.py."""
import re

import pytest

from fusedgemm.epilogue import parse
from fusedgemm.epilogue.codegen import EpilogueSpec
from fusedgemm.plan import cdna_model
from fusedgemm.runtime import tile_configs
from fusedgemm.runtime.build import BuildSpec, code_object_dir
from fusedgemm.runtime.codeobject import hsaco_kernels, hsaco_params
from fusedgemm.runtime.gemm_spec import GemmKernel, whole_k_blocks
from fusedgemm.swiglu import glu_expression

ARCHES = ("gfx942", "gfx950")
FP8_OUT = {"gfx942": "fp8e4m3fnuz", "gfx950": "fp8e4m3fn"}
SWIGLU_8 = EpilogueSpec.of(glu_expression("silu", bias=True, scaled=True),
                           {"scale_a": "f32", "scale_gate": "f32", "scale_up": "f32", "bias_gate": "bf16",
                            "bias_up": "bf16"})
# name -> (config, in kind, output ("fp8": the arch's), epilogue, GemmKernel keywords)
FAMILIES = {
    "gemm_a8_expression": ("cdna_lds_128x128", "fp8", "fp32", EpilogueSpec.of(
        parse("silu(acc * n_vec(s)) + aux(res)"), {"s": "f32", "res": "bf16"}), {}),
    "matmul_bf16_bias_silu": ("cdna_lds_128x128", "bf16", "bf16",
                              EpilogueSpec.of(parse("silu(acc + n_vec(bias))"), {"bias": "bf16"}), {}),
    "matmul_fp16_alpha_beta_c": ("cdna_lds_128x128", "fp16", "fp16", EpilogueSpec.of(
        parse("silu(scalar(alpha) * acc + scalar(beta) * aux(c))"), {"c": "f16"}), {}),
    "matmul_bf16_alpha_beta_c": ("cdna_lds_128x128", "bf16", "bf16", EpilogueSpec.of(
        parse("silu(scalar(alpha) * acc + scalar(beta) * aux(c))"), {"c": "bf16"}), {}),
    "matmul_tf32_alpha_beta_c": ("cdna_lds_128x128", "tf32", "fp32", EpilogueSpec.of(
        parse("silu(scalar(alpha) * acc + scalar(beta) * aux(c))"), {"c": "f32"}), {}),
    "grouped_bf16": ("cdna_lds_128x128", "bf16", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                     {"grouped": True}),
    "grouped_int8": ("cdna_lds_128x128", "int8", "fp32", EpilogueSpec.of(parse("acc"), {}), {"grouped": True}),
    "block_scaled": ("cdna_lds_128x128", "fp8", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                     {"block_scaled": True}),
    "grouped_block_scaled": ("cdna_lds_128x128", "fp8", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                             {"block_scaled": True, "grouped": True}),
    "pairs_swiglu8": ("cdna_lds_128x128", "fp8", "bf16", SWIGLU_8, {}),
    "out_group": ("cdna_lds_128x128", "fp8", "fp8", EpilogueSpec.of(parse("acc"), {}, out_group=128), {}),
    "out_group_pairs": ("cdna_lds_128x256", "fp8", "fp8",
                        EpilogueSpec.of(parse("silu(gate) * up"), {}, out_group=128), {}),
    "out_group_pairs_block_scaled": ("cdna_lds_64x256", "fp8", "fp8",
                                     EpilogueSpec.of(parse("silu(gate) * up"), {}, out_group=128),
                                     {"block_scaled": True}),
    # the decode tiles with K split inside the block (kWarpsK > 1; block scales on 64x32_k4 only)
    "split_k_gemm_a8_expression": ("cdna_lds_64x32_k4", "fp8", "fp32", EpilogueSpec.of(
        parse("silu(acc * n_vec(s)) + aux(res)"), {"s": "f32", "res": "bf16"}), {}),
    "split_k_matmul_bf16": ("cdna_lds_32x32_k8", "bf16", "bf16",
                            EpilogueSpec.of(parse("silu(acc + n_vec(bias))"), {"bias": "bf16"}), {}),
    "split_k_matmul_tf32": ("cdna_lds_64x32_k4", "tf32", "fp32",
                            EpilogueSpec.of(parse("silu(acc + n_vec(bias))"), {"bias": "f32"}), {}),
    "split_k_grouped_bf16": ("cdna_lds_32x32_k8", "bf16", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                             {"grouped": True}),
    "split_k_pairs_swiglu8": ("cdna_lds_32x32_k8", "fp8", "bf16", SWIGLU_8, {}),
    "split_k_block_scaled": ("cdna_lds_64x32_k4", "fp8", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                             {"block_scaled": True}),
    "split_k_grouped_block_scaled": ("cdna_lds_64x32_k4", "fp8", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                                     {"block_scaled": True, "grouped": True}),
    "split_k_matmul_fp16_alpha_beta_c": ("cdna_lds_64x64_k2", "fp16", "fp16", EpilogueSpec.of(
        parse("silu(scalar(alpha) * acc + scalar(beta) * aux(c))"), {"c": "f16"}), {}),
    "split_k_block_scaled_64x64": ("cdna_lds_64x64_k2", "fp8", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                                   {"block_scaled": True}),
    # the 64-row twin of cdna_lds_128x128 (M around 1024)
    "rows64_matmul_bf16_alpha_beta_c": ("cdna_lds_64x128", "bf16", "bf16", EpilogueSpec.of(
        parse("silu(scalar(alpha) * acc + scalar(beta) * aux(c))"), {"c": "bf16"}), {}),
    "rows64_block_scaled": ("cdna_lds_64x128", "fp8", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                            {"block_scaled": True}),
    "rows64_grouped_block_scaled": ("cdna_lds_64x128", "fp8", "bf16", EpilogueSpec.of(parse("silu(acc)"), {}),
                                    {"block_scaled": True, "grouped": True}),
}
CASES = [(arch, family) for arch in ARCHES for family in FAMILIES]
# VGPR + AGPR per lane: two 4-wave workgroups per CU (cdna_lds_128x128, what the plan's model assumes); the 8-wave
# block's two waves per SIMD; a block-scaled 4-wave block (its partial tile per K block) may use the AGPRs too (one
# workgroup per CU)
# block; the split-K decode tiles' 8 / 16 waves (one workgroup of 64 KB LDS per CU): 2 / 4 waves per SIMD
BUDGET = {"cdna_lds_128x128": 256, "cdna_lds_128x256": 256, "cdna_lds_64x256": 512, "cdna_lds_64x32_k4": 256,
          "cdna_lds_32x32_k8": 128, "cdna_lds_64x64_k2": 256, "cdna_lds_64x128": 256}
BLOCK_SCALED_BUDGET = 512
# (arch, family) whose whole-K kernel holds fewer workgroups per CU than the kernel for any K (none since gfx950 loads A
# straight into LDS: the 16-wave grouped bf16 decode tile's whole-K kernel took 65 VGPRs against 63 before)
KNOWN_OCCUPANCY_LOSS: set[tuple[str, str]] = set()


def _kernel(arch, family, whole):
    config, kind, out, epi, kw = FAMILIES[family]
    spec = GemmKernel(arch, config, kind, FP8_OUT[arch] if out == "fp8" else out, epi, whole_k_blocks=whole, **kw)
    build = BuildSpec(spec.unit, arch, spec.source())
    d = code_object_dir(build)
    meta = hsaco_kernels((d / build.file_name()).read_bytes())[spec.kernel_name]
    asm = (d / f"{spec.unit}.s").read_text()
    return spec, meta, asm[asm.index(f"{spec.kernel_name}:"):asm.index(".Lfunc_end0")]


def _registers(meta) -> int:
    """VGPRs + AGPRs per lane: .vgpr_count is the unified file's allocation (with AGPRs: accum_offset + AGPRs)."""
    return int(meta[".vgpr_count"])


def test_whole_k_specs_are_their_own_kernels():
    """The spec of the whole-K kernel: its own unit and kernel name (whole_k_ before the config), the wrapped config
    in its source; only the CDNA LDS configs have one, and the launch rule is K a positive multiple of the config's
    pipeline stage (128 bytes; a split-K decode tile's K slices times 128)."""
    config, kind, out, epi, _kw = FAMILIES["matmul_bf16_bias_silu"]
    any_k = GemmKernel("gfx942", config, kind, out, epi)
    whole = GemmKernel("gfx942", config, kind, out, epi, whole_k_blocks=True)
    assert whole.unit != any_k.unit and whole.kernel_name.endswith("_whole_k_" + config)
    assert not any_k.kernel_name.endswith("_whole_k_" + config)
    assert "fg::CdnaWholeKBlocks<fg::ConfigCdnaLds128x128>" in whole.source()
    assert "CdnaWholeKBlocks" not in any_k.source()
    with pytest.raises(ValueError, match="CDNA LDS configs"):
        GemmKernel("gfx942", "portable_128x128", kind, out, epi, whole_k_blocks=True).source()
    for name, t in tile_configs.CONFIGS.items():
        for kind, nbytes in (("fp8", 1), ("int8", 1), ("bf16", 2), ("fp16", 2), ("tf32", 4)):
            for k in (0, 8, 16, 56, 64, 72, 112, 128, 136, 192, 256, 512, 1024, 1536, 4096, 4104):
                want = isinstance(t, tile_configs.CdnaTile) and k > 0 and k * nbytes % (128 * t.warps_k) == 0
                assert whole_k_blocks(name, kind, k) == want, (name, kind, k)


@pytest.mark.slow
@pytest.mark.parametrize("arch,family", CASES, ids=["-".join(c) for c in CASES])
def test_both_kernels_build_without_spills_within_the_register_budget(arch, family):
    """Both kernels of the family: packing, no scratch or spills, LDS and workgroup size, registers in budget."""
    config = FAMILIES[family][0]
    t = tile_configs.CONFIGS[config]
    regs, sgpr_spills = {}, {}
    for whole in (False, True):
        spec, k, body = _kernel(arch, family, whole)
        what = f"{spec.kernel_name}"
        sig = spec.signature
        assert [(p.offset, p.size) for p in hsaco_params(k)] == list(zip(sig.offsets, sig.sizes)), what
        assert (k[".private_segment_fixed_size"], k[".vgpr_spill_count"]) == (0, 0), what
        assert not re.search(r"\bscratch_", body), what
        assert k[".group_segment_fixed_size"] == t.lds_bytes and k[".max_flat_workgroup_size"] == 64 * t.warps
        regs[whole], sgpr_spills[whole] = _registers(k), int(k[".sgpr_spill_count"])
    block_scaled = FAMILIES[family][4].get("block_scaled", False)
    assert max(regs.values()) <= (BLOCK_SCALED_BUDGET if block_scaled and t.warps_k == 1 else BUDGET[config]), regs
    # SGPRs spilled into VGPR lanes (no memory): the grouped and group-quantised kernels for any K already do; the
    # whole-K kernel spills none where that one spills none
    assert sgpr_spills[True] == 0 or sgpr_spills[False] > 0, sgpr_spills
    # the whole-K kernel keeps the other's occupancy (workgroups per CU by the 512 registers per SIMD lane over its
    # waves and by LDS); the grouped and group-quantised block-scaled ones by their clamped prefetch (cdna_gemm.hpp
    # kClampedPrefetch)
    occupancy = {w: cdna_model.workgroups_per_cu(cdna_model.HARDWARE[arch], t.warps, r, t.lds_bytes)
                 for w, r in regs.items()}
    if (arch, family) in KNOWN_OCCUPANCY_LOSS:
        assert occupancy[True] < occupancy[False], f"{arch} {family} keeps its occupancy now: {regs}"
    else:
        assert occupancy[True] >= occupancy[False], (regs, occupancy)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHES)
def test_whole_k_loop_has_no_k_edge_test(arch):
    """The K-edge test of the kernel for any K is a v_cndmask per buffer load (16 per iteration of its K loop, 8 more
    in the prologue); the whole-K kernel has none of them (the selects it has are the epilogue's)."""
    counts = [len(re.findall(r"\bv_cndmask_b32", _kernel(arch, "matmul_bf16_bias_silu", whole)[2]))
              for whole in (False, True)]
    assert counts[1] + 16 <= counts[0], counts
