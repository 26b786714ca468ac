"""The paper model of the CDNA kernels (plan/cdna_model.py), the plan it drives (plan/cdna.py) and
`python -m fusedgemm.bench predict`: PREDICTED numbers, so these tests check consistency, not speed -- the hot-loop
table against the code objects, the MFMA cycle table against the datasheet peaks, the plan against the model's
argmin, and the bench's labels."""
from __future__ import annotations

import math
import re
import shutil
import types

import pytest

from fusedgemm.plan import cdna, cdna_model as cm, cdna_xcd_order as xo, plans
from fusedgemm.runtime import kernels, tile_configs

ARCHES = ("gfx942", "gfx950")
CONFIGS = cdna.CONFIGS
# (arch, kind) -> MFMAs per 16 x 16 tile per K step: arch/gfx942_mfma.hpp, arch/gfx950_mfma.hpp
MFMA_PER_TILE_STEP = {("gfx942", k): 2 for k in cm.KINDS} | {("gfx950", k): 1 for k in cm.KINDS} | {
    ("gfx950", "tf32"): 4}
CHUNKS_PER_LANE = {("gfx950", "fp8"): 2}
# (config, kind) pairs with kernels: the 4-wave and split-K LDS-staged cdna_lds_* configs serve every kind
SERVED = [(c, k) for c in CONFIGS for k in cm.KINDS if kernels.GEMM_CONFIGS[c].serves(k)]
REGISTER_DIRECT = tuple(c for c in CONFIGS if isinstance(tile_configs.CONFIGS[c], tile_configs.PortableTile))
LDS_STAGED = tuple(c for c in CONFIGS if isinstance(tile_configs.CONFIGS[c], tile_configs.CdnaTile))
# the LDS-staged configs' kernels for K filling whole K blocks (no K-edge test in their loads)
WHOLE_K = tuple(tile_configs.WHOLE_K_PREFIX + c for c in LDS_STAGED)
BLOCK = "fp8block"  # the model's kind of gemm_a8's block-scaled fp8 kernels (blockscale.py)


def _block_kernels():
    """The block-scaled kernels the AMD plan can launch: every config with one (blockscale.AMD_BLOCK_CONFIGS) and
    the whole-K-block kernel of the LDS-staged ones."""
    from fusedgemm.blockscale import AMD_BLOCK_CONFIGS

    return AMD_BLOCK_CONFIGS + tuple(tile_configs.WHOLE_K_PREFIX + c for c in AMD_BLOCK_CONFIGS if c in LDS_STAGED)


def _shapes():
    grid = [(m, n, k) for m in (1, 16, 64, 256, 1024, 4096, 8192)
            for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (7168, 2048))]
    odd = [(1, 16, 16), (3, 48, 80), (100, 1000, 208), (65, 4096, 4096), (129, 8192, 1024), (17, 4096, 4096),
           (2048, 2048, 2048), (16384, 16384, 16384)]
    return grid + odd


def test_hot_loop_table_covers_every_arch_config_kind():
    whole = {(a, tile_configs.WHOLE_K_PREFIX + c, k) for a in ARCHES for c, k in SERVED if c in LDS_STAGED}
    block = {(a, c, BLOCK) for a in ARCHES for c in _block_kernels()}
    assert {(a, c, k) for a in ARCHES for c, k in SERVED} | whole | block == set(cm.HOT_LOOPS)
    # whatever the block-scaled plan picks (of the configs with block-scaled kernels) has a block-scaled row
    assert set(cdna.BLOCK_SCALED_CONFIGS) <= set(_block_kernels())
    # cdna_lds_32x32_k8's waves hold two row tiles, not the row groups of four the scale hand-out needs
    assert set(cdna.CONFIGS) - set(cdna.BLOCK_SCALED_CONFIGS) == {"cdna_lds_32x32_k8"}


