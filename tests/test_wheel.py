"""The wheel carries the kernel sources: an installed (non-editable) package generates and builds the gemm_a8
kernel of a non-preset epilogue just in time, for gfx942 and sm_90a, with no source checkout."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent('''\
    import json, os, sys
    import fusedgemm
    import fusedgemm.epilogue as E
    from fusedgemm.epilogue.codegen import EpilogueSpec
    from fusedgemm.runtime import compilers
    from fusedgemm.runtime.build import BuildSpec, code_object_for, source_root
    from fusedgemm.runtime.codeobject import cubin_params, hsaco_kernels
    from fusedgemm.runtime.gemm_spec import GemmKernel

    # A gemm_a8 kernel of an epilogue no preset has, generated and compiled from the installed package.
    epi = EpilogueSpec.of(E.parse("gelu(acc * n_vec(s) + aux(res)) * scalar(q)"), {"s": "f32", "res": "bf16"})
    from fusedgemm.plan import tuned
    out = {"package": fusedgemm.__file__, "sources": str(source_root()), "objects": {},
           "tuned_table": tuned.TABLE_FILE.is_file()}
    builds = [("gfx942", "portable_128x128", "clang"), ("sm_90a", "tile_128x128", "nvcc")]
    try:
        compilers.Nvrtc()
        builds.append(("sm_90a", "tile_64x128", "nvrtc"))
    except compilers.BuildError:
        pass
    for arch, config, compiler in builds:
        os.environ["FUSEDGEMM_COMPILER"] = compiler
        spec = GemmKernel(arch, config, "fp8", "fp32", epi)
        assert spec.preset is None
        path = code_object_for(BuildSpec(spec.unit, arch, spec.source()))
        data = path.read_bytes()
        kernels = cubin_params(data) if arch.startswith("sm_") else hsaco_kernels(data)
        assert spec.kernel_name in kernels, (arch, compiler, sorted(kernels))
        out["objects"][f"{arch}/{compiler}"] = str(path)
    print(json.dumps(out))
    ''')


def test_installed_wheel_builds_generated_units(tmp_path):
    # Build from a copy of the tree: setuptools writes build/ and *.egg-info beside the sources.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                             ".pytest_cache", ".venv", ".device", ".whl"))
    wheels = tmp_path / "wheels"
    # The installed setuptools builds it when it is new enough for pyproject's SPDX license (the test extra
    # asks for one); else pip's isolated build environment fetches one.
    import setuptools

    isolation = [] if int(setuptools.__version__.split(".")[0]) < 77 else ["--no-build-isolation"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", *isolation, "-q", "-w", str(wheels)],
                   cwd=src, check=True)
    (wheel,) = wheels.glob("fusedgemm-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for tree, suffix in (("hip_src", ".hip"), ("cuda_src", ".cu")):
        expected = {f"fusedgemm/_src/{tree}/{p.relative_to(ROOT / tree).as_posix()}"
                    for p in (ROOT / tree).rglob("*") if p.is_file()}
        assert expected <= names, sorted(expected - names)
        assert f"fusedgemm/_src/{tree}/portable_gemm{suffix}" in names
        assert f"fusedgemm/_src/{tree}/include/fusedgemm/platform.hpp" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata

    # A venv that sees the system's torch and compilers but gets fusedgemm from the wheel.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    if sys.prefix != sys.base_prefix:
        # The tests run inside a venv (README's install into one): the new venv sees the base interpreter's
        # packages, not this venv's torch and compilers. A .pth file adds this venv's site directories as plain
        # path entries (their own .pth files, the editable install's finder among them, are not processed).
        import sysconfig
        site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
        (Path(site) / "outer_venv.pth").write_text("".join(f"{q}\n" for q in paths))
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True)

    cache = tmp_path / "cache"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "probe.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("FUSEDGEMM_SOURCE_DIR", "PYTHONPATH", "FUSEDGEMM_PREBUILT_DIR")}
    env["FUSEDGEMM_CACHE_DIR"] = str(cache)
    proc = subprocess.run([str(py), "probe.py"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(out, indent=1))
    package = Path(out["package"]).resolve()
    assert package.is_relative_to(venv.resolve()), package  # the wheel's copy, not the checkout
    assert not package.is_relative_to(ROOT)
    assert Path(out["sources"]).resolve() == package.parent / "_src"
    assert {"gfx942/clang", "sm_90a/nvcc"} <= set(out["objects"])
    assert out["tuned_table"], "the wheel ships fusedgemm/plan/tuned_plans.json"
    for obj in out["objects"].values():
        assert Path(obj).resolve().is_relative_to(cache.resolve()) and Path(obj).is_file()
