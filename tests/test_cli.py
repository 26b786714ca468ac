"""python -m fusedgemm.bench: help, exit codes, and one clear line where a bench cannot run (subprocess)."""
import subprocess
import sys

import pytest
import torch

import fusedgemm.bench.__main__ as bench_main

HAS_GPU = torch.cuda.is_available()


def bench(*args):
    return subprocess.run([sys.executable, "-m", "fusedgemm.bench", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args", [(), ("--help",), ("-h",)])
def test_help_lists_every_subcommand(args):
    r = bench(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: python -m fusedgemm.bench {gemm_a8,bmm_tiny}")
    for name, what in bench_main.SUBCOMMANDS.items():
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith(name + " "))
        assert what in line and len(what) > 40  # a line on what it measures
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [("gemm_b16",), ("--gemm_a8",), ("nope", "--help")])
def test_unknown_subcommand_exits_2_with_the_list(args):
    r = bench(*args)
    assert r.returncode == 2
    assert f"unknown subcommand {args[0]!r}" in r.stderr
    assert "gemm_a8" in r.stderr and "bmm_tiny" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("sub", ["gemm_a8", "bmm_tiny"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_subcommand_help_works_without_a_gpu(sub, flag):
    r = bench(sub, flag)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: python -m fusedgemm.bench {sub}") and "--json" in r.stdout


def test_bad_option_is_argparse_exit_2():
    r = bench("gemm_a8", "--dtype", "fp16")
    assert r.returncode == 2 and "invalid choice: 'fp16'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(HAS_GPU, reason="checks the message on a machine without a GPU")
@pytest.mark.parametrize("args", [("gemm_a8",), ("bmm_tiny",), ("gemm_a8", "--dtype", "int8", "--M", "16")])
def test_bench_without_a_gpu_prints_one_line(args):
    r = bench(*args)
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"fusedgemm.bench {args[0]}: needs a CUDA or ROCm GPU; torch sees none")


@pytest.mark.parametrize("sub", ["gemm_a8", "bmm_tiny"])
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