@pytest.mark.parametrize("arch", ARCHES)
def test_block_scaled_loops_are_the_fp8_loops_plus_the_scale_work(arch):
    """A block-scaled loop (portable_gemm.hpp / cdna_gemm.hpp with PortableBlockScaled) has the fp8 loop's MFMAs,
    data loads, LDS ops and barriers, plus the scale loads: the register-direct loop per step one 4-byte load per
    accumulator row of each 16 x 16 tile (4 per tile of M) and per tile of N; the LDS-staged loop per K block
    tiles_m / 4 loads a lane (its row group's rows, handed out by DPP row_newbcast) and scale_b, one value a wave:
    a scalar load (SMEM) on gfx942; on gfx950, whose loads into LDS the compiler takes as possible writes to global
    memory, it is no longer sure the scale is unchanged and loads it by a vector load instead (one more a K block);
    and the partial tiles' scaled adds (more VALU). Its instructions are never fewer than the fp8's (registers may
    be: the allocator's choice, e.g. gfx950's cdna_lds_64x64_k2 loop for any K, 76 VGPRs against 82)."""
    for kernel in _block_kernels():
        h, f = cm.HOT_LOOPS[(arch, kernel, BLOCK)], cm.HOT_LOOPS[(arch, kernel, "fp8")]
        t = tile_configs.CONFIGS[cm.config_of(kernel)]
        if kernel.removeprefix(tile_configs.WHOLE_K_PREFIX) in LDS_STAGED:
            scale_loads = 2 * (t.tiles_m // 4)  # two K blocks an iteration
            if arch == "gfx950":
                scale_loads += 2
            else:
                assert h.smem >= f.smem + 2, kernel
        else:
            scale_loads = t.steps_in_flight * (4 * t.tiles_m + t.tiles_n)
        assert (h.mfma, h.steps, h.prefetch, h.lds_ops, h.lds_bytes, h.barrier, h.lds_kernel_bytes) == (
            f.mfma, f.steps, f.prefetch, f.lds_ops, f.lds_bytes, f.barrier, f.lds_kernel_bytes), kernel
        assert h.vmem_loads == f.vmem_loads + scale_loads, kernel
        assert h.vmem_load_bytes == f.vmem_load_bytes + 64 * 4 * scale_loads, kernel
        assert h.valu > f.valu and h.instructions > f.instructions, kernel
        assert cm.kernel_of(arch, cm.config_of(kernel), BLOCK, 4096) == cm.kernel_of(arch, cm.config_of(kernel),
                                                                                     "fp8", 4096)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kind", ("fp8", "int8", "bf16", "fp16"))
def test_whole_k_kernel_is_predicted_where_the_host_launches_it(arch, kind):
    """The model reads the whole-K-block kernel's loop exactly where runtime/gemm_spec.py launches that kernel: K a
    positive multiple of the 128-byte K block; its loop has no K-edge test (no VALU) and the same MFMAs, loads and LDS
    ops as the other kernel's."""
    from fusedgemm.runtime.gemm_spec import whole_k_blocks

    config = "cdna_lds_128x128"
    per_block = 128 // cm.IN_BYTES[kind]
    for k in (per_block, 3 * per_block, 4096, per_block - 16, per_block + 16, 4096 + 16):
        want = tile_configs.WHOLE_K_PREFIX + config if k % per_block == 0 else config
        assert cm.kernel_of(arch, config, kind, k) == want, k
        assert whole_k_blocks(config, kind, k) == (k % per_block == 0), k
    assert cm.kernel_of(arch, "portable_128x128", kind, 4096) == "portable_128x128"
    whole, any_k = cm.HOT_LOOPS[(arch, tile_configs.WHOLE_K_PREFIX + config, kind)], cm.HOT_LOOPS[(arch, config, kind)]
    assert whole.valu == 0 < any_k.valu
    assert (whole.mfma, whole.vmem_loads, whole.lds_ops, whole.steps) == (any_k.mfma, any_k.vmem_loads,
                                                                         any_k.lds_ops, any_k.steps)
    for k, h in ((4096, whole), (4096 + 16, any_k)):
        assert cm.predict(arch, kind, config, 1024, 4096, k) == cm.predict(arch, kind, config, 1024, 4096, k, hot=h)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("config", REGISTER_DIRECT)
@pytest.mark.parametrize("kind", cm.KINDS)
def test_hot_loop_counts_are_the_templates(arch, config, kind):
    """Per iteration: steps x tiles_m x tiles_n tiles, each the atom's MFMAs per K step; one 16-byte load per lane
    per A tile and per B tile per chunk the lane holds; one vmcnt wait; no LDS inside the loop (register-direct)."""
    h = cm.HOT_LOOPS[(arch, config, kind)]
    t = tile_configs.CONFIGS[config]
    assert h.steps == t.steps_in_flight
    assert h.mfma_count == t.steps_in_flight * t.tiles_m * t.tiles_n * MFMA_PER_TILE_STEP[(arch, kind)]
    lane_chunks = CHUNKS_PER_LANE.get((arch, kind), 1)
    assert h.vmem_loads == t.steps_in_flight * (t.tiles_m + t.tiles_n) * lane_chunks
    assert h.vmem_load_bytes == 1024 * h.vmem_loads
    assert (h.lds_ops, h.lds_loads, h.barrier, h.waitcnt) == (0, 0, 0, 1)
    assert all(m in cm.MFMA_CYCLES[arch] for m, _n in h.mfma)
    # the loop's MFMA work is exactly the K the iteration covers
    assert h.mfma_flops() == 2 * 16 * 16 * t.tiles_m * t.tiles_n * t.steps_in_flight * (
        cm.step_bytes(arch, kind) // cm.IN_BYTES[kind])


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("config", LDS_STAGED + WHOLE_K)
@pytest.mark.parametrize("kind", cm.KINDS)
def test_hot_loop_counts_of_the_lds_staged_template(arch, config, kind):
    """cdna_gemm.hpp's loop, unrolled twice: two pipeline stages per iteration (a wave's two 128-byte K blocks), the
    loads of the next stage in flight under this one's MFMAs (prefetch = one block). Per stage and wave: the A share
    of the stage's copy (kBlockM x 8 chunks x warps_k K slices over the block's lanes) and tiles_n B vectors per
    chunk the lane holds (preshuffled 8-bit or plain 16-bit B alike), by buffer loads; the A tile's fragments from
    LDS (ds_read_b128); the copy into LDS: gfx942 by registers (ds_write_b128), gfx950 by loads straight into LDS
    (buffer_load_dwordx4 ... lds, no ds_write); one barrier."""
    h = cm.HOT_LOOPS[(arch, config, kind)]
    config = cm.config_of(config)
    t = tile_configs.CONFIGS[config]
    per_block = t.block_k_bytes // cm.step_bytes(arch, kind)
    assert (h.steps, h.prefetch) == (2 * per_block, per_block) == cm.loop_shape(arch, config, kind)
    assert h.mfma_count == h.steps * t.tiles_m * t.tiles_n * MFMA_PER_TILE_STEP[(arch, kind)]
    a_copy = t.block_m * (t.stage_k_bytes // 16) // (64 * t.warps)
    lane_chunks = t.block_k_bytes // 16 // 4  # 16-byte chunks of a K block per lane (4 lane groups of 16)
    direct = arch == "gfx950"  # A straight into LDS (arch/cdna_buffer.hpp kLoadsToLdsVec16)
    assert h.vmem_loads == 2 * ((0 if direct else a_copy) + t.tiles_n * lane_chunks)
    assert h.vmem_load_bytes == 1024 * h.vmem_loads
    assert (h.lds_loads, h.lds_load_bytes) == ((2 * a_copy, 2048 * a_copy) if direct else (0, 0))
    assert h.lds_ops == 2 * (t.tiles_m * lane_chunks + (0 if direct else a_copy)) and h.lds_bytes == 1024 * h.lds_ops
    assert (h.barrier, h.lds_kernel_bytes) == (2, t.lds_bytes)
    assert h.mfma_flops() == 2 * 16 * 16 * t.tiles_m * t.tiles_n * 2 * t.block_k_bytes // cm.IN_BYTES[kind]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kind", cm.KINDS)
def test_mfma_cycles_give_the_datasheet_peak(arch, kind):
    """FLOP per MFMA / cycles x 4 SIMDs x CUs x clock == the datasheet's dense peak (within 1%)."""
    hw = cm.HARDWARE[arch]
    (mnem, _n), = cm.HOT_LOOPS[(arch, "portable_128x128", kind)].mfma
    rate = cm.mfma_flops(mnem) / cm.MFMA_CYCLES[arch][mnem] * hw.simds * hw.cus * hw.clock_hz
    assert rate == pytest.approx(hw.peak[kind], rel=0.01), (mnem, rate)


def _amd_build_available():
    pytest.importorskip("msgpack")
    try:
        from fusedgemm.runtime.compilers import compiler_for

        compiler_for("gfx942")
    except Exception as exc:  # noqa: BLE001 - no AMD compiler here: the table cannot be re-read
        pytest.skip(f"no AMD build here ({type(exc).__name__})")


# block-scaled: the kernel the LLM grid's M >= 1024 rows run is re-read by default (two small generated units),
# the other block-scaled kernels with the slow ones
FAST_BLOCK = [(a, tile_configs.WHOLE_K_PREFIX + "cdna_lds_128x128", BLOCK) for a in ARCHES]
FAST = [(a, c, "fp8") for a in ARCHES for c in CONFIGS + WHOLE_K] + FAST_BLOCK
SLOW = [(a, c, k) for a in ARCHES for c, k in SERVED if k != "fp8"] + [
    (a, tile_configs.WHOLE_K_PREFIX + c, k) for a in ARCHES for c, k in SERVED if k != "fp8" and c in LDS_STAGED] + [
    (a, c, BLOCK) for a in ARCHES for c in _block_kernels() if (a, c, BLOCK) not in FAST_BLOCK]


def _reread(arch, config, kind):
    _amd_build_available()
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "probes" / "cdna_hot_loop.py"
    spec = importlib.util.spec_from_file_location("cdna_hot_loop", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.hot_loop(arch, config, kind) == cm.HOT_LOOPS[(arch, config, kind)], \
        "the code object's hot loop changed: rerun `python tools/probes/cdna_hot_loop.py --table > " \
        "pkg/fusedgemm/plan/cdna_hot_loops.txt`"


@pytest.mark.parametrize("arch,config,kind", FAST, ids=["-".join(c) for c in FAST])
def test_hot_loop_table_is_the_code_object(arch, config, kind):
    _reread(arch, config, kind)


@pytest.mark.slow
@pytest.mark.parametrize("arch,config,kind", SLOW, ids=["-".join(c) for c in SLOW])
def test_hot_loop_table_is_the_code_object_every_kind(arch, config, kind):
    _reread(arch, config, kind)


def test_loop_finder_and_classes_on_a_synthetic_listing():
    def ins(i, mnem, target=None):
        return types.SimpleNamespace(index=i, mnemonic=mnem, target_index=target, text=mnem)

    code = [ins(0, "s_load_dwordx2"), ins(1, "s_waitcnt"), ins(2, "v_mfma_f32_16x16x32_fp8_fp8"),
            ins(3, "global_load_dwordx4"), ins(4, "ds_read_b128"), ins(5, "s_add_u32"), ins(6, "v_add_u32_e32"),
            ins(7, "s_cbranch_scc1", 1), ins(8, "global_store_short"), ins(9, "v_cvt_f32_i32"),
            ins(10, "s_cbranch_vccnz", 9), ins(11, "s_endpgm")]
    assert cm.loop_range(code) == (1, 7)  # the loop with MFMAs, not the epilogue's
    h = cm.analyse(code)
    assert (h.mfma_count, h.vmem_loads, h.vmem_load_bytes, h.lds_ops, h.lds_bytes) == (1, 1, 1024, 1, 1024)
    assert (h.waitcnt, h.salu, h.valu, h.branch) == (1, 1, 1, 1)
    assert cm.classify("global_load_lds_dwordx4") == "lds_load" and cm.classify("buffer_load_dword") == "vmem_load"
    with pytest.raises(ValueError):
        cm.loop_range(code[8:])


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kind", ("fp8", "int8", "bf16"))
def test_plan_is_the_models_argmin_and_a_valid_plan(arch, kind):
    allowed = set(plans(arch, kind))
    for m, n, k in _shapes():
        cfg, splits = cdna.choose(m, n, k, arch, kind)
        times = {c: cm.predict(arch, kind, c, m, n, k).seconds for c in cdna.candidates(arch, kind)}
        assert cfg.name == min(times, key=times.get), (m, n, k, times)
        assert (cfg.name, splits) in allowed and cfg.serves(kind) and splits == 1
        assert cfg is kernels.GEMM_CONFIGS[cfg.name]


def test_plan_is_deterministic_and_cached():
    cdna.choose_name.cache_clear()
    first = [cdna.choose(m, n, k, "gfx942", "fp8")[0].name for m, n, k in _shapes()]
    hits = cdna.choose_name.cache_info().hits
    assert [cdna.choose(m, n, k, "gfx942", "fp8")[0].name for m, n, k in _shapes()] == first
    assert cdna.choose_name.cache_info().hits == hits + len(_shapes())


def test_plan_on_the_llm_grid():
    """What the model picks (docs/perf-notes.md, "AMD ... predicted"): split-K decode tiles up to M = 64,
    128 x 128 from M = 4096 (the LDS-staged one; its 64-row twin at M = 1024 on most gfx942 rows); the old M rule
    where the model has no hot loop (unknown arch -> gfx942's)."""
    for arch in ARCHES:
        for kind in ("fp8", "bf16"):
            for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)):
                assert re.search(r"_k\d$", cdna.choose(1, n, k, arch, kind)[0].name)
                # at M = 64 a 128 x 128 tile wins only where it reaches the HBM floor (gfx950, N = 28672)
                c64 = cdna.choose(64, n, k, arch, kind)[0].name
                assert re.search(r"_k\d$", c64) or cm.predict(arch, kind, c64, 64, n, k).bound == "HBM", c64
                assert cdna.choose(4096, n, k, arch, kind)[0].name == "cdna_lds_128x128"
                if arch == "gfx942" and n != 28672:  # (gate_up at M = 1024: a tie at the MFMA pipe)
                    assert cdna.choose(1024, n, k, arch, kind)[0].name == "cdna_lds_64x128"
    # ties (the HBM floor) go to the LDS-staged template: on the LLM grid the 8-bit and 16-bit kinds leave the
    # register-direct one but for its 16 x 16 decode tile where it is predicted faster (gfx950 fp8); so does tf32 on
    # gfx942 (xf32); gfx950's tf32 (exact fp32 MFMAs, MFMA-bound from M = 16) keeps it on some decode rows
    assert cdna.choose(16, 4096, 4096)[0].name == "cdna_lds_32x32_k8"
    for arch in ARCHES:
        for kind in cm.KINDS:
            names = {cdna.choose(m, n, k, arch, kind)[0].name for m, n, k in _shapes()[:35]}
            allowed = {"portable_16x16_k8"} | ({"portable_64x16_k8", "portable_128x128"} if (arch, kind) == (
                "gfx950", "tf32") else set())
            assert {c for c in names if c.startswith("portable_")} <= allowed, (arch, kind, names)
    assert cdna.choose(4096, 4096, 4096, "gfx942", "tf32")[0].name == "cdna_lds_128x128"
    assert cdna.choose(8192, 8192, 8192, "gfx999")[0].name == "cdna_lds_128x128"
    assert cdna.choose(8192, 8192, 8192, "gfx942", "f32x3")[0].name == cdna.by_m(8192)


def test_predictions_are_consistent():
    for arch in ARCHES:
        for m, n, k in _shapes():
            p = cm.predict(arch, "fp8", "portable_128x128", m, n, k)
            terms = dict(p.terms)
            assert set(terms) == set(cm.TERMS) and p.seconds == max(terms.values()) == terms[p.bound]
            assert p.seconds >= cm.mfma_floor(arch, "fp8", m, n, k) and p.seconds >= cm.hbm_floor(arch, "fp8", m, n, k)
            assert 0 < p.fraction_of_peak <= 1
    # the register-direct 128 x 128 tile is predicted L1-bound at large M; the redesign's counts MFMA-bound
    assert cm.predict("gfx942", "fp8", "portable_128x128", 8192, 8192, 8192).bound == "L1 (VMEM)"
    g, h = cm.redesign("gfx942", "fp8", "256x256")
    r = cm.predict("gfx942", "fp8", g.name, 8192, 8192, 8192, hot=h, geom=g)
    assert r.bound == "MFMA pipe" and r.fraction_of_peak > 0.8
    # the LDS-staged 128 x 128 kernel (A loaded once per block, one K block of loads in flight): MFMA-bound on gfx942
    lds = cm.predict("gfx942", "fp8", "cdna_lds_128x128", 8192, 8192, 8192)
    assert lds.bound == "MFMA pipe" and lds.seconds < cm.predict("gfx942", "fp8", "portable_128x128", 8192, 8192,
                                                                  8192).seconds


def test_occupancy_from_registers_and_lds():
    hw = cm.HARDWARE["gfx942"]
    h = cm.HOT_LOOPS[("gfx942", "portable_128x128", "fp8")]
    assert h.vgpr_alloc() == 80 and cm.occupancy(hw, cm.geometry("portable_128x128"), h) == 3  # 6 waves / SIMD
    h64 = cm.HOT_LOOPS[("gfx942", "portable_64x16_k8", "fp8")]
    assert cm.occupancy(hw, cm.geometry("portable_64x16_k8"), h64) == 2  # 32 KB of LDS each
    with pytest.raises(ValueError):
        cm.geometry("tile_128x128")


def test_bench_predict_prints_predicted_rows(capsys):
    from fusedgemm.bench import predict

    assert predict.run(["--arch", "gfx942", "--kind", "fp8", "--redesign"]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED, not measured" in out and "pred us" in out and "measured" not in out.replace("not measured", "")
    rows = predict.grid()
    assert len(rows) == 5 * 7 + len(predict.SQUARE)
    body = [ln for ln in out.splitlines() if ln.strip().split(" ")[0] in {s for s, *_ in rows}]
    assert len(body) == len(rows)
    summary = next(ln for ln in out.splitlines() if ln.startswith("predicted: geomean"))
    assert "of dense MFMA peak at M >= 1024" in summary and "HBM floor" in summary and "redesign" in summary
    s = predict.summary(predict.rows_for("gfx942", "fp8"))
    assert 0 < s["geomean_frac_peak_m1024"] < 1 and s["geomean_x_hbm_floor_decode"] >= 1 - 1e-9
    assert math.isfinite(s["geomean_x_hbm_floor_decode"])


def test_bench_predict_every_kind_runs(capsys):
    from fusedgemm.bench import predict

    assert predict.run(["--arch", "gfx950", "--kind", "tf32", "--kind", "int8", "--redesign"]) == 0
    out = capsys.readouterr().out
    assert "gfx950 (MI355X) tf32" in out and "gfx950 (MI355X) int8" in out


def test_bench_predict_without_a_gpu_takes_both_arches(monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    from fusedgemm.bench import __main__ as bench_main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_main.main(["predict", "--kind", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "gfx942 (MI300X) bf16" in out and "gfx950 (MI355X) bf16" in out


@pytest.mark.skipif(shutil.which("llvm-mca-19") is None, reason="llvm-mca-19 (Debian llvm-19) not installed")
def test_llvm_mca_cross_check_runs_on_the_loop():
    _amd_build_available()
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "probes" / "cdna_hot_loop.py"
    spec = importlib.util.spec_from_file_location("cdna_hot_loop", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    line = mod.mca_summary(mod.mca("gfx942", "portable_128x128", "fp8"))
    assert "cycles/iteration" in line and "XDL 64" in line, line  # 16 MFMAs x 4 passes


def test_grouped_prediction_and_plan():
    """predict_grouped: the tiles of the groups' row blocks, each non-empty group's weight once from HBM, a walk over
    the sizes per workgroup; at one token the routed experts' weights bound it (a few rows per expert stream their
    weight); more rows per expert never predict faster; the grouped plan takes the least predicted config, and the
    CLI's --moe table says PREDICTED."""
    import subprocess
    import sys

    n, k = 4096, 7168
    one = cm.predict_grouped("gfx942", "fp8", "portable_16x16_k8", (1,) * 8 + (0,) * 248, n, k)
    floor = 8 * n * k / cm.HARDWARE["gfx942"].hbm_bytes_s
    assert one.bound == "HBM" and one.seconds == pytest.approx(floor, rel=0.02)
    times = [cm.predict_grouped("gfx942", "fp8", "cdna_lds_128x128", (r,) * 256, n, k).seconds
             for r in (1, 16, 128, 512)]
    assert times == sorted(times)
    name = cdna.choose_grouped_name(32768, 256, n, k, "gfx942", "fp8")
    best = min(cdna.candidates("gfx942", "fp8"),
               key=lambda c: cm.predict_grouped("gfx942", "fp8", c, (128,) * 256, n, k).seconds)
    assert name == best
    out = subprocess.run([sys.executable, "-m", "fusedgemm.bench", "predict", "--moe", "--arch", "gfx950", "--kind",
                          "bf16"], capture_output=True, text=True, check=True).stdout
    assert "grouped GEMMs: PREDICTED, not measured" in out and "qwen3-30b-a3b" in out and "weights floor" in out


def test_bench_predict_columns_beside_a_measurement(capsys):
    """bench gemm_a8 / matmul_fused --predict: the model's time for the config the plan ran and measured / predicted,
    refused with the reason on a GPU the model is not of."""
    from fusedgemm.bench import gemm_a8 as bench_a8, matmul_fused as bench_mm
    from fusedgemm.bench.predicted_columns import predict_problem, predicted_beside

    want = cm.predict("gfx942", "fp8", "cdna_lds_128x128", 4096, 4096, 4096)
    row = predicted_beside("gfx942", "fp8", "cdna_lds_128x128", 4096, 4096, 4096, 100.0)
    assert row["pred_us"] == pytest.approx(want.seconds * 1e6) and row["pred_bound"] == want.bound
    assert row["meas_over_pred"] == pytest.approx(100.0 / (want.seconds * 1e6))
    assert predicted_beside("gfx950", "bf16", "portable_16x16_k8", 1, 4096, 4096, None)["meas_over_pred"] is None
    assert predict_problem("gfx950") is None and "of the AMD kernels" in predict_problem("sm_90a")
    for run in (bench_a8.run, bench_mm.run):
        with pytest.raises(SystemExit):
            run(["--help"])
        assert "--predict" in capsys.readouterr().out


def test_block_scaled_predictions_are_never_below_per_channel():
    """Block scales cost work (scale loads, scaled adds, registers) and bytes, never nothing: on every config with a
    block-scaled kernel and every shape, the fp8block prediction is at least the per-channel fp8 one; the MFMA work
    (and so the fraction of peak's meaning) is the fp8 kernel's; the scales' bytes are in the HBM floor."""
    for arch in ARCHES:
        for config in cdna.BLOCK_SCALED_CONFIGS:
            for m, n, k in _shapes():
                b, f = cm.predict(arch, BLOCK, config, m, n, k), cm.predict(arch, "fp8", config, m, n, k)
                assert b.seconds >= f.seconds, (arch, config, m, n, k, b.bound, f.bound)
                assert b.fraction_of_peak == pytest.approx(f.fraction_of_peak * f.seconds / b.seconds)
                assert b.seconds >= cm.hbm_floor(arch, BLOCK, m, n, k) > cm.hbm_floor(arch, "fp8", m, n, k)
    assert cm.scale_bytes(BLOCK, 100, 300, 1000) == 4 * (100 + 3) * 8 and cm.scale_bytes("fp8", 100, 300, 1000) == 0


def test_bench_predict_block_scales_beside_per_channel(capsys):
    """`bench predict --scales block`: one row per grid shape on the config the block-scaled plan takes (the
    per-channel fp8 plan: blockscale.block_plan), its per-channel prediction beside it and the ratio (>= 1), the
    summary's block / per-channel geomean; labelled PREDICTED; refused with the per-channel-only options."""
    from fusedgemm.bench import predict

    assert predict.run(["--arch", "gfx950", "--scales", "block"]) == 0
    out = capsys.readouterr().out
    assert "gfx950 (MI355X) fp8 block-scaled" in out and "PREDICTED, not measured" in out
    assert "pred block/per-channel" in out and "measured" not in out.replace("not measured", "")
    rows = predict.rows_for("gfx950", BLOCK)
    assert len(rows) == len(predict.grid())
    for r in rows:
        assert r["config"] == cdna.choose_name(r["M"], r["N"], r["K"], "gfx950", BLOCK)
        want = cm.predict("gfx950", "fp8", r["config"], r["M"], r["N"], r["K"]).seconds * 1e6
        assert r["channel_us"] == pytest.approx(want) and r["block_x_channel"] >= 1
    s = predict.summary(rows)
    assert s["geomean_block_x_channel_m1024"] >= 1 and s["geomean_block_x_channel_decode"] >= 1
    summary = next(ln for ln in out.splitlines() if ln.startswith("predicted: geomean"))
    assert "block-scaled / per-channel time geomean" in summary
    for bad in (["--scales", "block", "--moe"], ["--scales", "block", "--kind", "bf16"]):
        with pytest.raises(SystemExit):
            predict.run(bad)


def test_xcd_tile_order_constants_are_the_kernels():
    """plan/cdna_xcd_order.py's copy of cdna_workgroup_tile's order (the model's MALL term) uses the kernel's
    constants."""
    from fusedgemm.runtime.build import source_root

    text = (source_root() / "hip_src" / "include" / "fusedgemm" / "cdna_gemm.hpp").read_text()
    assert f"constexpr int kCdnaXcds = {xo.XCD_ORDER_XCDS};" in text
    assert f"constexpr int kCdnaGroupRows = {xo.XCD_ORDER_GROUP_ROWS};" in text


def test_xcd_tile_order_reads_less_from_the_mall():
    """PREDICTED: the LDS template's plain calls deal tiles per XCD, so an XCD's resident workgroups read fewer
    distinct A rows and B columns through its L2 than in launch order (grouped calls keep launch order)."""
    for arch in ARCHES:
        hw, g = cm.HARDWARE[arch], cm.geometry("cdna_lds_128x128")
        # (shape, at most this fraction of launch order's bytes): a wide N gains most (launch order's XCD sets span
        # few rows and every 8th column); a grid of fewer tiles than 8 x an XCD's resident set gains nothing
        for (m, n, k), most in (((4096, 28672, 4096), 0.6), ((8192, 4096, 14336), 0.85),
                                ((16384, 16384, 16384), 0.85), ((1024, 6144, 4096), 1.0)):
            launch = cm._fabric_bytes(hw, g, m, n, k, 2, False)
            ordered = cm._fabric_bytes(hw, g, m, n, k, 2, True)
            assert ordered <= most * launch, (arch, m, n, k, ordered, launch)
            assert ordered >= m * k + n * k  # every byte at least once


def test_xcd_tile_order_is_a_bijection_and_its_run_extents_are_counted():
    """xcd_order_tile maps the launch ids onto every tile once, on grids of any shape (more or fewer tiles than XCDs,
    partial row groups); run_extent (the MALL term's count of an XCD set's distinct rows and columns) equals the
    brute-force count."""
    import random

    rng = random.Random(7)
    for _ in range(300):
        gx, gy = rng.randint(1, 30), rng.randint(1, 30)
        tiles = [xo.xcd_order_tile(i, gx, gy) for i in range(gx * gy)]
        assert sorted(tiles) == sorted((x, y) for x in range(gx) for y in range(gy)), (gx, gy)
        t0 = rng.randrange(gx * gy)
        t1 = rng.randrange(t0, gx * gy)
        pts = [xo.group_raster(t, gx, gy) for t in range(t0, t1 + 1)]
        assert xo.run_extent(t0, t1, gx, gy) == (len({x for x, _ in pts}), len({y for _, y in pts})), (gx, gy, t0, t1)
