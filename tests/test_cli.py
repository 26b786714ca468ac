"""python -m fusedgemm.bench: help, exit codes, and one clear line where a bench cannot run. The cases run main()
in process (a subprocess costs seconds of torch import each); test_the_program_* run the real `python -m`."""
import contextlib
import io
import subprocess
import sys

import pytest
import torch

import fusedgemm.bench.__main__ as bench_main

HAS_GPU = torch.cuda.is_available()


def bench(*args):
    """main(args) in this process with stdout / stderr captured -> a CompletedProcess (SystemExit's code counts; an
    exception propagates and fails the test, as a traceback would)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = bench_main.main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def program(*args):
    return subprocess.run([sys.executable, "-m", "fusedgemm.bench", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_program_prints_help_and_exits_0():
    r = program("--help")
    assert r.returncode == 0 and r.stdout == bench("--help").stdout and r.stderr == ""


@pytest.mark.skipif(HAS_GPU, reason="checks the message on a machine without a GPU")
def test_the_program_without_a_gpu_prints_one_line_and_exits_1():
    r = program("bmm_tiny")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [bench("bmm_tiny").stderr.strip()]


@pytest.mark.parametrize("args", [(), ("--help",), ("-h",)])
def test_help_lists_every_subcommand(args):
    r = bench(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: python -m fusedgemm.bench {" + ",".join(bench_main.SUBCOMMANDS) + "}")
    for name, what in bench_main.SUBCOMMANDS.items():
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith(name + " "))
        assert what in line and len(what) > 40  # a line on what it measures
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [("gemm_b16",), ("--gemm_a8",), ("nope", "--help")])
def test_unknown_subcommand_exits_2_with_the_list(args):
    r = bench(*args)
    assert r.returncode == 2
    assert f"unknown subcommand {args[0]!r}" in r.stderr
    assert all(name in r.stderr for name in bench_main.SUBCOMMANDS) and "Traceback" not in r.stderr


@pytest.mark.parametrize("sub", ["gemm_a8", "bmm_tiny", "matmul_fused"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_subcommand_help_works_without_a_gpu(sub, flag):
    r = bench(sub, flag)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: python -m fusedgemm.bench {sub}") and "--json" in r.stdout


@pytest.mark.parametrize("args, bad", [(("gemm_a8", "--dtype", "fp16"), "fp16"),
                                       (("matmul_fused", "--activation", "swish"), "swish"),
                                       (("matmul_fused", "--dtype", "fp8"), "fp8")])
def test_bad_option_is_argparse_exit_2(args, bad):
    r = bench(*args)
    assert r.returncode == 2 and f"invalid choice: '{bad}'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(HAS_GPU, reason="checks the message on a machine without a GPU")
@pytest.mark.parametrize("args", [("gemm_a8",), ("bmm_tiny",), ("gemm_a8", "--dtype", "int8", "--M", "16"),
                                  ("matmul_fused",), ("matmul_fused", "--dtype", "tf32", "--square", "--beta"),
                                  ("models",), ("quantize_rows",), ("train_step",), ("fp32_exact",), ("fusion_mlp",),
                                  ("host_overhead", "--op", "bmm_tiny"), ("matmul_plans",)])
def test_bench_without_a_gpu_prints_one_line(args):
    r = bench(*args)
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"fusedgemm.bench {args[0]}: needs a CUDA or ROCm GPU; torch sees none")


@pytest.mark.parametrize("sub", list(bench_main.SUBCOMMANDS))
def test_bench_on_a_gpu_without_a_code_object_prints_one_line(sub, monkeypatch, capsys):
    """A GPU torch sees but fusedgemm has no code object for: the arch error as one line, exit 1 (in process,
    with the GPU faked)."""
    from fusedgemm.runtime import arch

    def no_code_object(index):
        raise arch.UnsupportedArchError("fusedgemm has no code object for Fake GPU (arch sm_75); supported "
                                        "arches: sm_90a, gfx942, gfx950")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(arch, "device_arch", no_code_object)
    assert bench_main.main([sub]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == (f"fusedgemm.bench {sub}: fusedgemm has no code object for Fake GPU (arch sm_75); "
                                 "supported arches: sm_90a, gfx942, gfx950\n")


def test_matmul_fused_bench_pieces():
    """The parts of bench/matmul_fused.py that need no GPU: peaks by GPU name, the checked expression, the row
    sample, tolerances, band summaries and the targets' verdicts."""
    import math

    from fusedgemm.bench import matmul_fused as mf

    assert mf.peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert mf.peak_tflops("NVIDIA H100 80GB HBM3", "tf32") == 494.0
    assert mf.peak_tflops("NVIDIA H100 PCIe", "fp16") == 756.0  # not the SXM number
    assert mf.peak_tflops("NVIDIA H200", "bf16") == 989.0 and mf.peak_tflops("Some GPU", "bf16") is None
    assert str(mf.reference_expr("silu", None)) == "silu(acc + n_vec(bias))"
    assert str(mf.reference_expr("none", 0.5)) == "acc + aux(c) * 0.5 + n_vec(bias)"
    idx = mf.check_rows(1000).tolist()
    assert idx[0] == 0 and idx[-1] == 999 and len(idx) == mf.CHECK_ROWS and mf.check_rows(3).tolist() == [0, 1, 2]
    assert mf.within(1e-3, mf.TOLERANCE["bf16"]) and not mf.within(float("nan"), 1.0)
    assert mf.TOLERANCE["tf32"] < mf.TOLERANCE["bf16"]

    def row(m, fg_us, a_us, b_us, floor_us):
        r = dict(M=m, fg_us=fg_us, x_a=a_us / fg_us, x_b=b_us / fg_us, tflops=800.0, floor_ratio=fg_us / floor_us)
        return r | {f"x_{p}": None for p in "cdef"}

    summary = mf.summarize([row(16, 10.0, 11.0, 13.0, 9.0), row(16, 10.0, 9.0, 12.0, 9.0),
                            row(8192, 100.0, 100.0, 120.0, 90.0)])
    assert set(summary) == {"M<=64", "M>=4096"} and summary["M<=64"]["rows"] == 2
    assert math.isclose(summary["M<=64"]["x_a"], math.sqrt(1.1 * 0.9)) and summary["M<=64"]["x_c"] is None
    verdicts = {(t["target"][:20], t["band"]): t["status"] for t in mf.evaluate_targets(summary, "bf16")}
    assert verdicts[("ours >= 1.00x torch.", "M<=64")] == "missed"  # geomean 0.995
    assert verdicts[("ours >= 1.00x torch.", "M>=4096")] == "met"
    assert verdicts[("ours >= 1.15x F.line", "M<=64")] == "met"
    assert verdicts[("ours >= 1.15x F.line", "M=256..1024")] == "n/a"  # no row in the band
    assert verdicts[("ours >= 780 TFLOP/s ", "M>=4096")] == "met"
    assert verdicts[("ours <= 1.25x floor ", "M<=64")] == "met"
    tf32 = {t["target"][:20]: t["status"] for t in mf.evaluate_targets(summary, "tf32")}
    assert tf32["ours >= 780 TFLOP/s "] == "n/a"  # a bf16 target


