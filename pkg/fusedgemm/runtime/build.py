"""One build spec for ahead-of-time and just-in-time code objects.

A code object is (source unit, arch). Its cache key hashes every source and header file, the compiler's
version, the flags and the arch. Builds go to a temporary directory and are renamed into the cache under
a file lock, so an interrupted build never leaves a poisoned entry, and concurrent processes build once.

    sm_90a  nvcc -cubin -gencode=arch=compute_90a,code=sm_90a        from cuda_src/ (generated from hip_src/)
    gfx9xx  clang -x hip --cuda-device-only -S  ->  clang -cc1as  ->  ld.lld -shared    from hip_src/
            (clang >= 20 for gfx950: the one inside PyPI's `ziglang` package, or $FUSEDGEMM_CLANG)

Environment: FUSEDGEMM_CACHE_DIR (default ~/.cache/fusedgemm), FUSEDGEMM_PREBUILT_DIR (code objects built
ahead of time: <dir>/<arch>/<unit>.<cubin|hsaco>), FUSEDGEMM_NVCC, FUSEDGEMM_CLANG, FUSEDGEMM_SOURCE_DIR.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .arch import SUPPORTED_ARCHES, vendor_of

# Source units: each is one translation unit (hip_src/<unit>.hip, cuda_src/<unit>.cu) = one code object.
UNITS = ("gemm_a8", "gemm_a8_sm90", "bmm_tiny")
# Units written for one vendor's hardware only (the Hopper wgmma/TMA kernels); the rest build everywhere.
UNIT_ARCHES = {"gemm_a8_sm90": ("sm_90a",)}


def units_for(arch: str) -> tuple[str, ...]:
    return tuple(u for u in UNITS if arch in UNIT_ARCHES.get(u, (arch,)))

CXX_STD = "-std=c++17"
NVCC_FLAGS = ("-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", CXX_STD, "-Xptxas", "-v", "-split-compile=0",
              "-lineinfo")
HIP_FLAGS = ("-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O3", CXX_STD, "-Wno-pass-failed")


class BuildError(RuntimeError):
    pass


def source_root() -> Path:
    """The directory holding hip_src/ and cuda_src/ (the repository root in a source checkout)."""
    env = os.environ.get("FUSEDGEMM_SOURCE_DIR")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[3], Path(__file__).resolve().parents[1] / "_src"]
    for root in candidates:
        if (root / "hip_src").is_dir() and (root / "cuda_src").is_dir():
            return root
    raise BuildError(f"kernel sources not found (looked in {', '.join(map(str, candidates))}); "
                     "install fusedgemm from its source tree or set FUSEDGEMM_SOURCE_DIR")


def cache_dir() -> Path:
    return Path(os.environ.get("FUSEDGEMM_CACHE_DIR", Path.home() / ".cache" / "fusedgemm"))


# ---- tools -------------------------------------------------------------------------------------------------
def _pip_nvidia_bin(tool: str) -> Path | None:
    try:
        import nvidia  # namespace package of NVIDIA's PyPI wheels
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        for sub in ("cu13", "cuda_nvcc", "cuda_cuobjdump", "cuda_nvdisasm"):
            p = Path(base) / sub / "bin" / tool
            if p.is_file():
                return p
    return None


def find_nvidia_tool(tool: str) -> str:
    """nvcc / cuobjdump / nvdisasm: $FUSEDGEMM_<TOOL>, then PyPI's nvidia wheels, then PATH, then /usr/local/cuda."""
    env = os.environ.get(f"FUSEDGEMM_{tool.upper()}")
    if env:
        return env
    pip_tool = _pip_nvidia_bin(tool)
    if pip_tool:
        return str(pip_tool)
    found = shutil.which(tool) or (f"/usr/local/cuda/bin/{tool}" if Path(f"/usr/local/cuda/bin/{tool}").is_file() else None)
    if not found:
        raise BuildError(f"{tool} not found: pip install 'nvidia-cuda-nvcc==13.0.*' (see README), put it on PATH, "
                         f"or set FUSEDGEMM_{tool.upper()}")
    return found


def _clang_cmd() -> list[str]:
    env = os.environ.get("FUSEDGEMM_CLANG")
    if env:
        return [env]
    import importlib.util

    if importlib.util.find_spec("ziglang") is None:
        raise BuildError("no clang for AMD targets: pip install ziglang (LLVM >= 20), or set FUSEDGEMM_CLANG")
    return [sys.executable, "-m", "ziglang", "clang"]


def _lld_cmd() -> list[str]:
    env = os.environ.get("FUSEDGEMM_CLANG")
    if env:
        return [str(Path(env).with_name("ld.lld"))]
    return [sys.executable, "-m", "ziglang", "ld.lld"]


@functools.lru_cache(maxsize=None)
def compiler_version(vendor: str) -> str:
    cmd = [find_nvidia_tool("nvcc"), "--version"] if vendor == "nvidia" else [*_clang_cmd(), "--version"]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


