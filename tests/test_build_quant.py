"""The quantize_rows code object builds for sm_90a, gfx942 and gfx950 on the CPU: every kernel is there with the
packed argument layout, nothing spills to memory, and the ISA is what the design says (16-byte loads on the
pack path, IEEE division for the scale, no FMA fused into the per-element product, hardware e4m3fn
conversion on sm_90a)."""
import re
from collections import Counter

import pytest

from fusedgemm.runtime import kernels
from fusedgemm.runtime.arch import SUPPORTED_ARCHES
from fusedgemm.runtime.build import BuildSpec, code_object_dir
from fusedgemm.runtime.codeobject import cubin_params, hsaco_kernels, hsaco_params

from code_objects import sass_functions

NAMES = kernels.quantize_rows_kernel_names()


def test_quantize_rows_layout_and_names():
    sig = kernels.QUANTIZE_ROWS
    assert sig.offsets == (0, 8, 16, 24, 32, 36, 40) and sig.struct.size == 44
    assert len(NAMES) == 18 and len(set(NAMES)) == 18
    assert kernels.quantize_rows_kernel_name("bfloat16", "float8_e4m3fn", True) == "fg_quantize_rows_bf16_e4m3fn_v16"


def test_planner_holds_the_row_in_registers_up_to_the_block_cap():
    from fusedgemm.quant import plan_quantize_rows

    per_thread = kernels.QUANTIZE_ROWS_CACHED_PACKS
    for k, es in ((4096, 2), (16384, 2), (16384, 4), (32768, 2), (1000, 2), (4104, 2)):
        threads, blocks = plan_quantize_rows(7, k, es, True)
        assert threads % 64 == 0 and 64 <= threads <= kernels.QUANTIZE_ROWS_MAX_THREADS and blocks == 7
        assert threads * per_thread * (16 // es) >= k, (k, es, threads)  # the whole row stays in registers
    assert plan_quantize_rows(3, 200000, 2, True)[0] == kernels.QUANTIZE_ROWS_MAX_THREADS  # longer: a tail
    assert plan_quantize_rows(10**7, 64, 2, True)[1] == 1 << 20  # grid-stride past 2^20 rows


@pytest.fixture(scope="module", params=sorted(SUPPORTED_ARCHES))
def built(request):
    spec = BuildSpec("quantize_rows", request.param)
    d = code_object_dir(spec)
    return request.param, d, (d / spec.file_name()).read_bytes()


def _amdgcn_bodies(text: str) -> dict:
    return {m.group(1): m.group(2) for m in re.finditer(r"^(fg_\w+):[^\n]*$(.*?)^\.Lfunc_end", text, re.S | re.M)}


@pytest.mark.slow
def test_quantize_rows_code_object(built):
    arch, d, data = built
    want = list(zip(kernels.QUANTIZE_ROWS.offsets, kernels.QUANTIZE_ROWS.sizes))
    if arch == "sm_90a":
        params = cubin_params(data)
        for name in NAMES:
            assert [(p.offset, p.size) for p in params[name]] == want, name
        log = (d / "quantize_rows.log").read_text()
        spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert len(spills) == len(NAMES) and all(s == ("0", "0", "0") for s in spills), spills
        bodies = sass_functions(d / "quantize_rows.cubin")
        for name in NAMES:
            body = bodies[name]
            ops = Counter(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", body))
            assert not re.search(r"\b(LDL|STL)\b", body), name
            assert "SHFL.BFLY" in body and "BAR.SYNC" in body, f"{name}: warp shuffles + one barrier per row"
            if name.endswith("_v16"):
                assert ops["LDG.E.128.CONSTANT"] + ops["LDG.E.128"] >= kernels.QUANTIZE_ROWS_CACHED_PACKS, name
            if "_e4m3fn_" in name:
                assert any(op.startswith("F2FP.SATFINITE.E4M3") for op in ops), f"{name}: no hardware e4m3 cvt"
            if "_i8_" in name:
                assert any(op.startswith("F2I") for op in ops), name
            # the per-element products are FMULs; FFMAs belong to the two IEEE divisions per row (and the
            # software fp8 path's exact power-of-two rescale), never to x * (1 / scale)
            assert ops["FMUL"] >= (64 if name.endswith("_v16") and "_f32_" not in name else 8), (name, ops["FMUL"])
    else:
        kmeta = hsaco_kernels(data)
        bodies = _amdgcn_bodies((d / "quantize_rows.s").read_text())
        for name in NAMES:
            k = kmeta[name]
            assert [(p.offset, p.size) for p in hsaco_params(k)] == want, name
            # SGPR spills (a few on the element path) go to VGPR lanes (v_writelane), not to memory
            assert (k[".private_segment_fixed_size"], k[".vgpr_spill_count"]) == (0, 0), name
            body = bodies[name]
            assert "scratch_" not in body and "buffer_store" not in body, name
            assert "ds_bpermute_b32" in body and "s_barrier" in body, name
            assert body.count("v_div_fixup_f32") == 2, f"{name}: the scale and its reciprocal are IEEE divisions"
            if name.endswith("_v16"):
                assert "global_load_dwordx4" in body, name
            assert "v_mul_f32" in body, name
