"""The code-object cache: keys, generated translation units, crash safety, concurrency, warm loads, failures.

Most tests run a fake nvcc (a shell script: `--version`, else sleep, count the compile, write a fake cubin)
so they take seconds; the tests marked slow compile a small generated TU with the real nvcc, NVRTC and
clang and look for its kernel in the code object."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from fusedgemm.runtime import build, compilers
from fusedgemm.runtime.build import BuildError, BuildSpec, cached_code_object_for, code_object_dir, code_object_for

ROOT = Path(__file__).resolve().parents[1]
PKG_DIR = Path(build.__file__).resolve().parents[1]  # .../fusedgemm

# A generated translation unit in the HIP flavour of hip_src: it includes a package header, and the
# hipStream_t in a comment shows the hipify rename on NVIDIA.
SOURCE = textwrap.dedent("""\
    // generated for a test (hipStream_t)
    #include "include/fusedgemm/platform.hpp"
    extern "C" __global__ void fg_jit_probe_twice(float* __restrict__ y, const float* __restrict__ x, int n) {
      const int i = static_cast<int>(blockIdx.x) * 256 + static_cast<int>(threadIdx.x);
      if (i < n) y[i] = fg::bits_to_float(fg::float_to_bits(x[i])) * 2.f;
    }
    """)
BAD_SOURCE = SOURCE.replace("* 2.f;", "* 2.f  // missing semicolon\n")

FAKE_NVCC = r"""#!/bin/sh
# Stand-in for nvcc: --version; else note the start, sleep $FAKE_SLEEP, fail if $FAKE_FAIL, count, write -o.
if [ "$1" = "--version" ]; then echo "fake nvcc: Cuda compilation tools, release 0.0, V0.0.1"; exit 0; fi
out=
while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then out=$2; fi; shift; done
echo "$$" >> "$FAKE_DIR/started"
sleep "${FAKE_SLEEP:-0}"
if [ -n "$FAKE_FAIL" ]; then echo "fake.cu(4): error: $FAKE_FAIL"; exit 2; fi
echo "$$" >> "$FAKE_DIR/count"
printf '\177ELF fake cubin' > "$out"
"""

# Imports fusedgemm.runtime without the package __init__ (which imports torch): keeps the many short-lived
# helper processes below fast. The warm-load test imports the real package instead.
STUB_IMPORT = f"""\
import sys, types
_pkg = types.ModuleType("fusedgemm")
_pkg.__path__ = [{str(PKG_DIR)!r}]
sys.modules["fusedgemm"] = _pkg
"""


class Fake:
    def __init__(self, tmp_path: Path):
        self.dir = tmp_path / "fake"
        self.dir.mkdir()
        self.nvcc = self.dir / "nvcc"
        self.nvcc.write_text(FAKE_NVCC)
        self.nvcc.chmod(0o755)
        self.cache = tmp_path / "cache"

    def lines(self, name: str) -> list[str]:
        p = self.dir / name
        return p.read_text().split() if p.exists() else []


@pytest.fixture
def fake(tmp_path, monkeypatch):
    f = Fake(tmp_path)
    monkeypatch.setenv("FUSEDGEMM_CACHE_DIR", str(f.cache))
    monkeypatch.setenv("FUSEDGEMM_NVCC", str(f.nvcc))
    monkeypatch.setenv("FUSEDGEMM_COMPILER", "nvcc")
    monkeypatch.setenv("FAKE_DIR", str(f.dir))
    for var in ("FAKE_SLEEP", "FAKE_FAIL", "FUSEDGEMM_JIT_VERBOSE", "FUSEDGEMM_PREBUILT_DIR"):
        monkeypatch.delenv(var, raising=False)
    compilers._VERSION_MEMO.clear()
    return f


def spec(unit="fake_tu", source=SOURCE, arch="sm_90a"):
    return BuildSpec(unit, arch, source)


def run_script(code: str, env_extra=None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, **kw)


BUILD_SCRIPT = STUB_IMPORT + f"""
from fusedgemm.runtime.build import BuildSpec, code_object_for
print(code_object_for(BuildSpec("fake_tu", "sm_90a", {SOURCE!r})))
"""


# ---- the spec --------------------------------------------------------------------------------------------------
def test_generated_spec_validation():
    s = spec()
    assert s.generated and "source" not in repr(s) and s.source_file_name == "fake_tu.cu"
    assert spec(arch="gfx942").source_file_name == "fake_tu.hip"
    for bad in ("", "a/b", "../x", "a b", "-x", "a.b", "x" * 101, "é"):
        with pytest.raises(ValueError, match="generated unit name"):
            BuildSpec(bad, "sm_90a", SOURCE)
    with pytest.raises(TypeError):
        BuildSpec("ok", "sm_90a", SOURCE.encode())
    with pytest.raises(ValueError, match="unknown arch"):
        BuildSpec("ok", "sm_80", SOURCE)
    # Fixed units keep their rules.
    with pytest.raises(ValueError, match="unknown source unit"):
        BuildSpec("fake_tu", "sm_90a")
    with pytest.raises(ValueError, match="built only for"):
        BuildSpec("sm90_gemm", "gfx942")
    assert BuildSpec("portable_gemm", "gfx942").main_source.name == "portable_gemm.hip"


def test_generated_source_is_hipified_for_nvidia_only():
    assert "cudaStream_t" in spec().translation_unit() and "hipStream_t" not in spec().translation_unit()
    assert spec(arch="gfx942").translation_unit() == SOURCE


def test_ci_hipify_uses_the_package_rename_table():
    sys.path.insert(0, str(ROOT / "ci"))
    try:
        import hipify as ci_hipify
    finally:
        sys.path.pop(0)
    from fusedgemm.runtime import hipify

    assert [(p.pattern, r) for p, r in ci_hipify.RENAMES] == [(p.pattern, r) for p, r in hipify.RENAMES]
    assert ci_hipify.convert.__module__ == "_fusedgemm_hipify"
    proc = subprocess.run([sys.executable, str(ROOT / "ci" / "hipify.py"), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--check" in proc.stdout


def test_key_changes_with_source_headers_flags_and_compiler(fake, tmp_path, monkeypatch):
    k = spec().key()
    assert spec().key() == k  # deterministic
    assert spec(source=SOURCE + "\n// another epilogue\n").key() != k
    assert spec(unit="other_tu").key() != k
    flags = compilers.NVCC_FLAGS
    monkeypatch.setattr(compilers, "NVCC_FLAGS", (*flags, "-DFG_SOMETHING=1"))
    assert spec().key() != k
    monkeypatch.setattr(compilers, "NVCC_FLAGS", flags)
    assert spec().key() == k
    # Compiler identity: another binary (path), or the same one changed (mtime).
    other = fake.dir / "nvcc2"
    other.write_text(FAKE_NVCC)
    other.chmod(0o755)
    monkeypatch.setenv("FUSEDGEMM_NVCC", str(other))
    assert spec().key() != k
    monkeypatch.setenv("FUSEDGEMM_NVCC", str(fake.nvcc))
    st = fake.nvcc.stat()
    os.utime(fake.nvcc, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    k2 = spec().key()
    assert k2 != k
    # Every header counts: a copy of the source trees with one header changed.
    import shutil

    src = tmp_path / "srcroot"
    for tree in ("hip_src", "cuda_src"):
        shutil.copytree(ROOT / tree, src / tree)
    monkeypatch.setenv("FUSEDGEMM_SOURCE_DIR", str(src))
    assert spec().key() == k2
    hdr = src / "cuda_src" / "include" / "fusedgemm" / "platform.hpp"
    hdr.write_text(hdr.read_text() + "\n// changed\n")
    assert spec().key() != k2
    # The compiler's --version ran once (memoised on disk under the cache, keyed by path/size/mtime).
    assert len(list((fake.cache / "compilers").glob("*.txt"))) == 3


def test_compiler_choice(fake, monkeypatch):
    assert isinstance(compilers.compiler_for("sm_90a"), compilers.Nvcc)
    assert isinstance(compilers.compiler_for("gfx942"), compilers.Clang)  # FUSEDGEMM_COMPILER names NVIDIA's
    monkeypatch.setenv("FUSEDGEMM_COMPILER", "hiprtc")
    with pytest.raises(BuildError, match="FUSEDGEMM_COMPILER"):
        compilers.compiler_for("sm_90a")
    monkeypatch.setenv("FUSEDGEMM_COMPILER", "nvcc")
    monkeypatch.setenv("FUSEDGEMM_NVCC", str(fake.dir / "missing-nvcc"))
    monkeypatch.setattr(compilers, "_installed_nvidia_tool", lambda tool: None)
    with pytest.raises(BuildError, match="FUSEDGEMM_NVCC=.*missing-nvcc.* is not an executable file, and no other nvcc"):
        compilers.compiler_for("sm_90a")


@pytest.mark.parametrize("forced", ["", "nvcc"])
def test_a_bad_nvcc_setting_is_reported_once_with_what_is_used_instead(fake, monkeypatch, forced):
    """FUSEDGEMM_NVCC naming no executable is not passed over in silence: one warning that names the variable, its
    value and the nvcc used instead (or NVRTC, where there is no other nvcc)."""
    monkeypatch.setenv("FUSEDGEMM_COMPILER", forced)
    monkeypatch.setenv("FUSEDGEMM_NVCC", "/nonexistent/nvcc")
    monkeypatch.setattr(compilers, "_installed_nvidia_tool", lambda tool: str(fake.nvcc))
    monkeypatch.setattr(compilers, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match=f"FUSEDGEMM_NVCC='/nonexistent/nvcc' is not an executable file; using "
                                            f"{fake.nvcc} instead"):
        c = compilers.compiler_for("sm_90a")
    assert isinstance(c, compilers.Nvcc) and c.path == str(fake.nvcc)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        compilers.compiler_for("sm_90a")


def test_a_bad_nvcc_setting_without_another_nvcc_says_nvrtc_is_used(fake, monkeypatch):
    monkeypatch.delenv("FUSEDGEMM_COMPILER", raising=False)
    monkeypatch.setenv("FUSEDGEMM_NVCC", "/nonexistent/nvcc")
    monkeypatch.setattr(compilers, "_WARNED", set())
    monkeypatch.setattr(compilers, "Nvcc", lambda: (_ for _ in ()).throw(BuildError(
        "FUSEDGEMM_NVCC='/nonexistent/nvcc' is not an executable file, and no other nvcc was found")))
    monkeypatch.setattr(compilers, "Nvrtc", lambda: "nvrtc")
    with pytest.warns(RuntimeWarning, match="FUSEDGEMM_NVCC='/nonexistent/nvcc' .* building sm_90a code with NVRTC"):
        assert compilers.compiler_for("sm_90a") == "nvrtc"


def test_build_keeps_the_source_beside_the_code_object_and_verbose(fake, monkeypatch, capfd):
    s = spec()
    assert cached_code_object_for(s) is None
    p = code_object_for(s)
    assert capfd.readouterr().err == ""  # not verbose: nothing printed
    assert p.is_file() and p.parent.parent == fake.cache / "sm_90a" and p.name == "fake_tu.cubin"
    assert (p.parent / "fake_tu.cu").read_text() == s.translation_unit()
    assert (p.parent / "fake_tu.log").is_file()
    assert cached_code_object_for(s) == p and code_object_for(s) == p
    assert len(fake.lines("count")) == 1
    # Verbose: one line per compile (what, why, which compiler, how long); nothing on a cache hit.
    monkeypatch.setenv("FUSEDGEMM_JIT_VERBOSE", "1")
    code_object_for(s)
    assert capfd.readouterr().err == ""
    code_object_for(spec(unit="fake_tu2"))
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "fake_tu2 for sm_90a" in err[0] and "cache miss" in err[0] and f"nvcc 0.0.1 ({fake.nvcc})" in err[0]
    assert err[0].split(": ")[-1].split(" s ->")[0].replace(".", "").isdigit()


def test_prebuilt_fixed_units_are_used_without_compiling(fake, tmp_path, monkeypatch, capfd):
    pre = tmp_path / "prebuilt"
    (pre / "sm_90a").mkdir(parents=True)
    (pre / "sm_90a" / "portable_gemm.cubin").write_bytes(b"\x7fELF prebuilt")
    monkeypatch.setenv("FUSEDGEMM_PREBUILT_DIR", str(pre))
    assert build.code_object_path("portable_gemm", "sm_90a") == pre / "sm_90a" / "portable_gemm.cubin"
    monkeypatch.setenv("FUSEDGEMM_JIT_VERBOSE", "1")
    assert code_object_dir(BuildSpec("bmm_tiny", "sm_90a")).parent == fake.cache / "sm_90a"  # not prebuilt: built
    assert len(fake.lines("count")) == 1
    assert f"(no prebuilt in {pre}, cache miss)" in capfd.readouterr().err


# ---- crash safety, concurrency, warm loads ------------------------------------------------------------------------
def _wait_for(pred, timeout=60.0):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError
        time.sleep(0.02)


def test_sigkill_mid_build_leaves_no_entry_and_the_next_build_works(fake):
    s = spec()
    env = {"FAKE_SLEEP": "60"}
    proc = subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT], env={**os.environ, **env}, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: fake.lines("started"))  # the compiler runs: the build is under way
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the builder and its compiler (its own session/group)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert cached_code_object_for(s) is None
    arch_dir = fake.cache / "sm_90a"
    assert not [p for p in arch_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]  # no entry
    leftovers = [p for p in arch_dir.iterdir() if p.name.startswith(".fake_tu-")]
    assert leftovers  # the killed build's temporary directory (and the lock file) are still there...
    t0 = time.perf_counter()
    p = code_object_for(s)  # ...and block nothing: this build takes the lock, removes them, builds
    assert time.perf_counter() - t0 < 30
    assert p.is_file() and p.read_bytes().startswith(b"\x7fELF")
    assert not [q for q in arch_dir.iterdir() if q.name.startswith(".fake_tu-")]
    assert len(fake.lines("count")) == 1 and len(fake.lines("started")) == 2


def test_eight_processes_build_a_new_spec_once(fake):
    go = fake.dir / "go"
    script = STUB_IMPORT + f"""
