"""Which code object and kernel serve a GEMM call: (arch, tile config, input kind, output type, epilogue).

One kernel family, two ops: gemm_a8 (input kinds fp8 / int8, B preshuffled) and matmul_fused (bf16 / fp16 /
tf32, B a plain row-major [N, K] matrix); the kernel templates tell them apart by InTraits<In> (platform.hpp).
Preset epilogues (the named ones, bf16/fp16 out) live in the ahead-of-time units hip_src/portable_gemm.hip and
sm90_gemm.hip. Any other (epilogue expression, output type) gets a generated translation unit of one
kernel -- the same kernel template, the epilogue functor from fusedgemm.epilogue.codegen -- compiled just in
time (runtime/build.py: cached by spec, source and compiler, under a file lock).
"""
from __future__ import annotations

import dataclasses

from ..epilogue import codegen
from ..epilogue.presets import ACTIVATIONS, spec_for_activation
from . import kernels, tile_configs

# Output types by torch dtype name; the fp8 variant an arch writes is its input variant (FP8 on the arch).
OUT_CODEGEN = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8e4m3fn",
               "float8_e4m3fnuz": "fp8e4m3fnuz"}
_OUT_SHORT = {"bf16": "bf16", "fp16": "f16", "fp32": "f32", "fp8e4m3fn": "e4m3", "fp8e4m3fnuz": "e4m3fnuz"}
_IN_TYPE = {"fp8": "fg::Fp8E4M3", "int8": "fg::Int8", "bf16": "fg::Bf16", "fp16": "fg::Fp16", "tf32": "fg::Tf32",
            "f32x3": "fg::F32x3"}
# matmul_fused's input kinds (always generated kernels: no ahead-of-time unit holds them).
MATMUL_IN = kernels.MATMUL_IN