# ---- the build spec ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BuildSpec:
    unit: str
    arch: str

    def __post_init__(self):
        if self.unit not in UNITS:
            raise ValueError(f"unknown source unit {self.unit!r}; expected one of {UNITS}")
        if self.arch not in SUPPORTED_ARCHES:
            raise ValueError(f"unknown arch {self.arch!r}; expected one of {tuple(SUPPORTED_ARCHES)}")
        if self.unit not in units_for(self.arch):
            raise ValueError(f"source unit {self.unit!r} is built only for {UNIT_ARCHES[self.unit]}, not {self.arch}")

    @property
    def vendor(self) -> str:
        return vendor_of(self.arch)

    @property
    def suffix(self) -> str:
        return SUPPORTED_ARCHES[self.arch][1]

    @property
    def src_dir(self) -> Path:
        return source_root() / ("cuda_src" if self.vendor == "nvidia" else "hip_src")

    @property
    def main_source(self) -> Path:
        return self.src_dir / (f"{self.unit}.cu" if self.vendor == "nvidia" else f"{self.unit}.hip")

    def input_files(self) -> list[Path]:
        return [self.main_source, *sorted((self.src_dir / "include").rglob("*.hpp"))]

    def flags(self) -> tuple[str, ...]:
        return NVCC_FLAGS if self.vendor == "nvidia" else (*HIP_FLAGS, f"--offload-arch={self.arch}")

    def key(self) -> str:
        h = hashlib.sha256()
        for f in self.input_files():
            h.update(f.relative_to(self.src_dir).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        h.update(compiler_version(self.vendor).encode())
        h.update(" ".join(self.flags()).encode())
        h.update(self.arch.encode())
        return h.hexdigest()[:20]

    def file_name(self) -> str:
        return f"{self.unit}{self.suffix}"

    # -- compiling ------------------------------------------------------------------------------------------
    def compile_into(self, out_dir: Path) -> Path:
        """Build the code object into out_dir; also leaves <unit>.log (and <unit>.s for AMD) beside it."""
        out = out_dir / self.file_name()
        log = out_dir / f"{self.unit}.log"
        if self.vendor == "nvidia":
            steps = [[find_nvidia_tool("nvcc"), *self.flags(), str(self.main_source), "-o", str(out)]]
        else:
            asm = out_dir / f"{self.unit}.s"
            obj = out_dir / f"{self.unit}.o"
            steps = [
                [*_clang_cmd(), *self.flags(), "-S", str(self.main_source), "-o", str(asm)],
                [*_clang_cmd(), "-cc1as", "-triple", "amdgcn-amd-amdhsa", "-target-cpu", self.arch, "-filetype",
                 "obj", "-mrelocation-model", "pic", str(asm), "-o", str(obj)],
                [*_lld_cmd(), "-shared", str(obj), "-o", str(out)],
            ]
        with open(log, "w") as logf:
            for cmd in steps:
                logf.write("$ " + " ".join(cmd) + "\n")
                logf.flush()
                proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=self.src_dir)
                if proc.returncode != 0:
                    logf.close()
                    raise BuildError(f"building {self.unit} for {self.arch} failed:\n{log.read_text()[-6000:]}")
        return out


def _prebuilt(spec: BuildSpec) -> Path | None:
    env = os.environ.get("FUSEDGEMM_PREBUILT_DIR")
    if not env:
        return None
    p = Path(env) / spec.arch / spec.file_name()
    return p if p.is_file() else None


def code_object_dir(spec: BuildSpec) -> Path:
    """Directory holding the built code object of `spec` (and its build log), building it if needed."""
    pre = _prebuilt(spec)
    if pre is not None:
        return pre.parent
    from filelock import FileLock

    root = cache_dir() / spec.arch
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{spec.unit}-{spec.key()}"
    if (final / spec.file_name()).is_file():
        return final
    with FileLock(str(final) + ".lock"):
        if (final / spec.file_name()).is_file():  # another process built it while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.unit}-", dir=root))
        try:
            spec.compile_into(tmp)
            os.replace(tmp, final)  # atomic: readers see all of it or none of it
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def code_object_path(unit: str, arch: str) -> Path:
    spec = BuildSpec(unit, arch)
    return code_object_dir(spec) / spec.file_name()


def main(argv: list[str] | None = None) -> int:
    """python -m fusedgemm.runtime.build [--arch A ...] [--out DIR]: build code objects ahead of time."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--arch", action="append", choices=list(SUPPORTED_ARCHES), help="default: all")
    p.add_argument("--unit", action="append", choices=list(UNITS), help="default: all")
    p.add_argument("--out", type=Path, help="write <out>/<arch>/<unit>.* (a FUSEDGEMM_PREBUILT_DIR); default: the cache")
    args = p.parse_args(argv)
    for arch in args.arch or list(SUPPORTED_ARCHES):
        for unit in args.unit or units_for(arch):
            if unit not in units_for(arch):
                continue
            spec = BuildSpec(unit, arch)
            if args.out:
                d = args.out.resolve() / arch  # the compiler runs in the source directory
                d.mkdir(parents=True, exist_ok=True)
                print(spec.compile_into(d))
            else:
                print(code_object_path(unit, arch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
