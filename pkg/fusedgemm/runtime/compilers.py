"""The compilers that turn a translation unit into a code object, and their identities for the cache key.

    sm_90a  nvcc    -cubin -gencode=arch=compute_90a,code=sm_90a             (PyPI nvidia-cuda-nvcc, PATH, ...)
            nvrtc   in-process through ctypes, nvrtcGetCUBIN               (PyPI nvidia-cuda-nvrtc, ...)
    gfx9xx  clang   -x hip --cuda-device-only -S -> clang -cc1as -> ld.lld -shared
                    (clang >= 20: the one inside PyPI's `ziglang`, or $FUSEDGEMM_CLANG)

`compiler_for(arch)` picks one: nvcc when one is found, else NVRTC; FUSEDGEMM_COMPILER=nvcc|nvrtc forces one
(it concerns NVIDIA arches; AMD arches always use clang).

A compiler's identity (part of every cache key) is the resolved path, size and mtime of its binaries plus
its version text. The version text comes from running the compiler (`--version`) or loading NVRTC once,
and is memoised on disk under the cache, keyed by the path/size/mtime signature, so a warm cache lookup
in a fresh process starts no process and loads no library.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Sequence

CXX_STD = "-std=c++17"
NVCC_FLAGS = ("-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", CXX_STD, "-Xptxas", "-v", "-split-compile=0",
              "-lineinfo")
# NVRTC compiles device code only and optimises it fully by default (nvcc's -O3 is a host-code flag).
# -default-device: unannotated functions (lambdas inside kernels, constexpr helpers) are device functions,
# as nvcc treats them in our device-only translation units; NVRTC rejects host functions otherwise.
NVRTC_FLAGS = ("--gpu-architecture=sm_90a", "--std=c++17", "-default-device", "-lineinfo", "--ptxas-options=-v")
HIP_FLAGS = ("-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O3", CXX_STD, "-Wno-pass-failed")

LOG_TAIL = 6000  # characters of a compiler log carried by BuildError


class BuildError(RuntimeError):
    """A code object could not be built. `log`: the tail of the compiler's output; `source`: the translation
    unit that was compiled (for a generated unit, a copy kept in the cache's failed/ directory); `log_path`:
    the whole log; `build_dir`: the directory holding what the failed build left."""

    def __init__(self, message: str, *, log: str = "", source: Path | None = None, log_path: Path | None = None,
                 build_dir: Path | None = None):
        super().__init__(message)
        self.log = log
        self.source = source
        self.log_path = log_path
        self.build_dir = build_dir


# ---- finding tools -----------------------------------------------------------------------------------------
def _nvidia_wheel_dirs() -> list[Path]:
    try:
        import nvidia  # namespace package of NVIDIA's PyPI wheels
    except ImportError:
        return []
    return [Path(p) for p in getattr(nvidia, "__path__", [])]


def _pip_nvidia_bin(tool: str) -> Path | None:
    for base in _nvidia_wheel_dirs():
        for sub in ("cu13", "cuda_nvcc", "cuda_cuobjdump", "cuda_nvdisasm"):
            p = base / sub / "bin" / tool
            if p.is_file():
                return p
    return None


def _installed_nvidia_tool(tool: str) -> str | None:
    """PyPI's nvidia wheels, then PATH, then /usr/local/cuda."""
    pip_tool = _pip_nvidia_bin(tool)
    if pip_tool:
        return str(pip_tool)
    cuda_tool = Path(f"/usr/local/cuda/bin/{tool}")
    return shutil.which(tool) or (str(cuda_tool) if cuda_tool.is_file() else None)


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """A RuntimeWarning, once per process and message (a setting that is not used must not pass in silence)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def find_nvidia_tool(tool: str) -> str:
    """nvcc / cuobjdump / nvdisasm: $FUSEDGEMM_<TOOL>, then PyPI's nvidia wheels, then PATH, then /usr/local/cuda.
    A $FUSEDGEMM_<TOOL> that names no executable is reported once (a warning naming what is used instead) and
    passed over."""
    var = f"FUSEDGEMM_{tool.upper()}"
    env = os.environ.get(var)
    if env and shutil.which(env):
        return env
    found = _installed_nvidia_tool(tool)
    if env:  # set, but not an executable
        if not found:
            raise BuildError(f"{var}={env!r} is not an executable file, and no other {tool} was found: pip install "
                             f"'nvidia-cuda-nvcc==13.0.*' (see README), put it on PATH, or fix {var}")
        warn_once(f"{var}={env!r} is not an executable file; using {found} instead")
    if not found:
        raise BuildError(f"{tool} not found: pip install 'nvidia-cuda-nvcc==13.0.*' (see README), put it on PATH, "
                         f"or set {var}")
    return found


def find_nvrtc() -> Path:
    """libnvrtc: $FUSEDGEMM_NVRTC (the library's path), then PyPI's nvidia-cuda-nvrtc, then the system's."""
    env = os.environ.get("FUSEDGEMM_NVRTC")
    if env:
        if not Path(env).is_file():
            raise BuildError(f"FUSEDGEMM_NVRTC={env} is not a file")
        return Path(env)
    for base in _nvidia_wheel_dirs():
        for sub in ("cu13", "cuda_nvrtc"):
            libs = sorted((base / sub / "lib").glob("libnvrtc.so.*"))
            libs = [p for p in libs if ".alt." not in p.name]
            if libs:
                return libs[0]
    for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"):
        libs = sorted(Path(d).glob("libnvrtc.so*"))
        if libs:
            return libs[0]
    raise BuildError("NVRTC not found: pip install 'nvidia-cuda-nvrtc==13.0.*', or set FUSEDGEMM_NVRTC to libnvrtc.so")


def _which(cmd: str) -> str:
    found = cmd if os.sep in cmd else shutil.which(cmd)
    if not found or not Path(found).is_file():
        raise BuildError(f"compiler {cmd!r} not found")
    return found


# ---- identity: no process on the warm path ---------------------------------------------------------------------
def stat_signature(paths: Sequence[str | Path]) -> str:
    """Resolved path, size and mtime of each file that exists (one line each)."""
    lines = []
    for p in paths:
        rp = os.path.realpath(p)
        try:
            st = os.stat(rp)
        except FileNotFoundError:
            continue
        lines.append(f"{rp} {st.st_size} {st.st_mtime_ns}")
    return "\n".join(lines)


_VERSION_MEMO: dict[tuple[str, str], str] = {}


def memoised_version(signature: str, memo_dir: Path, compute: Callable[[], str]) -> str:
    """compute() (a `--version` run), memoised in this process and on disk under memo_dir by `signature`."""
    text = _VERSION_MEMO.get((str(memo_dir), signature))
    if text is not None:
        return text
    path = memo_dir / (hashlib.sha256(signature.encode()).hexdigest()[:24] + ".txt")
    try:
        stored = path.read_text()
        sig, sep, text = stored.partition("\n--\n")
        if sep and sig == signature:
            _VERSION_MEMO[(str(memo_dir), signature)] = text
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = compute().strip()
    tmp = None
    try:  # best effort: an unwritable cache only costs a --version run per process
        memo_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".version-", dir=memo_dir)
        with os.fdopen(fd, "w") as f:
            f.write(f"{signature}\n--\n{text}")
        os.replace(tmp, path)  # readers see the old file, the new one, or none: never half of one
    except OSError:
        pass
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
    _VERSION_MEMO[(str(memo_dir), signature)] = text
    return text


def _run_version(cmd: list[str]) -> str:
    try:
        proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"cannot run {' '.join(cmd)}: {e}") from e
    return proc.stdout