def test_bench_spin_ignores_the_first_call_and_is_bounded():
    """The spin kernel before each timed rep is sized from the warm calls' enqueue time: a first call that builds a
    code object (or compiles a baseline) for seconds must not make every rep's spin that long (the cold-bench
    stall: 420 s at a fresh machine's first row)."""
    import time

    from fusedgemm.bench import common

    calls = []

    def fn():
        calls.append(None)
        if len(calls) == 1:
            time.sleep(0.3)  # the "build"

    host = common.warm_host_us(fn, 5)
    assert len(calls) == 6
    assert host < 50_000, host  # microseconds: the 0.3 s first call is not counted
    assert common.spin_cycles_for(host) < common.spin_cycles_for(300_000)
    assert common.spin_cycles_for(10.0) == int(40 * 2000)
    assert common.spin_cycles_for(60e6) == common.MAX_SPIN_US * 2000  # bounded whatever the host did


# ---- every subcommand: options with help text, one spelling of each dtype ----

def parsed(*args):
    """(parser, namespace) of `python -m fusedgemm.bench ARGS` without running the bench: parse_args is
    intercepted after it parsed."""
    import argparse

    seen = {}
    real = argparse.ArgumentParser.parse_args

    def intercept(self, *a, **k):
        seen["parser"], seen["args"] = self, real(self, *a, **k)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = intercept
    try:
        r = bench(*args)
    finally:
        argparse.ArgumentParser.parse_args = real
    assert r.returncode == 0 and "parser" in seen, r.stderr
    return seen["parser"], seen["args"]


