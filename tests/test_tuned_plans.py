"""The tuned-plan table (fusedgemm/plan/tuned.py): measured exceptions to the heuristic per GPU, kind, N, K and M
bucket; plan_for takes them before the heuristic, only on the GPU they were measured on; bench --tune writes them."""
import json

import pytest

import fusedgemm.plan as plan_mod
from fusedgemm.bench.gemm_a8 import tune_entries
from fusedgemm.plan import choose_config, forced_config, plans, tuned
from fusedgemm.runtime import kernels

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("m, bucket", [(0, 1), (1, 1), (2, 2), (3, 4), (1024, 1024), (1025, 2048), (8192, 8192)])
def test_m_bucket_is_the_next_power_of_two(m, bucket):
    assert tuned.m_bucket(m) == bucket


def test_the_shipped_table_holds_plans_the_gpu_tests_run():
    """Every shipped entry is a plan the GPU tests run, in a bucket of its own, measured faster than the heuristic's
    plan of its day. (The table may be empty: entries go when the heuristic learns them.)"""
    entries = tuned.read(tuned.TABLE_FILE)
    keys = [(e["gpu"], e["kind"], e["N"], e["K"], e["M_bucket"]) for e in entries]
    assert len(set(keys)) == len(keys)
    for e in entries:
        name, splits = e["plan"].split(":")
        assert (name, int(splits)) in plans("sm_90a", e["kind"]), e
        assert e["M_bucket"] == tuned.m_bucket(e["M_bucket"]), e
        assert min(e["us"] if isinstance(e["us"], list) else [e["us"]]) < min(
            e["heuristic_us"] if isinstance(e["heuristic_us"], list) else [e["heuristic_us"]]), e


# A table of one entry (fp8, o_proj N = K = 4096, M bucket 4096 on the H100): tile_128x192 where the heuristic takes
# persistent_128x128.
O_PROJ = (4096, 4096, 4096)
TABLE = {(H100, "fp8", 4096, 4096, 4096): ("tile_128x192", 1)}


@pytest.fixture
def h100(monkeypatch):
    """plan_for on a fake sm_90a device 0 named like the H100 of TABLE, which stands for the shipped table."""
    monkeypatch.setattr(plan_mod, "device_arch", lambda index: "sm_90a")
    monkeypatch.setattr(plan_mod, "_SM_COUNT", {0: 132})
    names = {0: H100}
    monkeypatch.setattr(plan_mod, "_GPU_NAME", names)
    monkeypatch.setattr(tuned, "_TABLE", dict(TABLE))
    monkeypatch.delenv("FUSEDGEMM_TUNED", raising=False)
    return names


def test_plan_for_takes_the_tuned_plan_on_its_gpu_only(h100, monkeypatch):
    heuristic = choose_config(*O_PROJ, "sm_90a", 132, True, "fp8")
    assert (heuristic[0].name, heuristic[1]) == ("persistent_128x128", 1)
    got = plan_mod.plan_for(*O_PROJ, 0)
    assert (got[0].name, got[1]) == ("tile_128x192", 1)
    assert plan_mod.plan_for(3000, 4096, 4096, 0)[0].name == "tile_128x192"  # same bucket (2048, 4096]
    assert plan_mod.plan_for(2048, 4096, 4096, 0) == choose_config(2048, 4096, 4096, "sm_90a", 132, True, "fp8")
    assert plan_mod.plan_for(*O_PROJ, 0, in_kind="int8") == choose_config(*O_PROJ, "sm_90a", 132, True, "int8")
    with forced_config("tile_128x128", 1):
        assert plan_mod.plan_for(*O_PROJ, 0) == (kernels.GEMM_CONFIGS["tile_128x128"], 1)
    monkeypatch.setenv("FUSEDGEMM_TUNED", "0")
    assert plan_mod.plan_for(*O_PROJ, 0) == heuristic
    monkeypatch.delenv("FUSEDGEMM_TUNED")
    h100[0] = "NVIDIA H200"
    assert plan_mod.plan_for(*O_PROJ, 0) == heuristic