# ---- running steps -------------------------------------------------------------------------------------------
def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL:]
    except FileNotFoundError:
        return ""


def run_steps(steps: list[list[str]], log: Path, cwd: Path, what: str) -> None:
    """Run each command with its output appended to `log`; BuildError (with the log's tail) on the first failure."""
    with open(log, "a") as logf:
        for cmd in steps:
            logf.write("$ " + " ".join(cmd) + "\n")
            logf.flush()
            try:
                proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=cwd)
            except OSError as e:
                logf.write(f"cannot run {cmd[0]}: {e}\n")
                returncode = None
            else:
                returncode = proc.returncode
            if returncode != 0:
                logf.write(f"[exit status {returncode}]\n")
                logf.close()
                tail = _tail(log)
                raise BuildError(f"{what} failed:\n{tail}", log=tail, log_path=log)


# ---- the compilers ---------------------------------------------------------------------------------------------
class Compiler:
    name = "?"
    vendor = "?"

    def paths(self) -> list[str]:
        """The files whose path/size/mtime stand for this compiler in the cache key."""
        raise NotImplementedError

    def _version(self) -> str:
        raise NotImplementedError

    def flags(self, arch: str) -> tuple[str, ...]:
        raise NotImplementedError

    def identity(self, memo_dir: Path) -> str:
        sig = stat_signature(self.paths())
        if not sig:
            raise BuildError(f"{self.name}: none of {self.paths()} exists")
        return f"{self.name}\n{sig}\n{memoised_version(self.name + chr(10) + sig, memo_dir, self._version)}"

    def describe(self, memo_dir: Path) -> str:
        """'nvcc 13.0.88 (/path/to/nvcc)' for messages."""
        text = self.identity(memo_dir).split("\n", 1)[1]
        m = re.search(r"\bV(\d+\.\d+\.\d+)|version (\d+[.\d]*)|^nvrtc (\d+\.\d+)", text, re.M)
        version = next((g for g in m.groups() if g), "") if m else ""
        return f"{self.name} {version} ({self.paths()[0]})".replace("  ", " ")

    def compile(self, source: Path, out: Path, arch: str, include_dirs: Sequence[Path], cwd: Path, log: Path) -> None:
        """Compile `source` into the code object `out`, the compiler's output appended to `log`."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.paths()[0] if self.paths() else '?'}>"


class Nvcc(Compiler):
    name, vendor = "nvcc", "nvidia"

    def __init__(self, path: str | None = None):
        self.path = _which(path or find_nvidia_tool("nvcc"))

    def paths(self) -> list[str]:
        d = Path(os.path.realpath(self.path)).parent
        return [self.path, str(d / "ptxas"), str(d.parent / "nvvm" / "bin" / "cicc")]

    def _version(self) -> str:
        return _run_version([self.path, "--version"])

    def flags(self, arch: str) -> tuple[str, ...]:
        if arch != "sm_90a":
            raise BuildError(f"nvcc flags are defined for sm_90a only, not {arch}")
        return NVCC_FLAGS

    def compile(self, source, out, arch, include_dirs, cwd, log):
        cmd = [self.path, *self.flags(arch), *(f"-I{d}" for d in include_dirs), str(source), "-o", str(out)]
        run_steps([cmd], log, cwd, f"nvcc {source.name} for {arch}")


@functools.lru_cache(maxsize=None)
def _load_nvrtc(path: str):
    # libnvrtc dlopen()s libnvrtc-builtins by soname; load the one beside it first so that lookup finds it.
    for builtins in sorted(Path(path).parent.glob("libnvrtc-builtins.so.*")):
        if ".alt." not in builtins.name:
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            break
    lib = ctypes.CDLL(path)
    vp, sz, cp, ip = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int
    lib.nvrtcGetErrorString.restype = cp
    lib.nvrtcGetErrorString.argtypes = [ip]
    lib.nvrtcVersion.argtypes = [ctypes.POINTER(ip), ctypes.POINTER(ip)]
    lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(vp), cp, cp, ip, ctypes.POINTER(cp), ctypes.POINTER(cp)]
    lib.nvrtcCompileProgram.argtypes = [vp, ip, ctypes.POINTER(cp)]
    lib.nvrtcGetProgramLogSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvrtcGetProgramLog.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcGetCUBINSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvrtcGetCUBIN.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(vp)]
    for f in ("nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize",
              "nvrtcGetProgramLog", "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcDestroyProgram"):
        getattr(lib, f).restype = ip
    return lib


class Nvrtc(Compiler):
    name, vendor = "nvrtc", "nvidia"

    def __init__(self, path: str | Path | None = None):
        self.path = str(path or find_nvrtc())

    def paths(self) -> list[str]:
        builtins = [str(p) for p in sorted(Path(self.path).parent.glob("libnvrtc-builtins.so.*")) if ".alt." not in p.name]
        return [self.path, *builtins]

    def _lib(self):
        try:
            return _load_nvrtc(os.path.realpath(self.path))
        except OSError as e:
            raise BuildError(f"cannot load NVRTC from {self.path}: {e}") from e

    def _version(self) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self._lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return f"nvrtc {major.value}.{minor.value}"

    def _check(self, status: int, what: str, log: str = "") -> None:
        if status != 0:
            msg = self._lib().nvrtcGetErrorString(status)
            raise BuildError(f"{what}: {msg.decode() if msg else status}\n{log}", log=log)

    def flags(self, arch: str) -> tuple[str, ...]:
        if arch != "sm_90a":
            raise BuildError(f"NVRTC flags are defined for sm_90a only, not {arch}")
        return NVRTC_FLAGS

    def compile(self, source, out, arch, include_dirs, cwd, log):
        lib = self._lib()
        options = [*self.flags(arch), *(f"-I{d}" for d in include_dirs)]
        with open(log, "a") as logf:
            logf.write(f"$ nvrtc({self.path}) {' '.join(options)} {source}\n")
        prog = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.read_bytes(), source.name.encode(), 0, None, None),
                    "nvrtcCreateProgram")
        try:
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            status = lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            text = ""
            if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) == 0 and size.value > 1:
                buf = ctypes.create_string_buffer(size.value)
                if lib.nvrtcGetProgramLog(prog, buf) == 0:
                    text = buf.value.decode(errors="replace")
            with open(log, "a") as logf:
                logf.write(text)
                if status != 0:
                    logf.write(f"[nvrtcCompileProgram: {lib.nvrtcGetErrorString(status).decode()}]\n")
            if status != 0:
                tail = _tail(log)
                raise BuildError(f"nvrtc {source.name} for {arch} failed:\n{tail}", log=tail, log_path=log)
            self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            cubin = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
            out.write_bytes(cubin.raw[:size.value])
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


class Clang(Compiler):
    """clang for gfx942/gfx950: $FUSEDGEMM_CLANG (ld.lld beside it), else the clang inside PyPI's ziglang."""
    name, vendor = "clang", "amd"

    def __init__(self):
        env = os.environ.get("FUSEDGEMM_CLANG")
        if env:
            clang = _which(env)
            self.clang, self.lld = [clang], [str(Path(clang).with_name("ld.lld"))]
            self._paths = [clang, self.lld[0]]
        else:
            import importlib.util

            spec = importlib.util.find_spec("ziglang")
            if spec is None or not spec.submodule_search_locations:
                raise BuildError("no clang for AMD targets: pip install ziglang (LLVM >= 20), or set FUSEDGEMM_CLANG")
            zig = Path(list(spec.submodule_search_locations)[0]) / "zig"
            if not zig.is_file():
                raise BuildError(f"ziglang is installed but has no zig binary at {zig}")
            self.clang, self.lld = [str(zig), "clang"], [str(zig), "ld.lld"]
            self._paths = [str(zig)]

    def paths(self) -> list[str]:
        return self._paths

    def _version(self) -> str:
        return _run_version([*self.clang, "--version"])

    def flags(self, arch: str) -> tuple[str, ...]:
        return (*HIP_FLAGS, f"--offload-arch={arch}")

    def compile(self, source, out, arch, include_dirs, cwd, log):
        stem = out.with_suffix("")
        asm, obj = stem.with_suffix(".s"), stem.with_suffix(".o")
        inc = [f"-I{d}" for d in include_dirs]
        steps = [
            [*self.clang, *self.flags(arch), *inc, "-S", str(source), "-o", str(asm)],
            [*self.clang, "-cc1as", "-triple", "amdgcn-amd-amdhsa", "-target-cpu", arch, "-filetype", "obj",
             "-mrelocation-model", "pic", str(asm), "-o", str(obj)],
            [*self.lld, "-shared", str(obj), "-o", str(out)],
        ]
        run_steps(steps, log, cwd, f"clang {source.name} for {arch}")


