"""python -m fusedgemm.bench moe on the CPU: routing, the baseline paths against each other and fusedgemm's grouped
ops, and the --quick harness end to end (tables, JSON, the sanity check, exit codes). No timing claim: on the CPU
the times are host times of reference code."""
import contextlib
import io
import json
import subprocess

import pytest
import torch

import fusedgemm as fg
import fusedgemm.bench.__main__ as bench_main
from fusedgemm.bench import moe

HAS_GPU = torch.cuda.is_available()
DEVICE = "cpu"


def bench(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = bench_main.main(["moe", *args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_moe_is_a_subcommand():
    assert "moe" in bench_main.SUBCOMMANDS
    r = bench("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m fusedgemm.bench moe")
    for flag in ("--models", "--tokens", "--routing", "--dtype", "--layout", "--quick", "--module", "--json"):
        assert flag in r.stdout


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
def test_route_assigns_tokens_times_topk_rows(routing):
    counts = moe.route(64, 16, 4, routing, seed=3)
    assert len(counts) == 16 and sum(counts) == 64 * 4
    assert max(counts) <= 64  # top-k experts are distinct per token
    assert counts == moe.route(64, 16, 4, routing, seed=3)  # seeded
    assert moe.route(1, 256, 8, routing) and sum(moe.route(1, 256, 8, routing)) == 8


def test_skewed_routing_concentrates_rows():
    uniform = moe.route(4096, 128, 8, "uniform")
    skewed = moe.route(4096, 128, 8, "skewed", zipf=1.2)
    assert max(skewed) > 2 * max(uniform)
    assert max(uniform) < 2 * 4096 * 8 / 128  # flat: every expert near the mean
    assert sorted(skewed)[: 64] != sorted(uniform)[: 64]
    with pytest.raises(ValueError, match="routing"):
        moe.route(4, 8, 2, "zipf")


def test_bounds_skip_empty_experts():
    assert moe.bounds([2, 0, 3, 0]) == [(0, 0, 2), (2, 2, 5)]


@pytest.mark.skipif(HAS_GPU, reason="which ops a CPU build can run")
def test_probe_reports_what_this_torch_runs_on_the_cpu():
    have = moe.probe_baselines("cpu", torch.float8_e4m3fn)
    assert set(have) == {"torch._grouped_mm", "torch._scaled_grouped_mm", "torch._scaled_mm"}
    # torch 2.13 CPU: the bf16 grouped GEMM has a CPU fallback, the fp8 grouped one is CUDA-only
    assert have["torch._grouped_mm"] == "runs here"
    assert have["torch._scaled_grouped_mm"] != "runs here"


@pytest.mark.parametrize("layout", ["offs", "masked"])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("stage", ["gate_up", "down"])
def test_paths_agree_with_each_other_and_with_fusedgemm(layout, dtype, stage):
    model = dict(hidden=64, inter=32, experts=4, topk=2)
    counts = moe.route(12, 4, 2, "skewed", seed=1)
    counts[0] = 0  # an expert with no rows
    counts[1] += 24 - sum(counts)
    W = moe.make_weights(fg, model, dtype, DEVICE)[stage]
    inp = moe.stage_inputs(fg, W, counts, layout, dtype, DEVICE)
    have = moe.probe_baselines(DEVICE, torch.float8_e4m3fn)
    paths = moe.stage_paths(fg, stage, dtype, layout, W, inp, have)
    assert paths["gm_act"] is None or stage == "gate_up"
    ref = paths["loop"]()
    n_out = W["n"] // 2 if stage == "gate_up" else W["n"]
    assert ref.shape == ((sum(counts), n_out) if layout == "offs" else (4, inp["mmax"], n_out))
    y = paths["fg"]()
    assert y.shape == ref.shape
    assert moe.rel_err(y, ref, counts, layout) < 1e-2
    other = paths["gm_act"] if stage == "gate_up" else paths["gm"]
    if other is not None:
        assert moe.rel_err(other(), ref, counts, layout) < 1e-2


@pytest.mark.parametrize("layout", ["offs", "masked"])
@pytest.mark.parametrize("stage", ["gate_up", "down"])
def test_fp8block_scales_and_the_fused_path(layout, stage):
    """fp8block: x with 1 x 128 scales, each expert's weight with 128 x 128 ones (gate_up: the gate's blocks, then
    the up's); the fused path against the block formula per expert (the loop needs torch's GPU block GEMM)."""
    from fusedgemm.reference import block_scaled_acc

    model = dict(hidden=256, inter=128, experts=4, topk=2)
    counts = [0, 10, 3, 11]
    W = moe.make_weights(fg, model, "fp8block", DEVICE)[stage]
    kb = -(-W["k"] // 128)
    assert W["sb"].shape == (4, W["n"] // 128, kb)
    inp = moe.stage_inputs(fg, W, counts, layout, "fp8block", DEVICE)
    assert inp["sa"].shape == (*inp["x8"].shape[:-1], kb)
    y = moe.stage_paths(fg, stage, "fp8block", layout, W, inp, moe.probe_baselines(DEVICE, torch.float8_e4m3fn))["fg"]()
    x8, sa = inp["x8"].reshape(-1, W["k"]), inp["sa"].reshape(-1, kb)
    want, r0 = [], 0
    for e, c in enumerate(counts):
        lo = e * inp["mmax"] if layout == "masked" else r0
        rows = slice(lo, lo + c)
        if stage == "gate_up":
            i = W["n"] // 2
            gate = block_scaled_acc(x8[rows], W["w8"][e, :i], sa[rows], W["sb"][e, :i // 128])
            up = block_scaled_acc(x8[rows], W["w8"][e, i:], sa[rows], W["sb"][e, i // 128:])
            want.append(torch.nn.functional.silu(gate) * up)
        else:
            want.append(block_scaled_acc(x8[rows], W["w8"][e], sa[rows], W["sb"][e]))
        r0 += c
    got = moe.valid_rows(y, counts, layout)
    assert moe.rel_err(got, torch.cat(want).to(got.dtype), counts, "offs") < 1e-2


def test_valid_rows_of_the_masked_layout():
    y = torch.arange(2 * 3 * 1.0).reshape(2, 3, 1)
    assert moe.valid_rows(y, [1, 2], "masked").flatten().tolist() == [0.0, 3.0, 4.0]
    flat = y[0]
    assert moe.valid_rows(flat, [1, 2], "offs") is flat


def test_table_summary_takes_medians_of_checked_rows():
    rows = [dict(check="ok", x_gm=1.0, x_gm_act=2.0, x_loop=4.0, floor_ratio=1.5),
            dict(check="ok", x_gm=3.0, x_gm_act=None, x_loop=6.0),
            dict(check="FAIL", x_gm=100.0, x_gm_act=100.0, x_loop=100.0, floor_ratio=100.0)]
    s = moe.table_summary(rows)
    assert s == {"x_gm": 2.0, "x_gm_act": 2.0, "x_loop": 5.0, "floor_ratio": 1.5}


@pytest.mark.parametrize("layout", ["offs", "masked"])
def test_quick_runs_both_dtypes_and_writes_json(tmp_path, layout):
    out = tmp_path / "moe.json"
    r = bench("--quick", "--reps", "1", "--layout", layout, "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torch baselines: torch._grouped_mm" in r.stdout and "Traceback" not in r.stderr
    assert r.stdout.count("medians:") == 2  # one table per (model, dtype)
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert len(rows) == 2 * 2 * 2  # dtypes x routings x stages
    assert {(r["dtype"], r["routing"], r["stage"]) for r in rows} == {
        (d, rt, s) for d in ("bf16", "fp8") for rt in ("uniform", "skewed") for s in ("gate_up", "down")}
    for row in rows:
        assert row["check"] == "ok" and row["rel_err"] < moe.SANITY[row["dtype"]], row
        assert row["rows"] == 16 * 2 and row["fg_us"] > 0 and row["loop_us"] > 0
        assert row["floor_us"] > 0 and row["floor_ratio"] > 0  # 16 tokens: a decode row
        if data["baselines"]["torch._grouped_mm"] == "runs here" and row["dtype"] == "bf16":
            assert row["gm_us"] > 0 and (row["stage"] == "down" or row["gm_act_us"] > 0)
        if data["baselines"]["torch._scaled_grouped_mm"] != "runs here" and row["dtype"] == "fp8":
            assert "gm_us" not in row  # skipped cleanly, not an error
    assert set(data["summary"]) == {"quick bf16", "quick fp8"}


def test_quick_flags_a_wrong_result_and_exits_1(monkeypatch):
    real = fg.grouped_matmul
    monkeypatch.setattr(fg, "grouped_matmul", lambda *a, **k: real(*a, **k) * 1.5)
    r = bench("--quick", "--reps", "1", "--dtype", "bf16", "--routing", "uniform")
    assert r.returncode == 1
    assert "FAIL" in r.stdout and "1 row(s) FAIL or ERROR" in r.stdout


def test_quick_reports_an_op_that_raises_as_error(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(fg, "grouped_swiglu", broken)
    r = bench("--quick", "--reps", "1", "--dtype", "bf16", "--routing", "uniform")
    assert r.returncode == 1 and "ERROR RuntimeError: no kernel" in r.stderr


@pytest.mark.skipif(HAS_GPU, reason="checks the message on a machine without a GPU")
def test_without_a_gpu_and_without_quick_prints_one_line():
    r = bench("--models", "mixtral-8x7b")
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusedgemm.bench moe: needs a CUDA or ROCm GPU")


# ---- --module: transformers blocks against fg.nn.FusedMoE ------------------------------------------------------

def test_module_models_are_the_grouped_rows_sizes():
    from fusedgemm.bench import moe_module

    assert set(moe_module.MODULE_MODELS) | set(moe_module.SKIPPED) == set(moe.MODELS)
    for name, (kind, sizes) in moe_module.MODULE_MODELS.items():
        assert sizes == moe.MODELS[name] and kind in ("qwen3", "mixtral", "deepseek")


def test_module_block_is_random_seeded_bf16_with_the_config():
    pytest.importorskip("transformers")
    from fusedgemm.bench import moe_module

    sizes = dict(hidden=64, inter=32, experts=8, topk=2)
    b = moe_module.build_block("qwen3", sizes, DEVICE, seed=3)
    assert type(b).__name__ == "Qwen3MoeSparseMoeBlock" and b.gate.norm_topk_prob and not b.training
    assert b.experts.gate_up_proj.shape == (8, 64, 64) and b.experts.down_proj.shape == (8, 64, 32)
    assert all(p.dtype == torch.bfloat16 and p.abs().sum() > 0 for p in b.parameters())  # no zero router
    assert torch.equal(b.gate.weight, moe_module.build_block("qwen3", sizes, DEVICE, seed=3).gate.weight)
    m = moe_module.build_block("mixtral", sizes, DEVICE)
    assert type(m).__name__ == "MixtralSparseMoeBlock" and m.gate.top_k == 2


def test_quick_module_prints_the_block_table(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "moe.json"
    r = bench("--quick", "--module", "--reps", "1", "--dtype", "bf16", "--routing", "uniform", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    head = "experts  tokens   path  block eager us  FusedMoE us  speedup  rel diff  check"
    assert head in r.stdout and "FusedMoE.from_module(block, dtype=experts)" in r.stdout
    rows = json.loads(out.read_text())["module_rows"]
    assert [r["model"] for r in rows] == ["quick-qwen3", "quick-mixtral"]
    for row in rows:
        assert row["check"] == "ok" and row["rel_diff"] < 5e-2 and row["tokens"] == 16, row
        assert row["block_us"] > 0 and row["fused_us"] > 0 and row["speedup"] > 0
        assert row["path"] == ("fused" if HAS_GPU else "block")
    if not HAS_GPU:
        assert 0 < rows[0]["rel_diff"]  # the fused reference, not the block compared with itself


def test_quick_module_flags_a_wrong_fused_output_and_exits_1(monkeypatch):
    pytest.importorskip("transformers")
    from fusedgemm.nn import FusedMoE

    real = FusedMoE._fused_forward
    monkeypatch.setattr(FusedMoE, "_fused_forward", lambda self, x: real(self, x) * 1.5)
    r = bench("--quick", "--module", "--reps", "1", "--dtype", "bf16", "--routing", "uniform")
    assert r.returncode == 1
    assert "FAIL" in r.stdout and "2 row(s) FAIL or ERROR" in r.stdout
    assert "module quick-qwen3 tokens 16: FAIL" in r.stderr


def test_module_rows_measure_every_model(monkeypatch, capsys):
    """--module measures DeepSeek-V3's block (its own grouped top-k router, a shared expert) beside the others."""
    pytest.importorskip("transformers")
    import argparse

    from fusedgemm.bench import moe_module

    tiny = dict(hidden=64, inter=32, experts=8, topk=2)
    monkeypatch.setattr(moe_module, "MODULE_MODELS", {"deepseek-v3": ("deepseek", tiny), "qwen3-30b-a3b": ("qwen3", tiny),
                                                      "mixtral-8x7b": ("mixtral", tiny)})
    args = argparse.Namespace(models=["deepseek-v3", "mixtral-8x7b"], seed=0)
    rows, failed = moe_module.run_module_rows(args, DEVICE, 1, [1, 4], quick=False)
    assert not failed and [(r["model"], r["tokens"]) for r in rows] == [("deepseek-v3", 1), ("deepseek-v3", 4),
                                                                        ("mixtral-8x7b", 1), ("mixtral-8x7b", 4)]
    assert "skipped" not in capsys.readouterr().out

def test_config_pins_a_grouped_config_and_refuses_others():
    r = bench("--quick", "--config", "tile_64x128", "--dtype", "bf16", "--routing", "uniform")
    assert r.returncode == 0, r.stderr
    assert "fg config pinned: tile_64x128" in r.stdout
    for bad in ("swap_16x128", "no_such_config"):
        r = bench("--quick", "--config", bad)
        assert r.returncode == 2 and "not a config with grouped kernels" in r.stderr


def test_a_pinned_config_reaches_the_grouped_plan(monkeypatch):
    seen = []
    real = moe.forced_config

    def spy(name, splits=1):
        seen.append(name)
        return real(name, splits)

    monkeypatch.setattr(moe, "forced_config", spy)
    paths = moe.stage_paths(fg, "down", "bf16", "offs", *_tiny_stage(), {}, config="tile_128x128")
    paths["fg"]()
    assert seen == ["tile_128x128"]


def _tiny_stage():
    w = {"w": torch.randn(2, 32, 16, dtype=torch.bfloat16), "n": 32, "k": 16}
    counts = [3, 5]
    inp = {"x": torch.randn(8, 16, dtype=torch.bfloat16), "offs": torch.tensor([3, 8], dtype=torch.int32),
           "counts": counts, "m": 8}
    return w, inp