import os, pathlib, sys, time
pathlib.Path({str(fake.dir)!r}, "ready-" + sys.argv[1]).touch()
while not pathlib.Path({str(go)!r}).exists():
    time.sleep(0.005)
from fusedgemm.runtime.build import BuildSpec, code_object_for
print(code_object_for(BuildSpec("fake_tu", "sm_90a", {SOURCE!r})))
"""
    env = {**os.environ, "FAKE_SLEEP": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(8)]
    try:
        _wait_for(lambda: len(list(fake.dir.glob("ready-*"))) == 8)
        go.touch()  # all at once
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * 8, [o[1] for o in outs]
    paths = {o[0].strip() for o in outs}
    assert len(paths) == 1 and Path(paths.pop()).is_file()
    assert len(fake.lines("started")) == 1 and len(fake.lines("count")) == 1


def test_threads_of_one_process_build_once(fake, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("FAKE_SLEEP", "0.5")
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: code_object_for(spec()), range(4)))
    assert len(set(paths)) == 1 and paths[0].is_file()
    assert len(fake.lines("started")) == 1


def test_warm_load_in_a_fresh_process_starts_no_process(fake):
    s = spec()
    built = code_object_for(s)  # the first interpreter builds
    # A fresh interpreter (the real package import) with every way of starting a process disabled.
    script = f"""
