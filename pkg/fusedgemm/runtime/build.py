"""One build spec for ahead-of-time and just-in-time code objects.

A code object is built from a BuildSpec:
    BuildSpec(unit, arch)           a fixed source unit: hip_src/<unit>.hip (cuda_src/<unit>.cu for NVIDIA)
    BuildSpec(unit, arch, source)   a generated translation unit: `source` is HIP-flavoured C++ text (as in
                                    hip_src) that may `#include "include/fusedgemm/..."`; for NVIDIA it goes
                                    through the hipify rename first. It is written into the build directory
                                    as <unit>.cu / <unit>.hip and kept next to the code object.

Its cache key hashes the spec (unit, arch), the source text, every header under include/, the compiler's
identity (resolved path, size and mtime of its binaries, and its version text, memoised on disk so a warm
lookup starts no process) and the flags. Builds go to a temporary directory that is renamed into the cache
under a file lock: a build killed at any point leaves no entry (a later build removes its leftovers), and
concurrent processes build once. A failed build raises BuildError with the compiler's log and keeps what it
left (the generated source, the log) in <cache>/<arch>/failed/<unit>-<key>/.

    sm_90a  nvcc (when found) or NVRTC (compilers.py), from cuda_src/ (generated from hip_src/)
    gfx9xx  clang -x hip --cuda-device-only -S  ->  clang -cc1as  ->  ld.lld -shared    from hip_src/
            (clang >= 20 for gfx950: the one inside PyPI's `ziglang` package, or $FUSEDGEMM_CLANG)

Environment: FUSEDGEMM_CACHE_DIR (default $XDG_CACHE_HOME/fusedgemm or ~/.cache/fusedgemm),
FUSEDGEMM_PREBUILT_DIR (code objects of the fixed units built ahead of time:
<dir>/<arch>/<unit>.<cubin|hsaco>), FUSEDGEMM_COMPILER (nvcc|nvrtc: force the NVIDIA compiler),
FUSEDGEMM_NVCC (and FUSEDGEMM_CUOBJDUMP, FUSEDGEMM_NVDISASM: one that names no executable is reported once and
passed over), FUSEDGEMM_NVRTC (libnvrtc.so), FUSEDGEMM_CLANG, FUSEDGEMM_SOURCE_DIR,
FUSEDGEMM_JIT_VERBOSE=1 (one line on stderr per compile).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .arch import SUPPORTED_ARCHES, vendor_of
from .compilers import (CXX_STD, HIP_FLAGS, NVCC_FLAGS, NVRTC_FLAGS, BuildError, Compiler, compiler_for,  # noqa: F401
                        find_nvidia_tool, find_nvrtc)
from .hipify import convert as hip_to_cuda

# Source units: each is one translation unit (hip_src/<unit>.hip, cuda_src/<unit>.cu) = one code object.
UNITS = ("portable_gemm", "cdna_gemm", "sm90_gemm", "bmm_tiny", "quantize_rows")
# Units written for one vendor's hardware only (the Hopper wgmma/TMA kernels, the CDNA LDS-staged kernels); the
# rest build everywhere.
UNIT_ARCHES = {"sm90_gemm": ("sm_90a",), "cdna_gemm": ("gfx942", "gfx950")}
# Names of generated units: they become file and directory names.
UNIT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}\Z")
KEY_VERSION = b"fusedgemm-build-key-2"


def units_for(arch: str) -> tuple[str, ...]:
    return tuple(u for u in UNITS if arch in UNIT_ARCHES.get(u, (arch,)))


def source_root() -> Path:
    """The directory holding hip_src/ and cuda_src/ (the repository root in a source checkout, <package>/_src
    in an installed wheel)."""
    env = os.environ.get("FUSEDGEMM_SOURCE_DIR")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[3], Path(__file__).resolve().parents[1] / "_src"]
    for root in candidates:
        if (root / "hip_src").is_dir() and (root / "cuda_src").is_dir():
            return root
    raise BuildError(f"kernel sources not found (looked in {', '.join(map(str, candidates))}); "
                     "install fusedgemm from its source tree or set FUSEDGEMM_SOURCE_DIR")


def cache_dir() -> Path:
    env = os.environ.get("FUSEDGEMM_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "fusedgemm"


def _compiler_memo_dir() -> Path:
    return cache_dir() / "compilers"


# Digest of a file, memoised by (path, size, mtime): a header is read once per process unless it changes.
_FILE_DIGESTS: dict[str, tuple[int, int, bytes]] = {}


def _file_digest(path: Path) -> bytes:
    st = path.stat()
    memo = _FILE_DIGESTS.get(str(path))
    if memo and memo[0] == st.st_size and memo[1] == st.st_mtime_ns:
        return memo[2]
    digest = hashlib.sha256(path.read_bytes()).digest()
    _FILE_DIGESTS[str(path)] = (st.st_size, st.st_mtime_ns, digest)
    return digest


# ---- the build spec ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BuildSpec:
    unit: str
    arch: str
    source: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if self.arch not in SUPPORTED_ARCHES:
            raise ValueError(f"unknown arch {self.arch!r}; expected one of {tuple(SUPPORTED_ARCHES)}")
        if self.source is None:
            if self.unit not in UNITS:
                raise ValueError(f"unknown source unit {self.unit!r}; expected one of {UNITS} "
                                 "(or pass source= for a generated unit)")
            if self.unit not in units_for(self.arch):
                raise ValueError(f"source unit {self.unit!r} is built only for {UNIT_ARCHES[self.unit]}, not {self.arch}")
        else:
            if not isinstance(self.source, str):
                raise TypeError(f"source must be str (C++ text), not {type(self.source).__name__}")
            if not isinstance(self.unit, str) or not UNIT_NAME.match(self.unit):
                raise ValueError(f"generated unit name {self.unit!r}: use letters, digits, '_' and '-' "
                                 "(not first), at most 100 characters")

    @property
    def generated(self) -> bool:
        return self.source is not None

    @property
    def vendor(self) -> str:
        return vendor_of(self.arch)

    @property
    def suffix(self) -> str:
        return SUPPORTED_ARCHES[self.arch][1]

    @property
    def src_dir(self) -> Path:
        """cuda_src/ or hip_src/: the include root (`#include "include/fusedgemm/..."` resolves against it)."""
        return source_root() / ("cuda_src" if self.vendor == "nvidia" else "hip_src")

    @property
    def source_file_name(self) -> str:
        return f"{self.unit}.cu" if self.vendor == "nvidia" else f"{self.unit}.hip"

    @property
    def main_source(self) -> Path:
        """The fixed unit's source file (a generated unit's is written into its build directory)."""
        if self.generated:
            raise ValueError(f"{self.unit} is a generated unit: its source is written into the build directory")
        return self.src_dir / self.source_file_name

    def translation_unit(self) -> str:
        """The text the compiler sees: the generated source, renamed to CUDA for NVIDIA."""
        if self.generated:
            return hip_to_cuda(self.source) if self.vendor == "nvidia" else self.source
        return self.main_source.read_text()

    def header_files(self) -> list[Path]:
        return sorted(p for p in (self.src_dir / "include").rglob("*") if p.is_file())

    def input_files(self) -> list[Path]:
        """Files of the source tree that the key hashes."""
        return self.header_files() if self.generated else [self.main_source, *self.header_files()]

    def compiler(self) -> Compiler:
        return compiler_for(self.arch)

    def flags(self, compiler: Compiler | None = None) -> tuple[str, ...]:
        return (compiler or self.compiler()).flags(self.arch)

    def key(self, compiler: Compiler | None = None) -> str:
        """Hash of spec + source text + every header + compiler identity + flags (starts no process when the
        compiler's version is memoised)."""
        compiler = compiler or self.compiler()
        h = hashlib.sha256(KEY_VERSION + b"\0")
        h.update(f"{self.unit}\0{self.arch}\0{'generated' if self.generated else 'fixed'}\0".encode())
        if self.generated:
            h.update(hashlib.sha256(self.translation_unit().encode()).digest())
        root = self.src_dir
        for f in self.input_files():
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + _file_digest(f))
        h.update(compiler.identity(_compiler_memo_dir()).encode() + b"\0")
        h.update("\0".join(compiler.flags(self.arch)).encode())
        return h.hexdigest()[:20]

    def file_name(self) -> str:
        return f"{self.unit}{self.suffix}"

    # -- compiling ------------------------------------------------------------------------------------------
    def compile_into(self, out_dir: Path, compiler: Compiler | None = None) -> Path:
        """Build the code object into out_dir; also leaves <unit>.log there (and <unit>.s for AMD, and the
        generated source <unit>.cu/.hip for a generated unit). Raises BuildError."""
        compiler = compiler or self.compiler()
        out_dir = Path(out_dir)
        out = out_dir / self.file_name()
        log = out_dir / f"{self.unit}.log"
        log.write_text("")
        if self.generated:
            src = out_dir / self.source_file_name
            src.write_text(self.translation_unit())
        else:
            src = self.main_source
        try:
            compiler.compile(src, out, self.arch, [self.src_dir], self.src_dir, log)
        except BuildError as e:
            e.source = e.source or src
            raise
        if not out.is_file():
            tail = log.read_text(errors="replace")[-6000:]
            raise BuildError(f"{compiler.name} wrote no code object {out.name} for {self.unit} ({self.arch}):\n{tail}",
                             log=tail, source=src, log_path=log)
        return out