@dataclasses.dataclass(frozen=True)
class GemmKernel:
    arch: str
    config: str  # a name of kernels.GEMM_CONFIGS (runtime/tile_configs.py)
    in_kind: str  # fp8 | int8 (gemm_a8) | bf16 | fp16 | tf32 (matmul_fused)
    out: str  # codegen output type: bf16 fp16 fp32 fp8e4m3fn fp8e4m3fnuz
    epilogue: codegen.EpilogueSpec
    b_layout: str = "nk"  # "kn": B [K, N], N contiguous (matmul_fused, 16-bit kinds on sm_90a: MnMajorB<Config>)
    # gemm_a8's block-scaled fp8 (blockscale.py): BlockScaled<Config>, Sm90GemmBlockArgs; always a generated unit
    block_scaled: bool = False
    # a grouped GEMM's kernel (grouped.py, gemm_groups.hpp): *GroupedArgs, always a generated unit
    grouped: bool = False
    # the CDNA LDS configs' kernel for K filling whole K blocks (CdnaWholeKBlocks<Config>, cdna_gemm.hpp): no
    # K-edge test in its loads; a call takes it where whole_k_blocks(config, in_kind, K) says so
    whole_k_blocks: bool = False

    @property
    def cfg(self) -> kernels.TileConfig:
        return kernels.GEMM_CONFIGS[self.config]

    @property
    def smem(self) -> int:
        """Dynamic shared-memory bytes per block of the kernel (0: static LDS only, AMD)."""
        if self.block_scaled and self.cfg.sm90:
            return kernels.block_scaled_smem(self.config)
        if self.grouped and self.cfg.persistent:
            return kernels.grouped_persistent_smem(self.config)
        return self.cfg.smem

    @property
    def preset(self) -> str | None:
        """The activation of the preset kernel that serves this spec ahead of time, or None (generated)."""
        if (self.in_kind in MATMUL_IN or self.out not in ("bf16", "fp16") or self.block_scaled or self.grouped
                or not self.cfg.presets):
            return None
        return _preset_of(self.epilogue)

    @property
    def unit(self) -> str:
        """The source unit: an ahead-of-time unit, or a generated one named after the spec."""
        if self.preset is not None:
            return self.cfg.unit
        if self.in_kind in MATMUL_IN:  # matmul_fused's: "matmul_" ("matmul_sm90_" on the sm_90a template)
            return (f"matmul{'_sm90' if self.cfg.sm90 else ''}_{self.in_kind}{self._kn}_{_OUT_SHORT[self.out]}_"
                    f"{self._wk}{self.config}{self._g}_e{self.epilogue.key}")
        return (f"{self.cfg.unit}_{self.in_kind}_{_OUT_SHORT[self.out]}_{self._wk}{self.config}{self._bs}{self._g}_"
                f"e{self.epilogue.key}")

    @property
    def kernel_name(self) -> str:
        if self.preset is not None:
            return kernels.gemm_a8_kernel_name(self.in_kind, "bfloat16" if self.out == "bf16" else "float16",
                                               self.preset, self.config, self.whole_k_blocks)
        if self.in_kind in MATMUL_IN:
            return (f"fg_matmul_{self.in_kind}{self._kn}_{_OUT_SHORT[self.out]}{self._g}_e{self.epilogue.key}_"
                    f"{self._wk}{self.config}")
        return (f"fg_gemm_a8_{kernels.GEMM_A8_IN[self.in_kind]}_{_OUT_SHORT[self.out]}{self._bs}{self._g}_"
                f"e{self.epilogue.key}_{self._wk}{self.config}")

    @property
    def _wk(self) -> str:
        return tile_configs.WHOLE_K_PREFIX if self.whole_k_blocks else ""

    @property
    def _kn(self) -> str:
        return "_kn" if self.b_layout == "kn" else ""

    @property
    def _bs(self) -> str:
        return "_bs" if self.block_scaled else ""

    @property
    def _g(self) -> str:
        return "_grouped" if self.grouped else ""

    @property
    def signature(self) -> kernels.Signature:
        return kernels.gemm_signature(self.cfg.unit, self.epilogue, self.block_scaled, self.grouped)

    def source(self) -> str | None:
        """The generated translation unit (HIP flavoured, like hip_src), or None for a preset kernel."""
        if self.preset is not None:
            return None
        out_type = codegen.OUT_TYPES[self.out][0]
        epi = f"fg::{self.epilogue.struct_name}<{out_type}>"
        cfg = f"fg::{tile_configs.cpp_type(self.config)}"
        sm90 = self.cfg.sm90
        if self.whole_k_blocks:
            if not kernels.has_whole_k_kernels(self.config):
                raise ValueError(f"whole-K-block kernels are the CDNA LDS configs' (cdna_gemm.hpp), not {self.config}")
            cfg = f"fg::CdnaWholeKBlocks<{cfg}>"
        if self.b_layout == "kn":
            if not (sm90 and self.in_kind in ("bf16", "fp16")):
                raise ValueError(f"B as [K, N] runs on the sm_90a wgmma configs for bf16 / fp16 only, not {self.arch} "
                                 f"{self.config} {self.in_kind}")
            cfg = f"fg::MnMajorB<{cfg}>"
        args = f"fg::{'Sm90GemmArgs' if sm90 else 'PortableGemmArgs'}<{epi}>"
        group = self.epilogue.out_group
        width = group * (2 if self.epilogue.pairs else 1)  # GEMM columns of one group (a gate / up pair: twice)
        if group and not tile_configs.holds_groups(self.config, self.arch, width):
            raise ValueError(f"group-quantised outputs (out_group={group}) run on configs whose block holds {width} "
                             f"columns: the AMD LDS configs (cdna_gemm.hpp) and sm_90a's CTA-per-tile unswapped ones "
                             f"(sm90_gemm_stores.hpp), not {self.arch} {self.config}")
        m_off, ep_off = kernels.gemm_arg_offsets(self.cfg.unit, self.epilogue)
        bs_check = ""
        if self.block_scaled:
            portable = not sm90 and self.arch in ("gfx942", "gfx950")  # register-direct or CDNA LDS configs
            if not ((sm90 or portable) and self.in_kind == "fp8" and self.b_layout == "nk"):
                raise ValueError(f"block-scaled kernels are fp8 on the sm_90a wgmma configs and the AMD ones, not "
                                 f"{self.arch} {self.config} {self.in_kind}")
            cfg = f"fg::{'BlockScaled' if sm90 else 'PortableBlockScaled'}<{cfg}>"
            args = f"fg::{'Sm90GemmBlockArgs' if sm90 else 'PortableGemmBlockArgs'}<{epi}>"
            bs_type = kernels.gemm_args_type(self.cfg.unit, self.epilogue, True)
            bs_off = bs_type.offsets[[f for f, _c in bs_type.fields].index("bs_a")]
            bs_check = f" && __builtin_offsetof({args}, bs) == {bs_off} && sizeof({args}) == {bs_type.size}"
        body = "sm90_gemm_block_scaled" if self.block_scaled else "sm90_gemm"
        extra = ", args.bs" if self.block_scaled else ""
        if self.grouped:
            cfg_t = self.cfg
            unfit = (cfg_t.swap_ab or cfg_t.pair_b or cfg_t.tile_loop
                     or (cfg_t.persistent and (self.block_scaled or group or not sm90)))
            if self.b_layout != "nk" or unfit:
                raise ValueError(f"grouped kernels run on CTA-per-tile configs with B as [N, K] and on the sm_90a "
                                 f"persistent ones without pairs, block scales or out_group, not {self.config} "
                                 f"({self.b_layout}{', block-scaled' if self.block_scaled else ''}"
                                 f"{', out_group' if group else ''})")
            if cfg_t.persistent:
                cfg = f"fg::GroupedPersistent<{cfg}>"
            both = self.block_scaled
            kind = (("Sm90GemmGroupedBlockArgs" if both else "Sm90GemmGroupedArgs") if sm90
                    else "PortableGemmGroupedBlockArgs" if both else "PortableGemmGroupedArgs")
            args = f"fg::{kind}<{epi}>"
            g_type = kernels.gemm_args_type(self.cfg.unit, self.epilogue, block_scaled=both, grouped=True)
            g_off = g_type.offsets[[f for f, _c in g_type.fields].index("grp_index")]
            bs_check = f" && __builtin_offsetof({args}, groups) == {g_off} && sizeof({args}) == {g_type.size}"
            body, extra = "sm90_gemm_grouped", ", args.bs, args.groups" if both else ", args.groups"
        # NVRTC's front end has no __builtin_offsetof: there the metadata check alone holds the layout.
        layout = (f"#if !defined(__CUDACC_RTC__)\n  static_assert(__builtin_offsetof({args}, M) == {m_off} && "
                  f"__builtin_offsetof({args}, ep) == {ep_off}{bs_check}, \"argument packing layout\");\n#endif\n")
        if sm90:
            header = "sm90_gemm.hpp"
            smem = (f"  static_assert({cfg}::kSmemBytes <= {self.smem}, \"the host launches with {self.smem} bytes of "
                    f"dynamic shared memory\");\n")
            entry = (f'extern "C" __global__ void __launch_bounds__({cfg}::kThreads, {cfg}::kMinBlocksPerSm)\n'
                     f"{self.kernel_name}(const __grid_constant__ {args} args) {{\n{layout}{smem}"
                     f"  fg::{body}<{_IN_TYPE[self.in_kind]}, {epi}, {cfg}>(args.a_map, args.b_map, args.M, "
                     f"args.N, args.K, args.ep{extra});\n}}\n")
            guard = ("#if defined(FG_NVIDIA)\n", "#endif\n")
        else:
            header = "portable_gemm.hpp"
            body = ("grouped_block_scaled" if self.grouped and self.block_scaled
                    else "block_scaled" if self.block_scaled else "grouped_tile" if self.grouped else "tile")
            entry = (f'extern "C" __global__ void __launch_bounds__({cfg}::kWarps * '
                     f"fg::arch::MmaAtom<{_IN_TYPE[self.in_kind]}>::kWarpSize)\n"
                     f"{self.kernel_name}(const {args} args) {{\n{layout}"
                     f"  fg::portable_gemm_{body}<{_IN_TYPE[self.in_kind]}, {epi}, "
                     f"{cfg}>(args.a, args.b, args.M, args.N, args.K, args.ep{extra});\n}}\n")
            guard = ("", "")
        op = "matmul_fused" if self.in_kind in MATMUL_IN else "gemm_a8"
        return (f"// GENERATED by fusedgemm.runtime.gemm_spec for {self.arch}: {op} {self.in_kind} -> "
                f"{self.out}, config {self.config}\n"
                f'#include "include/fusedgemm/{header}"\n\n{guard[0]}namespace fg {{\n\n'
                f"{codegen.render_functor(self.epilogue)}\n}}  // namespace fg\n\n{entry}{guard[1]}")


