"""The one place the emulator asks the package for code objects (runtime/build.py, runtime/kernels.py,
runtime/gemm_spec.py). A rename of a unit, a spec module or a kernel name is fixed here and nowhere else."""
from __future__ import annotations

from pathlib import Path


def code_object(unit: str, arch: str, source: str | None = None) -> Path:
    """The hsaco of a source unit (or of a generated translation unit `source`), built on first use. The build
    leaves the assembler listing it assembled (<unit>.s) next to it."""
    from ...runtime.build import BuildSpec, code_object_for

    return code_object_for(BuildSpec(unit, arch, source))


def listing_of(hsaco: Path) -> Path | None:
    """The assembler listing the build of `hsaco` produced, if it is there."""
    p = Path(hsaco).with_suffix(".s")
    return p if p.is_file() else None


def assembler_command(arch: str) -> list[str]:
    """clang's integrated assembler as the package's AMD build runs it (the same binary)."""
    from ...runtime.compilers import compiler_for

    clang = compiler_for(arch)
    return [*clang.clang, "-cc1as", "-triple", "amdgcn-amd-amdhsa", "-target-cpu", arch]


def cache_root() -> Path:
    from ...runtime.build import cache_dir

    return cache_dir()


def _spec_module():
    """The module of the GEMM kernel specs."""
    from ...runtime import gemm_spec

    return gemm_spec


def _configs() -> dict:
    from ...runtime import kernels

    return kernels.GEMM_CONFIGS


def gemm_a8_kernel(arch: str, config: str, in_kind: str, out: str, act: str, k: int | None = None):
    """A preset gemm_a8 kernel: (unit, kernel name, Signature, generated source or None).
    out: codegen output name (bf16, fp16, ...); act: none | relu | silu | gelu | gelu_erf; k: the call's K, where
    the kernel depends on it as the host's launch does (a CDNA LDS config's whole-K-block kernel), else None: the
    kernel for any K."""
    mod = _spec_module()
    whole = k is not None and mod.whole_k_blocks(config, in_kind, k)
    spec = mod.preset_kernel(arch, config, in_kind, out, act, whole_k_blocks=whole)
    return spec.unit, spec.kernel_name, spec.signature, spec.source()


def gemm_a8_expression_kernel(arch: str, config: str, in_kind: str, out: str, epi_spec):
    """A generated gemm_a8 / matmul_fused kernel of an EpilogueSpec: (unit, kernel name, Signature, source)."""
    mod = _spec_module()
    k = mod.GemmKernel(arch, config, in_kind, out, epi_spec)
    return k.unit, k.kernel_name, k.signature, k.source()


def tile_config(config: str):
    return _configs()[config]


def preset_values(bias_ptr: int, bias_kind: int, sa_ptr: int, sa_stride: int, sb_ptr: int, sb_stride: int,
                  alpha: float) -> dict:
    from ...checks import preset_values as pv

    return pv(bias_ptr, bias_kind, sa_ptr, sa_stride, sb_ptr, sb_stride, alpha)


def amd_gemm_configs(arch: str) -> list[str]:
    """Names of the GEMM tile configs with preset kernels for `arch` (the AMD units'), smallest tile first."""
    from ...runtime.build import units_for

    units = set(units_for(arch))
    cfgs = [(c.block_m * c.block_n, n) for n, c in _configs().items() if c.unit in units and c.presets]
    return [n for _s, n in sorted(cfgs)]


def quantize_rows_kernel(x_dtype, q_dtype, vector: bool):
    """(unit, kernel name, Signature) of quantize_rows for torch dtypes."""
    from ...runtime import kernels

    name = kernels.quantize_rows_kernel_name(str(x_dtype).removeprefix("torch."), str(q_dtype).removeprefix("torch."),
                                             vector)
    return "quantize_rows", name, kernels.QUANTIZE_ROWS


def quantize_rows_plan(m: int, k: int, element_size: int, vector: bool) -> tuple[int, int]:
    """(threads, blocks) the package launches quantize_rows with."""
    from ... import quant

    return quant.plan_quantize_rows(m, k, element_size, vector)
