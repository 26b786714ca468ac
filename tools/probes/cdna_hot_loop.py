"""The K loop of each CDNA kernel, read from its code object (no GPU): per iteration, one wave's MFMAs, vector
loads and bytes, LDS ops, SALU / VALU, waits, branches; the kernel descriptor's VGPRs / AGPRs / LDS.

    python tools/probes/cdna_hot_loop.py                 # a readable table, every arch x config x kind
    python tools/probes/cdna_hot_loop.py --table > pkg/fusedgemm/plan/cdna_hot_loops.txt   # plan/cdna_model.py's table
    python tools/probes/cdna_hot_loop.py --listing gfx942 portable_128x128 fp8   # the loop's instructions
    python tools/probes/cdna_hot_loop.py --listing gfx942 whole_k_cdna_lds_128x128 fp8   # K in whole K blocks
    python tools/probes/cdna_hot_loop.py --listing gfx950 cdna_lds_128x128 fp8block      # block-scaled fp8
    python tools/probes/cdna_hot_loop.py --mca gfx942 portable_128x128 fp8       # llvm-mca-19 on the loop body
    python tools/probes/cdna_hot_loop.py --mca-summary                            # one line per gfx942 kernel

A CDNA LDS config has two kernels (cdna_gemm.hpp): <config> for any K and whole_k_<config> for K filling whole K
blocks (no K-edge test in its loads), the one the host launches, and the model predicts, for such K (every LLM
shape). The kind fp8block is gemm_a8's block-scaled fp8 (blockscale.py: PortableBlockScaled<Config>, a generated unit
with the bias + SiLU preset epilogue; the plan of such a call is the per-channel fp8 one), on every config that has a
block-scaled kernel, whole-K ones included: its loop adds the scale loads and each partial tile's scaled add to the
fp8 loop. The kernels are the package's own AMD builds (clang, FUSEDGEMM_CACHE_DIR), decoded by the emulator's loader
(the listing re-assembled and proven equal to the object's bytes). The loop is found as the natural loop with the
most MFMAs (plan/cdna_model.py's loop_range). llvm-mca (Debian's llvm-19 knows gfx940-942, not gfx950) models one
wave's in-order issue through LLVM's SI scheduling model: per-instruction latency and the resource each occupies
(HWXDL for MFMAs, HWVMEM, HWLGKM, HWSALU, HWVALU); it knows nothing of other waves, of memory latency beyond a fixed
figure, of caches or of the vmcnt waits' real cost.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys

from fusedgemm.plan import cdna_model as cm

from fusedgemm.plan.cdna import CONFIGS  # the configs the plan ranks


def kernels_of(configs) -> tuple[str, ...]:
    """Every config's kernel, and the whole-K-block kernel of the LDS-staged ones."""
    return (*configs, *(cm.tile_configs.WHOLE_K_PREFIX + c for c in configs
                        if isinstance(cm.tile_configs.CONFIGS[c], cm.tile_configs.CdnaTile)))


KERNELS = kernels_of(CONFIGS)
ARCHES = ("gfx942", "gfx950")
OUT = {"fp8": "bf16", "int8": "bf16", "bf16": "bf16", "fp16": "fp16", "tf32": "fp32"}
ALL_KINDS = (*cm.KINDS, *cm.BLOCK_KINDS)
TABLE_HEADER = """\
# The K loops of the CDNA kernels, one wave, one iteration (plan/cdna_model.py's HOT_LOOPS), read from the package's
# AMD code objects by `python tools/probes/cdna_hot_loop.py --table > pkg/fusedgemm/plan/cdna_hot_loops.txt`;
# tests/test_cdna_model.py re-reads them where the AMD build runs. Epilogue none (gemm_a8) / acc (matmul_fused);
# kind fp8block: gemm_a8's block-scaled fp8 with bias + SiLU. Columns: arch kernel kind mfma-mnemonic mfma-count
# vmem-loads vmem-bytes lds-loads lds-load-bytes (global -> LDS) lds-ops lds-bytes salu valu smem waitcnt barrier
# branch nop steps vgprs agprs kernel-lds-bytes
"""


def kernel(arch: str, kernel_name: str, kind: str):
    """The decoded kernel (emulator loader) of gemm_a8 (8-bit kinds, epilogue none; fp8block: block-scaled fp8,
    bias + SiLU) or matmul_fused (acc); kernel_name: a config, or whole_k_<config>."""
    import fusedgemm.epilogue as E
    from fusedgemm.epilogue.codegen import EpilogueSpec
    from fusedgemm.epilogue.presets import spec_for_activation
    from fusedgemm.runtime.gemm_spec import GemmKernel, preset_kernel
    from fusedgemm.testing.emulator.runner import CodeObject

    config = cm.config_of(kernel_name)
    whole = kernel_name != config
    if kind in cm.BLOCK_KINDS:
        spec = GemmKernel(arch, config, cm.base_kind(kind), "bf16", spec_for_activation("silu"), "nk",
                          block_scaled=True, whole_k_blocks=whole)
    elif kind in ("fp8", "int8"):
        spec = preset_kernel(arch, config, kind, "bf16", "none", whole_k_blocks=whole)
    else:
        spec = GemmKernel(arch, config, kind, OUT[kind], EpilogueSpec.of(E.parse("acc"), {}), whole_k_blocks=whole)
    return CodeObject.build(spec.unit, arch, spec.source()).kernel(spec.kernel_name)