COMPILER_ENV = "FUSEDGEMM_COMPILER"


def compiler_for(arch: str) -> Compiler:
    """The compiler that builds `arch`'s code objects (no process is started)."""
    from .arch import vendor_of

    forced = os.environ.get(COMPILER_ENV, "").strip().lower()
    if forced not in ("", "auto", "nvcc", "nvrtc", "clang"):
        raise BuildError(f"{COMPILER_ENV}={forced!r}: expected nvcc or nvrtc (NVIDIA) or clang (AMD)")
    if vendor_of(arch) == "amd":
        return Clang()  # nvcc/nvrtc name the NVIDIA compiler; AMD has clang only (hipRTC is not supported)
    if forced == "nvrtc":
        return Nvrtc()
    if forced == "nvcc":
        return Nvcc()
    try:
        return Nvcc()
    except BuildError as nvcc_missing:
        try:
            nvrtc = Nvrtc()
        except BuildError as nvrtc_missing:
            raise BuildError(f"no CUDA compiler for {arch}: {nvcc_missing}; {nvrtc_missing}") from None
        if os.environ.get("FUSEDGEMM_NVCC"):  # asked for nvcc, gets NVRTC: say so
            warn_once(f"{nvcc_missing}; building {arch} code with NVRTC instead")
        return nvrtc


__all__ = ["BuildError", "Clang", "Compiler", "Nvcc", "Nvrtc", "compiler_for", "find_nvidia_tool", "find_nvrtc",
           "warn_once", "CXX_STD", "HIP_FLAGS", "NVCC_FLAGS", "NVRTC_FLAGS"]