@pytest.mark.parametrize("sub", list(bench_main.SUBCOMMANDS))
def test_every_option_has_help_text(sub):
    parser, _ = parsed(sub)
    assert parser.prog == f"python -m fusedgemm.bench {sub}"
    missing = [a.option_strings for a in parser._actions if a.option_strings and not a.help]
    assert not missing, f"{sub}: options without help text: {missing}"


@pytest.mark.parametrize("sub", list(bench_main.SUBCOMMANDS))
def test_every_subcommand_has_help_and_exits_0(sub):
    r = bench(sub, "--help")
    assert r.returncode == 0 and r.stdout.startswith(f"usage: python -m fusedgemm.bench {sub}"), r.stderr


@pytest.mark.parametrize("sub, flag, spellings, short", [
    ("matmul_fused", "--dtype", ["bf16", "bfloat16", "BFloat16", "torch.bfloat16"], "bf16"),
    ("matmul_fused", "--dtype", ["fp16", "f16", "float16", "half"], "fp16"),
    ("matmul_fused", "--dtype", ["tf32"], "tf32"),
    ("bmm_tiny", "--dtype", ["fp32", "f32", "float32", "float"], "fp32"),
    ("bmm_tiny", "--dtype", ["bfloat16", "bf16"], "bf16"),
    ("gemm_a8", "--dtype", ["fp8", "float8_e4m3fn", "float8_e4m3fnuz", "e4m3"], "fp8"),
    ("gemm_a8", "--dtype", ["int8", "i8"], "int8"),
    ("gemm_a8", "--out-dtype", ["bfloat16", "bf16"], "bf16"),
    ("gemm_a8", "--out-dtype", ["float16", "fp16", "f16"], "fp16"),
    ("quantize_rows", "--dtype", ["float32", "fp32"], "fp32"),
    ("quantize_rows", "--code", ["int8"], "int8"),
    ("train_step", "--dtype", ["float16", "fp16"], "fp16"),
    ("matmul_plans", "--dtype", ["bfloat16", "bf16"], "bf16"),
])
def test_dtype_takes_torch_and_short_names_and_stores_the_short_one(sub, flag, spellings, short):
    for s in spellings:
        _, args = parsed(sub, flag, s)
        assert getattr(args, flag.lstrip("-").replace("-", "_")) == short, (sub, flag, s)


@pytest.mark.parametrize("sub, flag", [("matmul_fused", "--dtype"), ("bmm_tiny", "--dtype"), ("gemm_a8", "--dtype"),
                                       ("gemm_a8", "--out-dtype"), ("quantize_rows", "--code")])
def test_dtype_default_is_a_short_name(sub, flag):
    from fusedgemm.bench.cli import SPELLINGS

    _, args = parsed(sub)
    assert getattr(args, flag.lstrip("-").replace("-", "_")) in SPELLINGS


@pytest.mark.parametrize("args, bad", [(("bmm_tiny", "--dtype", "int8"), "int8"),
                                       (("gemm_a8", "--out-dtype", "float32"), "float32"),
                                       (("quantize_rows", "--dtype", "bfloat17"), "bfloat17")])
def test_a_dtype_outside_the_subcommands_choices_is_refused_with_them(args, bad):
    r = bench(*args)
    assert r.returncode == 2 and f"invalid choice: '{bad}'" in r.stderr and "Traceback" not in r.stderr
    assert "choose from" in r.stderr


def test_dtype_helper():
    from fusedgemm.bench.cli import dtype_name, torch_dtype

    assert dtype_name("bfloat16") == dtype_name("BF16") == "bf16"
    assert dtype_name("torch.float16") == dtype_name("half") == "fp16"
    assert torch_dtype("bf16") is torch.bfloat16 and torch_dtype("tf32") is torch.float32
    with pytest.raises(ValueError, match="unknown dtype 'f64'"):
        dtype_name("f64")