import os, subprocess, time
import fusedgemm
from fusedgemm.runtime.build import BuildSpec, code_object_for
def refuse(*a, **k):
    raise AssertionError("a warm load started a process")
subprocess.Popen = subprocess.run = subprocess.call = subprocess.check_output = refuse
for name in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp", "popen"):
    if hasattr(os, name):
        setattr(os, name, refuse)
t0 = time.perf_counter()
p = code_object_for(BuildSpec("fake_tu", "sm_90a", {SOURCE!r}))
dt = time.perf_counter() - t0
print(p)
print(f"{{dt * 1e3:.2f}}")
"""
    proc = run_script(script)
    assert proc.returncode == 0, proc.stderr
    path, ms = proc.stdout.split()
    assert Path(path) == built
    print(f"warm lookup in a fresh process: {float(ms):.2f} ms")
    assert float(ms) < 500  # ~1-2 ms here; generous for a loaded CI machine
    assert len(fake.lines("started")) == 1


# ---- failures ------------------------------------------------------------------------------------------------------
def test_compile_failure_raises_with_log_and_source_and_leaves_no_entry(fake, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "expected a ';'")
    s = spec(source=BAD_SOURCE)
    with pytest.raises(BuildError) as info:
        code_object_for(s)
    e = info.value
    assert "expected a ';'" in e.log and "expected a ';'" in str(e)
    assert e.source == fake.cache / "sm_90a" / "failed" / f"fake_tu-{s.key()}" / "fake_tu.cu"
    assert e.source.read_text() == s.translation_unit()
    assert e.log_path.is_file() and "exit status 2" in e.log_path.read_text()
    assert cached_code_object_for(s) is None
    assert not [p for p in (fake.cache / "sm_90a").iterdir() if p.name.startswith(("fake_tu-", ".fake_tu-"))
                and not p.name.endswith(".lock")]
    # A failure is not cached: the next call compiles again (and succeeds once the cause is gone).
    monkeypatch.delenv("FAKE_FAIL")
    assert code_object_for(s).is_file()
    assert len(fake.lines("started")) == 2


def _nvrtc_or_skip():
    try:
        return compilers.Nvrtc()
    except BuildError as e:
        pytest.skip(f"NVRTC not installed: {e}")


def test_nvrtc_failure_is_a_build_error(monkeypatch, tmp_path):
    _nvrtc_or_skip()
    monkeypatch.setenv("FUSEDGEMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSEDGEMM_COMPILER", "nvrtc")
    s = spec(source=BAD_SOURCE)
    with pytest.raises(BuildError) as info:
        code_object_for(s)
    assert "error" in info.value.log and "fake_tu.cu" in info.value.log
    assert info.value.source.read_text() == s.translation_unit()
    assert cached_code_object_for(s) is None


def test_cli_help_names_the_module():
    proc = subprocess.run([sys.executable, "-m", "fusedgemm.runtime.build", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m fusedgemm.runtime.build")


# ---- real compilers ------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("arch,compiler", [("sm_90a", "nvcc"), ("sm_90a", "nvrtc"), ("gfx942", "clang"),
                                           ("gfx950", "clang")])
def test_generated_unit_builds_with_the_real_compiler(arch, compiler, monkeypatch, tmp_path):
    from fusedgemm.runtime.codeobject import cubin_params, hsaco_kernels, hsaco_params

    if compiler == "nvrtc":
        _nvrtc_or_skip()
    monkeypatch.setenv("FUSEDGEMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSEDGEMM_COMPILER", compiler)
    monkeypatch.delenv("FUSEDGEMM_PREBUILT_DIR", raising=False)
    s = BuildSpec("jit_probe", arch, SOURCE)
    assert type(s.compiler()).__name__.lower() == compiler
    t0 = time.perf_counter()
    path = code_object_for(s)
    print(f"cold JIT of a small generated TU for {arch} with {compiler}: {time.perf_counter() - t0:.2f} s")
    data = path.read_bytes()
    if arch.startswith("sm_"):
        params = cubin_params(data)["fg_jit_probe_twice"]
    else:
        params = hsaco_params(hsaco_kernels(data)["fg_jit_probe_twice"])
        assert hsaco_kernels(data)["fg_jit_probe_twice"][".vgpr_count"] > 0
    assert [(p.offset, p.size) for p in params] == [(0, 8), (8, 8), (16, 4)]
    assert (path.parent / s.source_file_name).read_text() == s.translation_unit()
    # Warm lookup as a fresh process would do it (version memo read from disk): no process, no library load.
    compilers._VERSION_MEMO.clear()
    compilers._load_nvrtc.cache_clear()

    def refuse(*a, **k):
        raise AssertionError("a warm lookup started a process")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert code_object_for(s) == path
    assert compilers._load_nvrtc.cache_info().currsize == 0
