"""The persistent grouped kernels (GroupedPersistent<Config>: sm90_gemm_persistent.hpp with the group table of
gemm_groups.hpp) build on the CPU for every persistent config without pairs, bf16 and fp8, plain and SwiGLU
epilogues: no spills or stack (the table is built before setmaxnreg, where epi7's 512 threads have 128 registers),
no C75xx warnings, the launch's shared memory (a stage fewer, then the table) fits the config; and the host refuses
what the kernels do not take, before any launch. Their GPU run: tests/test_gpu_grouped.py::test_persistent_configs."""
import re
from types import SimpleNamespace

import pytest
import torch

from fusedgemm import pending
from fusedgemm.epilogue.codegen import EpilogueSpec
from fusedgemm.plan.grouped_call import PERSISTENT_MAX_GROUPS, GroupedCallPlan, grouped_config_ok
from fusedgemm.runtime import kernels
from fusedgemm.runtime.build import BuildSpec, code_object_dir
from fusedgemm.runtime.gemm_spec import GemmKernel, spec_for_activation
from fusedgemm.swiglu import glu_expression

from code_objects import sass

PERSISTENT = [c for c, cfg in kernels.GEMM_CONFIGS.items() if cfg.persistent and grouped_config_ok(c)]
SWIGLU_8 = EpilogueSpec.of(glu_expression("silu", bias=True, scaled=True),
                           {"scale_a": "f32", "scale_gate": "f32", "scale_up": "f32", "bias_gate": "bf16",
                            "bias_up": "bf16"})
SWIGLU_16 = EpilogueSpec.of(glu_expression("silu"), {})
CASES = [(c, kind, epi) for c in PERSISTENT for kind, epi in (("bf16", "swiglu16"), ("bf16", "silu"),
                                                               ("fp8", "swiglu8"), ("fp8", "silu"))
         if kernels.GEMM_CONFIGS[c].serves(kind)]


def test_every_persistent_config_without_pairs_has_grouped_kernels():
    assert PERSISTENT and all(not kernels.GEMM_CONFIGS[c].pair_b for c in PERSISTENT)
    assert not grouped_config_ok("pair_persistent_128x128")
    for c in PERSISTENT:  # a stage fewer, then the table: below the CTA's 227 KB
        assert kernels.grouped_persistent_smem(c) <= 227 * 1024
        assert kernels.grouped_persistent_smem(c) == (kernels.GEMM_CONFIGS[c].smem - 32 * 1024
                                                      - 2 * 8 + kernels.GROUP_TABLE_BYTES)


@pytest.mark.slow
@pytest.mark.parametrize("config,kind,epi", CASES)
def test_grouped_persistent_kernels_build(config, kind, epi):
    e = {"swiglu8": SWIGLU_8, "swiglu16": SWIGLU_16}.get(epi) or spec_for_activation(epi)
    spec = GemmKernel("sm_90a", config, kind, "bf16", e, grouped=True)
    assert "GroupedPersistent<" in spec.source() and spec.smem == kernels.grouped_persistent_smem(config)
    build = BuildSpec(spec.unit, "sm_90a", spec.source())
    d = code_object_dir(build)
    log = (d / f"{spec.unit}.log").read_text()
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0", "0") for s in spills), spills
    assert not re.search(r"C75\d\d", log), "ptxas serialised the wgmma pipeline"
    code = sass(d / build.file_name())
    assert not re.search(r"\b(STL|LDL)\b", code)
    assert re.search(r"\bSHFL\.UP\b", code), "the group table's warp scans"


def _layout(groups=8, rows=0):
    return SimpleNamespace(groups=groups, m=64, rows=rows, rows_hint=8, index=None, lead=(64,))


@pytest.mark.parametrize("layout,block_scaled,epi,match", [
    (_layout(rows=-1), False, spec_for_activation("silu"), "m_indices"),
    (_layout(groups=PERSISTENT_MAX_GROUPS + 1), False, spec_for_activation("silu"), "groups"),
    (_layout(), True, spec_for_activation("silu"), "block scales"),
    (_layout(), False, EpilogueSpec.of(glu_expression("silu", bias=True, scaled=True),
                                       {"scale_a": "f32", "scale_gate": "f32", "scale_up": "f32",
                                        "bias_gate": "bf16", "bias_up": "bf16"}, out_group=128), "out_group"),
])
def test_persistent_grouped_refusals(monkeypatch, layout, block_scaled, epi, match):
    monkeypatch.setattr(pending, "PENDING_GPU_RUN", set())
    with pytest.raises(ValueError, match=match):
        GroupedCallPlan(0, "sm_90a", "fp8", layout, 256, 256, torch.bfloat16, epi, {}, (), 256, "grouped_gemm_a8",
                        block_scaled=block_scaled, config="persistent_128x128")


def test_persistent_grouped_is_pending_until_its_gpu_run():
    assert "sm90_grouped_persistent" in pending.PENDING_GPU_RUN
    with pytest.raises(NotImplementedError, match="sm90_grouped_persistent"):
        GroupedCallPlan(0, "sm_90a", "fp8", _layout(), 256, 256, torch.bfloat16, spec_for_activation("silu"), {},
                        (), 256, "grouped_gemm_a8", config="persistent_128x128")


@pytest.mark.parametrize("in_kind", ["bf16", "fp8"])
def test_the_plan_takes_a_persistent_config_only_once_cleared(monkeypatch, in_kind):
    """The dense plan's persistent rule on the grouped call's rows (Qwen3-30B's down projection at 4096 tokens x
    top-8: 32768 rows, N 2048, K 768), taken only where pending.py has cleared the kernels and the call fits them."""
    from fusedgemm.plan import grouped_call

    monkeypatch.setattr(grouped_call, "sm_count", lambda _dev: 132)
    args = (0, in_kind, _layout(groups=128), 32768, 2048, 768, False, spec_for_activation("silu"))
    assert grouped_call.sm90_persistent(*args) is None  # pending
    monkeypatch.setattr(pending, "PENDING_GPU_RUN", set())
    got = grouped_call.sm90_persistent(*args)
    assert got is not None and got.persistent and not got.pair_b
    assert grouped_call.sm90_persistent(0, in_kind, _layout(rows=-1), *args[3:]) is None  # m_indices
    assert grouped_call.sm90_persistent(*args[:6], True, args[7]) is None  # block scales