def _prebuilt_dir() -> Path | None:
    env = os.environ.get("FUSEDGEMM_PREBUILT_DIR")
    return Path(env) if env else None


def _prebuilt(spec: BuildSpec) -> Path | None:
    d = _prebuilt_dir()
    if d is None or spec.generated:  # a prebuilt file is named by unit only: fixed units only
        return None
    p = d / spec.arch / spec.file_name()
    return p if p.is_file() else None


def _verbose() -> bool:
    return os.environ.get("FUSEDGEMM_JIT_VERBOSE", "") not in ("", "0")


def _say(msg: str) -> None:
    print(f"fusedgemm: {msg}", file=sys.stderr, flush=True)


def _entry(spec: BuildSpec, compiler: Compiler) -> tuple[Path, str]:
    key = spec.key(compiler)
    return cache_dir() / spec.arch / f"{spec.unit}-{key}", key


def cached_code_object_for(spec: BuildSpec) -> Path | None:
    """The code object of `spec` if it is prebuilt or in the cache, else None (never builds)."""
    pre = _prebuilt(spec)
    if pre is not None:
        return pre
    final, _ = _entry(spec, spec.compiler())
    obj = final / spec.file_name()
    return obj if obj.is_file() else None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def code_object_dir(spec: BuildSpec) -> Path:
    """Directory holding the built code object of `spec` (and its build log), building it if needed."""
    pre = _prebuilt(spec)
    if pre is not None:
        return pre.parent
    compiler = spec.compiler()
    final, key = _entry(spec, compiler)
    if (final / spec.file_name()).is_file():
        return final
    from filelock import FileLock

    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    # flock: released by the kernel when its holder dies, so a killed build never blocks the next one.
    with FileLock(str(final) + ".lock"):
        if (final / spec.file_name()).is_file():  # another process built it while we waited
            return final
        # Leftovers of a build of this key whose process died: only the lock holder creates them.
        for stale in root.glob(f".{spec.unit}-{key}.tmp*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # an entry without its code object (removed by hand): rebuild it
            shutil.rmtree(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.unit}-{key}.tmp", dir=root))
        try:
            why = "cache miss"
            if not spec.generated and _prebuilt_dir() is not None:
                why = f"no prebuilt in {_prebuilt_dir()}, cache miss"
            t0 = time.perf_counter()
            try:
                spec.compile_into(tmp, compiler)
            except BuildError as e:
                failed = _keep_failed(spec, key, tmp, e)
                if _verbose():
                    _say(f"compile {spec.unit} for {spec.arch} ({why}) with {compiler.describe(_compiler_memo_dir())}: "
                         f"FAILED after {time.perf_counter() - t0:.2f} s, see {failed}")
                raise failed_error(spec, compiler, e, failed) from None
            obj = tmp / spec.file_name()
            _fsync(obj)
            os.replace(tmp, final)  # atomic: readers see all of it or none of it
            if _verbose():
                _say(f"compile {spec.unit} for {spec.arch} ({why}) with {compiler.describe(_compiler_memo_dir())}: "
                     f"{time.perf_counter() - t0:.2f} s -> {final / spec.file_name()}")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def _keep_failed(spec: BuildSpec, key: str, tmp: Path, err: BuildError) -> Path:
    """Move a failed build's directory to <cache>/<arch>/failed/<unit>-<key>/ (replacing an older one)."""
    failed = cache_dir() / spec.arch / "failed" / f"{spec.unit}-{key}"
    failed.parent.mkdir(parents=True, exist_ok=True)
    if failed.exists():
        shutil.rmtree(failed, ignore_errors=True)
    os.replace(tmp, failed)
    return failed


def failed_error(spec: BuildSpec, compiler: Compiler, err: BuildError, failed: Path) -> BuildError:
    source = failed / spec.source_file_name if spec.generated else (err.source or spec.main_source)
    log_path = failed / f"{spec.unit}.log"
    log = err.log or (log_path.read_text(errors="replace")[-6000:] if log_path.is_file() else str(err))
    return BuildError(f"building {spec.unit} for {spec.arch} with {compiler.name} failed\n"
                      f"  source: {source}\n  log:    {log_path}\n{log}",
                      log=log, source=source, log_path=log_path, build_dir=failed)


def code_object_for(spec: BuildSpec) -> Path:
    """The code object (.cubin / .hsaco) of `spec`, built on first use."""
    return code_object_dir(spec) / spec.file_name()


def code_object_path(unit: str, arch: str, source: str | None = None) -> Path:
    return code_object_for(BuildSpec(unit, arch, source))


def _epilogue_specs(args, parser) -> list[BuildSpec]:
    """The generated units of --epilogue for each arch x config x input kind (x B layout) x output type."""
    from ..epilogue import EpilogueError, operands, parse
    from ..epilogue.codegen import EpilogueSpec
    from . import kernels
    from .gemm_spec import OUT_CODEGEN, GemmKernel, config_fits

    try:
        expr = parse(args.epilogue)
        dtypes = dict(item.split("=", 1) for item in args.operand_dtype)
        for name, o in operands(expr).items():
            if o.kind != "scalar":
                dtypes.setdefault(name, "f32")
        epi = EpilogueSpec.of(expr, dtypes)
    except (EpilogueError, ValueError) as e:
        parser.error(str(e))
    unknown = sorted(set(args.config or ()) - set(kernels.GEMM_CONFIGS))
    if unknown:
        parser.error(f"--config: unknown tile config(s) {unknown}; expected some of {list(kernels.GEMM_CONFIGS)}")
    outs = args.out_dtype or ["bfloat16"]
    if any(o not in OUT_CODEGEN for o in outs):
        parser.error(f"--out-dtype: expected one of {', '.join(OUT_CODEGEN)}, got {outs}")
    specs = []
    for arch in args.arch or list(SUPPORTED_ARCHES):
        for name, cfg in kernels.GEMM_CONFIGS.items():
            if (args.config and name not in args.config) or arch not in UNIT_ARCHES.get(cfg.unit, (arch,)):
                continue
            if not config_fits(name, epi):
                continue  # the persistent config cannot stage this epilogue's hoisted values
            for kind in args.in_kind or ["fp8", "int8"]:
                if not cfg.serves(kind):
                    continue  # a 16/32-bit-only config (tile_128x256)
                wide = kind in kernels.MATMUL_IN
                if wide and arch == "sm_90a" and not cfg.sm90:
                    continue  # matmul_fused runs on the wgmma configs there
                for layout in ([args.b_layout] if wide else ["nk"]):
                    if layout == "kn" and not (arch == "sm_90a" and kind in ("bf16", "fp16")):
                        continue  # [K, N] kernels: sm_90a, 16-bit (elsewhere B is transposed at call time)
                    for out in outs:
                        if out.startswith("float8") and (wide or out != ("float8_e4m3fnuz" if arch == "gfx942"
                                                                         else "float8_e4m3fn")):
                            continue  # each arch writes its own fp8 variant; matmul_fused writes no fp8
                        k = GemmKernel(arch, name, kind, OUT_CODEGEN[out], epi, layout)
                        source = k.source()
                        specs.append(BuildSpec(k.unit, arch, source) if source else BuildSpec(k.unit, arch))
    return specs


def main(argv: list[str] | None = None) -> int:
    """Build code objects ahead of time (default: every fixed unit for every arch, into the cache)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m fusedgemm.runtime.build", description=main.__doc__)
    p.add_argument("--arch", action="append", choices=list(SUPPORTED_ARCHES), help="default: all")
    p.add_argument("--unit", action="append", choices=list(UNITS), help="default: all")
    p.add_argument("--source", type=Path, help="build this generated translation unit (HIP-flavoured C++) instead")
    p.add_argument("--name", help="unit name of --source (default: the file's stem)")
    p.add_argument("--out", type=Path, help="write <out>/<arch>/<unit>.* (a FUSEDGEMM_PREBUILT_DIR); default: the cache")
    g = p.add_argument_group("gemm_a8 / matmul_fused kernels of an epilogue expression (fusedgemm.epilogue), into "
                             "the cache; matmul_fused's keyword form is checks.matmul_expression(...)")
    g.add_argument("--epilogue", metavar="TEXT", help='e.g. "silu(acc * n_vec(s)) + aux(res)"')
    g.add_argument("--operand-dtype", action="append", default=[], metavar="NAME=DT",
                   help="element type of a vector / aux operand: f32, bf16, f16 (vectors also dyn); default f32")
    g.add_argument("--out-dtype", action="append", metavar="DTYPE",
                   help="bfloat16 float16 float32 float8_e4m3fn float8_e4m3fnuz (default: bfloat16)")
    g.add_argument("--config", action="append", help="tile config (default: every config of the arch)")
    g.add_argument("--in-kind", action="append", choices=["fp8", "int8", "bf16", "fp16", "tf32", "f32x3"],
                   help="fp8 / int8: gemm_a8; bf16 / fp16 / tf32 / f32x3 (exact fp32, sm_90a): matmul_fused "
                        "(default: fp8 and int8)")
    g.add_argument("--b-layout", choices=["nk", "kn"], default="nk",
                   help="matmul_fused's B: [N, K] (default) or [K, N] (sm_90a, bf16 / fp16)")
    args = p.parse_args(argv)
    if args.epilogue:
        specs = _epilogue_specs(args, p)
    elif args.source:
        text = args.source.read_text()
        specs = [BuildSpec(args.name or args.source.stem, arch, text) for arch in args.arch or list(SUPPORTED_ARCHES)]
    else:
        specs = [BuildSpec(unit, arch) for arch in args.arch or list(SUPPORTED_ARCHES)
                 for unit in args.unit or units_for(arch) if unit in units_for(arch)]
    for spec in specs:
        try:
            if args.out:
                d = args.out.resolve() / spec.arch
                d.mkdir(parents=True, exist_ok=True)
                t0 = time.perf_counter()
                print(spec.compile_into(d))
                if _verbose():
                    _say(f"compile {spec.unit} for {spec.arch} (ahead of time) with "
                         f"{spec.compiler().describe(_compiler_memo_dir())}: {time.perf_counter() - t0:.2f} s")
            else:
                print(code_object_for(spec))
        except BuildError as e:
            print(e, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
