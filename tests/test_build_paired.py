"""Paired (gate, up) epilogue kernels build on the CPU for every arch and config that can run them: sm_90a
(nvcc: no spills, no C75xx ptxas warnings, the swapped decode tiles exchange with a warp shuffle), gfx942 /
gfx950 (no spills or scratch, the lane exchange is a ds_bpermute); the packed arguments equal the code object's
metadata. The lane rules themselves: tests/test_fragment_model.py."""
import re

import pytest

from fusedgemm.runtime.build import BuildSpec, code_object_dir
from fusedgemm.runtime.codeobject import hsaco_kernels, hsaco_params
from fusedgemm.runtime.gemm_spec import GemmKernel
from fusedgemm.runtime.kernels import GEMM_CONFIGS
from fusedgemm.swiglu import glu_expression
from fusedgemm.epilogue.codegen import EpilogueSpec

from code_objects import sass

SWIGLU_16 = EpilogueSpec.of(glu_expression("silu", bias=True), {"bias_gate": "bf16", "bias_up": "bf16"})
GEGLU_EXACT = EpilogueSpec.of(glu_expression("gelu", exact_dtype="bf16"), {})
SWIGLU_8 = EpilogueSpec.of(glu_expression("silu", bias=True, scaled=True),
                           {"scale_a": "f32", "scale_gate": "f32", "scale_up": "f32", "bias_gate": "bf16",
                            "bias_up": "bf16"})

SM90 = [c for c, cfg in GEMM_CONFIGS.items() if cfg.sm90 and cfg.serves("bf16")]
# KNOWN (open): none. The 8-bit SwiGLU with per-row and per-channel scales and a bias spilled 40-56 bytes on the
# 192-wide tiles (tile_128x192, tile_192x128) while its 16-bit operands loaded and converted element by element; with all
# the bits loaded first (codegen loads16) it does not. A config listed here is marked, so a fix shows as an XPASS.
_SPILLS: set = set()
SM90_CASES = ([(c, "bf16", "bf16", "swiglu") for c in SM90] + [(c, "fp8", "bf16", "swiglu8") for c in SM90
              if GEMM_CONFIGS[c].serves("fp8")] + [("portable_128x128", "fp8", "bf16", "swiglu8"),
                                                     ("swap_16x128", "fp16", "fp16", "geglu_exact")])
SM90_CASES = [pytest.param(*c, marks=pytest.mark.xfail(strict=True, reason="spills: see _SPILLS"))
              if c[:2] in _SPILLS and c[3] == "swiglu8" else c for c in SM90_CASES]
AMD_CASES = [(arch, c, kind, epi) for arch in ("gfx942", "gfx950") for c in ("portable_16x16_k8", "portable_64x16_k8", "portable_128x128")
             for kind, epi in (("bf16", "swiglu"), ("fp8", "swiglu8"), ("int8", "swiglu8"))] + [
    (arch, "cdna_lds_128x128", kind, "swiglu8") for arch in ("gfx942", "gfx950") for kind in ("fp8", "int8")]
SPECS = {"swiglu": SWIGLU_16, "swiglu8": SWIGLU_8, "geglu_exact": GEGLU_EXACT}


def _built(arch, config, kind, out, epi):
    spec = GemmKernel(arch, config, kind, out, SPECS[epi])
    build = BuildSpec(spec.unit, arch, spec.source())
    return spec, build, code_object_dir(build)


@pytest.mark.slow
@pytest.mark.parametrize("config,kind,out,epi", SM90_CASES)
def test_sm90_paired_kernels(config, kind, out, epi):
    spec, build, d = _built("sm_90a", config, kind, out, epi)
    log = (d / f"{spec.unit}.log").read_text()
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0", "0") for s in spills), spills
    assert not re.search(r"C75\d\d", log), "ptxas serialised the wgmma pipeline"
    shuffles = len(re.findall(r"\bSHFL\.BFLY\b", sass(d / build.file_name())))
    if GEMM_CONFIGS[config].swap_ab:  # store_swapped pairs weight rows across threads t, t ^ 4
        assert shuffles > 0
    else:  # the D fragment (and mma.sync's) already holds column pairs: no exchange
        assert shuffles == 0, shuffles


@pytest.mark.slow
@pytest.mark.parametrize("arch,config,kind,epi", AMD_CASES, ids=["-".join(c) for c in AMD_CASES])
def test_amd_paired_kernels(arch, config, kind, epi):
    spec, build, d = _built(arch, config, kind, "bf16", epi)
    k = hsaco_kernels((d / build.file_name()).read_bytes())[spec.kernel_name]
    sig = spec.signature
    assert [(p.offset, p.size) for p in hsaco_params(k)] == list(zip(sig.offsets, sig.sizes)), "argument packing"
    assert (k[".private_segment_fixed_size"], k[".vgpr_spill_count"], k[".sgpr_spill_count"]) == (0, 0, 0)
    asm = (d / f"{spec.unit}.s").read_text()
    assert not re.search(r"\bscratch_", asm), "scratch memory traffic"
    body = asm[asm.index(f"{spec.kernel_name}:"):asm.index(".Lfunc_end0")]
    assert re.search(r"\bds_bpermute_b32\b", body), "the lane ^ 1 exchange"