def hot_loop(arch: str, kernel_name: str, kind: str) -> cm.HotLoop:
    k = kernel(arch, kernel_name, kind)
    steps, prefetch = cm.loop_shape(arch, cm.config_of(kernel_name), kind)
    meta = k.metadata
    agprs = int(meta.get(".agpr_count", 0))
    vgprs = k.descriptor.accum_offset if agprs else int(meta.get(".vgpr_count", 0))
    return cm.analyse(k.instructions, steps=steps, prefetch=prefetch, vgprs=vgprs, agprs=agprs,
                      lds_kernel_bytes=k.lds_bytes)


def serves(kernel_name: str, kind: str) -> bool:
    """Whether the kernel exists for the kind: the config serves it; block-scaled, it has a block-scaled kernel."""
    config = cm.config_of(kernel_name)
    if kind in cm.BLOCK_KINDS:
        from fusedgemm.blockscale import AMD_BLOCK_CONFIGS

        return config in AMD_BLOCK_CONFIGS
    return kind in cm.tile_configs.CONFIGS[config].in_kinds


def loop_text(arch: str, config: str, kind: str) -> list[str]:
    k = kernel(arch, config, kind)
    a, b = cm.loop_range(k.instructions)
    return [i.text for i in k.instructions[a:b + 1]]


def mca(arch: str, config: str, kind: str) -> str:
    tool = shutil.which("llvm-mca-19")
    if tool is None:
        return "llvm-mca-19 not found (apt-get install llvm-19)"
    body = [t for t in loop_text(arch, config, kind) if not t.startswith(("s_cbranch", "s_branch"))]
    p = subprocess.run([tool, "-mtriple=amdgcn", f"-mcpu={arch}", "-iterations=100"], input="\n".join(body) + "\n",
                       capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else p.stderr


def mca_summary(text: str) -> str:
    """One line of llvm-mca's report: its cycles per iteration and each resource's busy cycles per iteration."""
    total = re.search(r"Total Cycles:\s+(\d+)", text)
    iters = re.search(r"Iterations:\s+(\d+)", text)
    names = re.findall(r"\[\d+\]\s+- (HW\w+)", text)
    m = re.search(r"Resource pressure per iteration:\n.*\n(.*)", text)
    if not (total and iters and m):
        return text.strip().splitlines()[-1] if text.strip() else "no output"
    press = [0.0 if x == "-" else float(x) for x in m.group(1).split()]
    per = int(total.group(1)) / int(iters.group(1))
    busy = ", ".join(f"{n[2:]} {p:.0f}" for n, p in zip(names, press) if p)
    return f"{per:.0f} cycles/iteration (llvm-mca units); busy: {busy}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--listing", nargs=3, metavar=("ARCH", "CONFIG", "KIND"))
    ap.add_argument("--mca", nargs=3, metavar=("ARCH", "CONFIG", "KIND"))
    ap.add_argument("--mca-summary", action="store_true")
    ap.add_argument("--kinds", default=",".join(ALL_KINDS))
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated (default: the plan's)")
    ap.add_argument("--no-header", action="store_true", help="--table rows only (to append a config's)")
    args = ap.parse_args(argv)
    if args.listing:
        print("\n".join(loop_text(*args.listing)))
        return 0
    if args.mca:
        print(mca(*args.mca))
        return 0
    kinds = args.kinds.split(",")
    if args.mca_summary:
        for config in kernels_of(args.configs.split(",")):
            for kind in (k for k in kinds if serves(config, k)):
                print(f"gfx942 {config:26} {kind:8} {mca_summary(mca('gfx942', config, kind))}")
        return 0
    if args.table:
        print("" if args.no_header else TABLE_HEADER, end="")
    else:
        print(f"{'arch':7} {'kernel':26} {'kind':8} {'MFMA':>22} {'cyc':>5} {'vmem':>4} {'KB':>5} {'lds':>3} "
              f"{'salu':>4} {'valu':>4} {'wait':>4} {'br':>3} {'steps':>5} {'vgpr':>4} {'agpr':>4} {'LDS':>5} "
              f"{'B/MFMA':>6}")
    for arch in ARCHES:
        for config in kernels_of(args.configs.split(",")):
            for kind in (k for k in kinds if serves(config, k)):
                h = hot_loop(arch, config, kind)
                if args.table:
                    print(cm.table_row(arch, config, kind, h))
                    continue
                (mn, n), = h.mfma
                print(f"{arch:7} {config:26} {kind:8} {re.sub('^v_mfma_', '', mn) + ' x' + str(n):>22} "
                      f"{h.mfma_cycles(arch):5} {h.vmem_loads:4} {h.vmem_load_bytes / 1024:5.1f} {h.lds_ops:3} "
                      f"{h.salu:4} {h.valu:4} {h.waitcnt:4} {h.branch:3} {h.steps:5} {h.vgprs:4} {h.agprs:4} "
                      f"{h.lds_kernel_bytes:5} {h.vmem_load_bytes / n:6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