def test_a_tuned_persistent_plan_needs_the_epilogue_to_fit_its_staging(h100, monkeypatch):
    """The tuned plan is persistent but the epilogue does not fit the persistent staging: the heuristic's plan."""
    monkeypatch.setattr(tuned, "_TABLE", {(H100, "fp8", 4096, 4096, 4096): ("persistent_128x128_epi7_1chain", 1)})
    assert plan_mod.plan_for(*O_PROJ, 0)[0].name == "persistent_128x128_epi7_1chain"
    assert plan_mod.plan_for(*O_PROJ, 0, persistent_ok=False) == choose_config(*O_PROJ, "sm_90a", 132, False, "fp8")


def test_print_configs_says_what_decided(h100, monkeypatch, capsys):
    monkeypatch.setattr(plan_mod, "_PRINT_CONFIGS", True)
    plan_mod.plan_for(*O_PROJ, 0)
    plan_mod.plan_for(4096, 6144, 4096, 0)
    out = capsys.readouterr().out
    assert f"-> tile_128x192 split-K 1 (tuned: {H100})" in out and "(heuristic)" in out


def test_merge_replaces_same_keys_and_sorts(tmp_path):
    path = tmp_path / "t.json"
    e = dict(gpu="G", kind="fp8", N=64, K=128, M_bucket=1024, plan="tile_128x192:1", us=1.0, heuristic="tile_192x128:1",
             heuristic_us=2.0)
    assert tuned.merge(path, [e, dict(e, N=32)]) == 2
    assert tuned.merge(path, [dict(e, plan="persistent_128x128:1")]) == 2
    rows = json.loads(path.read_text())["entries"]
    assert [r["N"] for r in rows] == [32, 64] and rows[1]["plan"] == "persistent_128x128:1"


def test_tune_entries_keep_only_clear_wins():
    base = dict(shape="s", N=4096, K=14336, heuristic="tile_192x128:1")
    rows = [dict(base, M=4096, plans_us={"tile_192x128:1": 100.0, "persistent_128x128:1": 97.0}),    # 3% faster: kept
            dict(base, M=8192, plans_us={"tile_192x128:1": 100.0, "tile_128x192:1": 99.0}),    # 1%: not
            dict(base, M=1024, plans_us={"persistent_128x128:1": 50.0})]                         # heuristic not timed
    (e,) = tune_entries(rows, "G", "fp8")
    assert (e["plan"], e["M_bucket"], e["heuristic"], e["us"], e["heuristic_us"]) == (
        "persistent_128x128:1", 4096, "tile_192x128:1", 97.0, 100.0)


def test_tune_times_the_plans_that_can_win_at_each_m():
    """--compare-plans / --tune with no list: every sm_90a wgmma plan, but not the decode tiles above M = 128
    nor the mma.sync config (bench/gemm_a8.py candidate_plans); listed plans are taken as given."""
    from fusedgemm.bench.gemm_a8 import candidate_plans

    every = [f"{c}:{s}" for c, s in plans("sm_90a")]
    small, large = candidate_plans("sm_90a", 64), candidate_plans("sm_90a", 8192)
    assert "swap_16x128:4" in small and "tile_64x128:1" in small and "persistent_128x128:1" in small and "persistent_128x128_epi7_1chain:1" in small
    assert not any(p.startswith(("swap_16x128", "tile_64x128", "portable_128x128")) for p in large)
    assert set(large) < set(small) <= set(every) and "portable_128x128:1" in every and "portable_128x128:1" not in small
    assert "tile_128x128:4" in small and "tile_128x128:2" in candidate_plans("sm_90a", 1024)
    assert "tile_128x128:4" not in candidate_plans("sm_90a", 1024) and not any(p.endswith(":2") for p in large)
    assert candidate_plans("gfx942", 8192) == [f"{c}:{s}" for c, s in plans("gfx942")]
    # the heuristic's own plan is timed even where the rules skip it (fp8 few tiles: tile_64x128 above M = 128)
    assert "tile_64x128:4" not in candidate_plans("sm_90a", 256)
    assert "tile_64x128:4" in candidate_plans("sm_90a", 256, keep=("tile_64x128:4",))