_PRESETS: dict = {}


def _preset_of(epi: codegen.EpilogueSpec) -> str | None:
    """The activation whose preset expression `epi` is (the table is built once), or None."""
    if not _PRESETS:
        _PRESETS.update({spec_for_activation(act): act for act in ACTIVATIONS})
    return _PRESETS.get(epi)


def whole_k_blocks(config: str, in_kind: str, k: int) -> bool:
    """Whether a call with K = `k` elements of `in_kind` on `config` runs its whole-K-block kernel: a CDNA LDS config
    (cdna_gemm.hpp) and K a positive multiple of its K block (128 bytes: fp8 / int8 K % 128 == 0, bf16 / fp16
    K % 64 == 0). That kernel has no K-edge test in its loads; any other K needs the test."""
    return tile_configs.fills_k_blocks(config, k * kernels.IN_BYTES[in_kind])


def config_fits(config: str, epi: codegen.EpilogueSpec) -> bool:
    """Whether `config` can run epilogue `epi`: the persistent config stages kBlockM + 2 kBlockN floats of the
    tile's hoisted row and column values (sm90_gemm_common.hpp, kStagedFloats); every other config runs anything."""
    if not kernels.GEMM_CONFIGS[config].persistent:
        return True
    rows, cols = codegen.hoisted_counts(epi)
    return rows + cols <= 3


def preset_kernel(arch: str, config: str, in_kind: str, out: str, act: str,
                  whole_k_blocks: bool = False) -> GemmKernel:
    return GemmKernel(arch, config, in_kind, out, spec_for_activation(act), whole_k_blocks=whole_k_blocks)


__all__ = ["GemmKernel", "MATMUL_IN", "OUT_CODEGEN", "config_fits", "preset_kernel", "whole_k_blocks"]