def test_with_plan_pins_the_plan_for_each_call_only():
    """with_plan(fn, name, splits): every call of the wrapper runs fn under forced_config, and nothing stays pinned."""
    from fusedgemm.plan import forced, with_plan

    pinned = with_plan(lambda x: (forced(), x), "tile_128x128", 2)
    assert forced() is None
    assert pinned(7) == (("tile_128x128", 2), 7) and pinned(8) == (("tile_128x128", 2), 8)
    assert forced() is None
    with pytest.raises(ValueError, match="unknown gemm_a8 config"):
        with_plan(lambda: None, "m1n1")()


def _entry(plan, us, heuristic="tile_64x128:4", heuristic_us=14.5, m_bucket=64):
    return dict(gpu=H100, kind="fp8", N=7168, K=2048, M_bucket=m_bucket, plan=plan, us=us, heuristic=heuristic,
                heuristic_us=heuristic_us)


def test_agreed_keeps_only_what_won_in_both_runs():
    """Two --tune runs: an entry ships when both found the same plan over the same heuristic plan; its times become
    pairs. A row that won once, or with another plan, is dropped."""
    first = [_entry("persistent_128x128_epi7_1chain:1", 12.9), _entry("persistent_128x128:1", 13.0, m_bucket=256), _entry("swap_16x128:1", 14.0,
                                                                                          m_bucket=16)]
    second = [_entry("persistent_128x128_epi7_1chain:1", 13.4, heuristic_us=14.7), _entry("persistent_128x128_epi7_1chain:1", 13.1, m_bucket=256)]
    got = tuned.agreed(first, second)
    assert got == [dict(_entry("persistent_128x128_epi7_1chain:1", [12.9, 13.4], heuristic_us=[14.5, 14.7]))]


def test_merge_tuned_cli_writes_the_agreed_entries(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    runs = []
    for i, us in enumerate((12.9, 13.4)):
        runs.append(tmp_path / f"run{i}.json")
        tuned.merge(runs[-1], [_entry("persistent_128x128_epi7_1chain:1", us)])
    table = tmp_path / "table.json"
    script = Path(__file__).resolve().parent.parent / "scripts" / "gpu" / "merge_tuned.py"
    out = subprocess.run([sys.executable, str(script), *map(str, runs), "--into", str(table)], check=True,
                         capture_output=True, text=True).stdout
    assert "1 entries agreed" in out
    assert tuned.read(table) == [_entry("persistent_128x128_epi7_1chain:1", [12.9, 13.4], heuristic_us=[14.5, 14.5])]
    bad = subprocess.run([sys.executable, str(script), str(runs[0])], capture_output=True, text=True)
    assert bad.returncode != 0 and "pairs" in bad.stderr


def test_a_forced_config_of_another_arch_family_is_refused_by_name():
    """cdna_lds_128x128 exists only for gfx942 / gfx950: pinning it on sm_90a is a clear error, not a compile error."""
    import pytest as _pytest

    from fusedgemm.plan import choose_config, forced_config

    with forced_config("cdna_lds_128x128"):
        with _pytest.raises(ValueError, match="built only for gfx942, gfx950, not sm_90a"):
            choose_config(256, 256, 256, arch="sm_90a")
        cfg, _ = choose_config(256, 256, 256, arch="gfx942")
        assert cfg.name == "cdna_lds_128x128"
    with forced_config("persistent_128x128"):
        with _pytest.raises(ValueError, match="not gfx950"):
            choose_config(256, 256, 256, arch="gfx950")
