#!/usr/bin/env python3
"""Timing probes of the sm_90a GEMM kernel (run on the GPU machine): which stage bounds it.

The shipped kernels carry no probe code. This script copies hip_src/ into a scratch directory, applies
sm90_probes.patch (beside it: the probe modes as a template parameter of the kernels, and the timeline stamps behind
FG_PROBE_STAMPS / FG_PROBE_KSTAMPS), renames it to CUDA as ci/hipify.py does, and builds the kernel of
sm90_gemm.hpp with each probe mode (normal, no MMAs, no copies, plain row-major B through a swizzled 2-D map, no
copies with B read through a swizzled descriptor) into scratch cubins, then times them, same process, on decode
and large shapes. Results are garbage in the probe modes; only the times matter. When a change to the kernel
headers breaks the patch, refresh it: apply it by hand (`patch -p1 --merge`), fix the conflicts and write
`diff -ru` of the trees back into sm90_probes.patch.

    python3 tools/probes/probe_sm90.py                      # build here (nvcc) and time
    python3 tools/probes/probe_sm90.py --build-only DIR     # build the cubins into DIR (no GPU needed)
    python3 tools/probes/probe_sm90.py --cubins DIR         # time cubins built earlier
    python3 tools/probes/probe_sm90.py --clocks 2 ...       # also: each kernel back to back for 2 s, with the SM clock
                                                  # and board power nvidia-smi reads meanwhile (and the same
                                                  # for torch's _scaled_mm / _int_mm at each shape)
    python3 tools/probes/probe_sm90.py --stamps ...         # also: a timeline of each case's normal kernel (SiLU
                                                  # epilogue) from per-CTA timestamps (FG_PROBE_STAMPS): CTA
                                                  # start-up, pipeline fill, main loop (cycles against the
                                                  # tensor core's), epilogue, gap to the SM's next CTA
"""
import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kblock_timeline  # noqa: E402  (beside this script)

PATCH = Path(__file__).resolve().parent / "sm90_probes.patch"

MODES = {"normal": 0, "no_mma": 1, "no_copy": 2, "plain_b": 3, "no_copy_plain_b": 4}

def _sm90_8bit_configs() -> dict[str, str]:
    """Config name -> C++ type of every sm_90a config with 8-bit kernels (runtime/tile_configs.py)."""
    from fusedgemm.runtime import tile_configs

    return {name: f"fg::{tile_configs.cpp_type(name)}" for name, t in tile_configs.CONFIGS.items()
            if t.unit == "sm90_gemm" and "fp8" in t.in_kinds}


CFGS = _sm90_8bit_configs()
# Probe kernel input name -> (C++ input type, the input kind of runtime/gemm_spec.py).
INPUTS = {"fp8": ("fg::Fp8E4M3", "fp8"), "i8": ("fg::Int8", "int8")}
# Build variants: name -> nvcc defines. An A/B of two code paths in one process adds one here (with the path behind
# the define in a patch of its own, applied after sm90_probes.patch). The A/B variants of past experiments (old
# descriptors, unroll 4, epilogue rows, store tests, last-tile help, no staging) left with their patch: git history.
VARIANTS = {"default": []}
# A variant name not in VARIANTS is a plain build under that name: an A/B of two trees in one process builds
# `--build-only DIR --variants base` in a checkout of the other tree, copies its probe_base.cubin beside this
# tree's cubins and times `--cubins DIR --variants default base`.
# The timeline build (--stamps): a variant of its own, with the SiLU epilogue the bench times.
STAMPS_VARIANT = ("stamps", ["-DFG_PROBE_STAMPS"])
# The per-K-block timeline build (--kstamps, persistent kernels; kblock_timeline.py).
KSTAMPS_VARIANT = ("kstamps", ["-DFG_PROBE_KSTAMPS"])
# The preset epilogue each build variant's kernels run (bf16 out): the identity one, except the timelines'.
VARIANT_ACT = {STAMPS_VARIANT[0]: "silu", KSTAMPS_VARIANT[0]: "silu"}
ACT = "none"  # the other variants' activation (--act)
OUT = "bf16"
PRELUDE = """
#include "{root}/include/fusedgemm/epilogue_presets.hpp"
#include "{root}/include/fusedgemm/sm90_gemm.hpp"
#if defined(FG_PROBE_STAMPS)
extern "C" __global__ void probe_set_stamps(unsigned long long* p) {{ fg::fg_probe_stamps = p; }}
#endif
#if defined(FG_PROBE_KSTAMPS)
extern "C" __global__ void probe_set_kstamps(unsigned* p) {{ fg::fg_probe_kstamps = p; }}
#endif
"""
# As FG_SM90_GEMM_ENTRY in hip_src/sm90_gemm.hip, with a probe mode: the preset kernels' one argument
# (Sm90GemmArgs: two tensor maps, M, N, K, the epilogue's Params), so probe_spec(...).signature packs it.
ENTRY = """
extern "C" __global__ void __launch_bounds__({cfg}::kThreads, {cfg}::kMinBlocksPerSm) {name}(
    const __grid_constant__ fg::Sm90GemmArgs<{epi}> args) {{
  fg::sm90_gemm<{in_t}, {epi}, {cfg}, {mode}>(args.a_map, args.b_map, args.M, args.N, args.K, args.ep);
}}
"""
L2_PROMOTION = {"0": 0, "64": 1, "128": 2, "256": 3}  # CUtensorMapL2promotion by bytes
# label: (M, N, K, config, split-K, input, probe modes timed)
CASES = {
    "qkv M=1 swap_16x128 s4": (1, 6144, 4096, "swap_16x128", 4, "fp8", ("normal", "no_mma", "no_copy")),
    "o_proj M=1 swap_16x128 s4": (1, 4096, 4096, "swap_16x128", 4, "fp8", ("normal", "no_mma", "no_copy")),
    "moe_dn M=1 swap_16x128 s4": (1, 7168, 2048, "swap_16x128", 4, "fp8", ("normal", "no_mma", "no_copy")),
    "down M=1 swap_16x128 s4": (1, 4096, 14336, "swap_16x128", 4, "fp8", ("normal", "no_mma", "no_copy")),
    "gate_up M=1 swap_16x128 s1": (1, 28672, 4096, "swap_16x128", 1, "fp8", ("normal", "no_mma", "no_copy")),
    "qkv M=64 tile_64x128 s4": (64, 6144, 4096, "tile_64x128", 4, "fp8", ("normal",)),
    "down M=64 tile_64x128 s4": (64, 4096, 14336, "tile_64x128", 4, "fp8", ("normal",)),
    "o_proj M=48 tile_64x128 s4": (48, 4096, 4096, "tile_64x128", 4, "fp8", ("normal",)),
    "N12288 K1536 M16384 persistent_128x128_epi7_1chain":
        (16384, 12288, 1536, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "N2560 K1536 M1024 persistent_128x128_epi7_1chain":
        (1024, 2560, 1536, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "N5120 K768 M4096 persistent_128x128_epi7_1chain":
        (4096, 5120, 768, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "N1024 K768 M256 persistent_128x128_epi7_1chain":
        (256, 1024, 768, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "qkv M=256 tile_128x128": (256, 6144, 4096, "tile_128x128", 1, "fp8", ("normal", "no_copy")),
    "qkv M=1024 tile_128x192": (1024, 6144, 4096, "tile_128x192", 1, "fp8", ("normal", "no_copy")),
    "qkv M=8192 tile_128x128": (8192, 6144, 4096, "tile_128x128", 1, "fp8", ("normal", "no_mma", "no_copy")),
    "qkv M=8192 tile_128x192": (8192, 6144, 4096, "tile_128x192", 1, "fp8", ("normal", "no_mma", "no_copy")),
    "qkv M=8192 tile_192x128": (8192, 6144, 4096, "tile_192x128", 1, "fp8", ("normal", "no_mma", "no_copy")),
    "qkv M=8192 persistent_128x128":
        (8192, 6144, 4096, "persistent_128x128", 1, "fp8", ("normal", "no_mma", "no_copy", "plain_b")),
    "gate_up M=4096 persistent_128x128 plain_b":
        (4096, 28672, 4096, "persistent_128x128", 1, "fp8", ("normal", "plain_b")),
    "o_proj M=8192 persistent_128x128": (8192, 4096, 4096, "persistent_128x128", 1, "fp8", ("normal",)),
    "gate_up M=4096 persistent_128x128": (4096, 28672, 4096, "persistent_128x128", 1, "fp8", ("normal",)),
    "moe_dn M=8192 persistent_128x128_epi7_1chain":
        (8192, 7168, 2048, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal", "no_copy")),
    "qkv M=8192 pair_persistent_128x128": (8192, 6144, 4096, "pair_persistent_128x128", 1, "fp8", ("normal",)),
    "gate_up M=4096 pair_persistent_128x128": (4096, 28672, 4096, "pair_persistent_128x128", 1, "fp8", ("normal",)),
    "o_proj M=4096 persistent_128x128": (4096, 4096, 4096, "persistent_128x128", 1, "fp8", ("normal",)),
    "qkv M=8192 persistent_128x128_epi7": (8192, 6144, 4096, "persistent_128x128_epi7", 1, "fp8", ("normal",)),
    "o_proj M=4096 persistent_128x128_epi7": (4096, 4096, 4096, "persistent_128x128_epi7", 1, "fp8", ("normal",)),
    "gate_up M=4096 persistent_128x128_epi7": (4096, 28672, 4096, "persistent_128x128_epi7", 1, "fp8", ("normal",)),
    "moe_dn M=8192 persistent_128x128_epi7": (8192, 7168, 2048, "persistent_128x128_epi7", 1, "fp8", ("normal",)),
    "N5120 K768 M16384 persistent_128x128_epi7": (16384, 5120, 768, "persistent_128x128_epi7", 1, "fp8", ("normal",)),
    "moe_dn M=8192 persistent_128x128": (8192, 7168, 2048, "persistent_128x128", 1, "fp8", ("normal",)),
    "moe_dn M=1024 persistent_128x128_epi7_1chain":
        (1024, 7168, 2048, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "N5120 K768 M16384 persistent_128x128": (16384, 5120, 768, "persistent_128x128", 1, "fp8", ("normal",)),
    "N5120 K1536 M8192 persistent_128x128": (8192, 5120, 1536, "persistent_128x128", 1, "fp8", ("normal",)),
    "N5120 K1536 M8192 persistent_128x128_epi7_1chain":
        (8192, 5120, 1536, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "N5120 K768 M16384 persistent_128x128_epi7_1chain":
        (16384, 5120, 768, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "down M=8192 persistent_128x128_epi7_1chain":
        (8192, 4096, 14336, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "qkv M=1024 persistent_128x128_epi7_1chain":
        (1024, 6144, 4096, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "qkv M=256 persistent_128x128_epi7_1chain":
        (256, 6144, 4096, "persistent_128x128_epi7_1chain", 1, "fp8", ("normal",)),
    "down M=8192 persistent_128x128": (8192, 4096, 14336, "persistent_128x128", 1, "fp8", ("normal",)),
    "qkv M=8192 persistent_128x128 int8": (8192, 6144, 4096, "persistent_128x128", 1, "i8", ("normal", "no_copy")),
    "qkv M=8192 tile_128x128 int8": (8192, 6144, 4096, "tile_128x128", 1, "i8", ("normal", "no_copy")),
    "qkv M=8192 tile_192x128 int8": (8192, 6144, 4096, "tile_192x128", 1, "i8", ("normal", "no_copy")),
}


def probe_name(in_name: str, cfg_name: str, mode: str) -> str:
    return f"probe_{in_name}_{cfg_name}_{mode}"


def probe_spec(variant: str, cfg_name: str, in_name: str):
    """The preset kernel (runtime/gemm_spec.py) a probe kernel is built like: its epilogue functor and its signature."""
    from fusedgemm.runtime.gemm_spec import preset_kernel

    return preset_kernel("sm_90a", cfg_name, INPUTS[in_name][1], OUT, VARIANT_ACT.get(variant, ACT))


def check_layout(cubin: Path, variant: str) -> None:
    """Every probe kernel of the cubin takes its parameters where its spec's signature packs them."""
    from fusedgemm.runtime.codeobject import cubin_params

    params = cubin_params(cubin.read_bytes())
    for cfg_name in CFGS:
        for in_name in INPUTS:
            sig = probe_spec(variant, cfg_name, in_name).signature
            for mode in MODES:
                name = probe_name(in_name, cfg_name, mode)
                got = [(q.offset, q.size) for q in params.get(name, ())]
                if got != list(zip(sig.offsets, sig.sizes)):
                    raise RuntimeError(f"{cubin}: {name} takes (offset, size) {got}, the signature packs "
                                       f"{list(zip(sig.offsets, sig.sizes))}")


_PATCHED: dict[Path, Path] = {}
_PATCH_LOCK = threading.Lock()


def patched_cuda_src(out_dir: Path) -> Path:
    """The probe builds' include root: hip_src with sm90_probes.patch applied, renamed to CUDA (ci/hipify.py's
    rename), under out_dir/probe_src/cuda_src (made once per directory)."""
    from fusedgemm.runtime.build import source_root
    from fusedgemm.runtime.hipify import convert

    with _PATCH_LOCK:
        if out_dir in _PATCHED:
            return _PATCHED[out_dir]
        work = out_dir / "probe_src"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(source_root() / "hip_src", work / "hip_src")
        res = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(work), "-i", str(PATCH)],
                             capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"{PATCH} does not apply to this hip_src (refresh it, see the top of {__file__}):\n"
                             f"{res.stdout}{res.stderr}")
        for f in sorted((work / "hip_src").rglob("*")):
            if f.is_file():
                dst = work / "cuda_src" / f.relative_to(work / "hip_src")
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(convert(f.read_text()))
        _PATCHED[out_dir] = work / "cuda_src"
        return _PATCHED[out_dir]


def build(out_dir: Path, variant: str) -> Path:
    from fusedgemm.epilogue.codegen import OUT_TYPES
    from fusedgemm.runtime.build import NVCC_FLAGS, find_nvidia_tool
    from fusedgemm.epilogue.presets import struct_name

    defines = dict(VARIANTS, **dict([STAMPS_VARIANT, KSTAMPS_VARIANT]))[variant]
    src = [PRELUDE.format(root=patched_cuda_src(out_dir))]
    for cfg_name, cfg in CFGS.items():
        for in_name, (in_t, _kind) in INPUTS.items():
            spec = probe_spec(variant, cfg_name, in_name)
            epi = f"fg::{struct_name(spec.preset)}<{OUT_TYPES[OUT][0]}>"  # the generated preset functor
            for mode, v in MODES.items():
                src.append(ENTRY.format(cfg=cfg, name=probe_name(in_name, cfg_name, mode), epi=epi, in_t=in_t,
                                        mode=v))
    cu = out_dir / f"probe_{variant}.cu"
    cu.write_text("\n".join(src))
    out = out_dir / f"probe_{variant}.cubin"
    flags = [f for f in NVCC_FLAGS if f not in ("-Xptxas", "-v")]
    subprocess.run([find_nvidia_tool("nvcc"), *flags, *defines,
                    "-o", str(out), str(cu)], check=True)
    check_layout(out, variant)
    return out


def timeline(mod, name: str, signature, cfg, grid, cluster, stream, args, k: int, flush=None) -> dict:
    """Run kernel `name` of the stamps build once (after a warm-up; `flush()` first, if given, so its operands come
    from DRAM as in the bench) and summarise its per-CTA stamps (FG_PROBE_STAMPS, sm90_probes.patch): start =
    entry -> main loop (barrier init, CTA set-up, and the wait for the first stage), loop, epi (epilogue, with split-K's
    reduction over the cluster), gap = this CTA's end -> the next CTA's entry on the same SM; first = the first
    CTA's entry -> the last CTA's entry; wall = the first entry -> the last end.
    args: the kernel's packed values (signature.values_in_order); k: the problem's K."""
    import statistics

    import torch

    from fusedgemm.runtime.kernels import Signature

    ctas = grid[0] * grid[1] * grid[2]
    buf = torch.zeros(ctas * 8, dtype=torch.int64, device="cuda")
    mod.kernel("probe_set_stamps", Signature((("p", "ptr"),)))((1, 1, 1), 1, 0, stream, buf.data_ptr())
    kern = mod.kernel(name, signature)
    kern.set_max_dynamic_smem(cfg.smem)
    for i in range(3):
        if i == 2 and flush is not None:
            flush()
        kern.launch_cluster(grid, cluster, cfg.warps * 32, cfg.smem, stream, *args)
    torch.cuda.synchronize()
    s = buf.view(ctas, 8).cpu().tolist()
    per_sm: dict[int, list] = {}
    for row in s:
        per_sm.setdefault(row[7], []).append(row)
    gaps = []
    for rows in per_sm.values():
        rows.sort(key=lambda r: r[0])
        gaps += [b[0] - a[3] for a, b in zip(rows, rows[1:])]
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    loop_ns = med([r[2] - r[1] for r in s])
    loop_cycles = med([r[5] - r[4] for r in s])
    return dict(wall=(max(r[3] for r in s) - min(r[0] for r in s)) / 1e3, per_sm=ctas / len(per_sm),
                first=(max(r[0] for r in s) - min(r[0] for r in s)) / 1e3,
                start=med([r[1] - r[0] for r in s]) / 1e3, loop=loop_ns / 1e3, epi=med([r[3] - r[2] for r in s]) / 1e3,
                gap=med(gaps) / 1e3, loop_cycles=loop_cycles, start_max=max(r[1] - r[0] for r in s) / 1e3,
                loop_max=max(r[2] - r[1] for r in s) / 1e3, epi_max=max(r[3] - r[2] for r in s) / 1e3,
                ideal=cfg.block_m * cfg.block_n * k / 4096, mhz=loop_cycles / loop_ns * 1e3)


PERSISTENT_STAMP_TILES = 64  # kStampTiles in sm90_probes.patch (sm90_gemm_persistent.hpp)


def persistent_timeline(mod, name: str, signature, cfg, grid, cluster, stream, args, k: int) -> dict:
    """Run persistent kernel `name` of the stamps build once (after a warm-up) and summarise the SM-clock stamps of
    each CTA's tiles after its first (FG_PROBE_STAMPS, sm90_probes.patch), medians in cycles: period (one
    main-loop start to the next), loop (warpgroup 0's main loop), wait (for the parked tile to be free),
    park (writing it), lag (warpgroup 1's main-loop end after warpgroup 0's), epi (the epilogue warps' rows),
    epi idle (from one tile's rows to the next tile's parked tile), split into stage (loading and staging the next
    tile's row / column values) and epi wait (then waiting for its parked tile)."""
    import statistics

    import torch

    from fusedgemm.runtime.kernels import Signature

    tiles = PERSISTENT_STAMP_TILES
    buf = torch.zeros(grid[0] * tiles * 8, dtype=torch.int64, device="cuda")
    mod.kernel("probe_set_stamps", Signature((("p", "ptr"),)))((1, 1, 1), 1, 0, stream, buf.data_ptr())
    kern = mod.kernel(name, signature)
    kern.set_max_dynamic_smem(cfg.smem)
    for _ in range(3):
        buf.zero_()
        kern.launch_cluster(grid, cluster, cfg.warps * 32, cfg.smem, stream, *args)
    torch.cuda.synchronize()
    s = buf.view(grid[0], tiles, 8).cpu().tolist()
    cols = {c: [] for c in ("period", "loop", "wait", "park", "lag", "epi", "epi idle", "stage", "epi wait")}
    for cta in s:
        used = [t for t in cta if t[0]]
        for i in range(1, len(used) - 1):
            t, nxt = used[i], used[i + 1]
            cols["period"].append(nxt[0] - t[0])
            cols["loop"].append(t[1] - t[0])
            cols["wait"].append(t[2] - t[1])
            cols["park"].append(t[3] - t[2])
            cols["lag"].append(t[4] - t[1])
            cols["epi"].append(t[7] - t[6])
            cols["epi idle"].append(nxt[6] - t[7])
            cols["stage"].append(nxt[5] - t[7])
            cols["epi wait"].append(nxt[6] - nxt[5])
    med = {c: statistics.median(v) if v else float("nan") for c, v in cols.items()}
    med["ideal"] = cfg.block_m * cfg.block_n * k / 4096
    return med


def accuracy(label, a, w, wq, out, runs) -> list:
    """Rows of the error of each normal-mode run (one launch into out, which is poisoned first) and of
    _scaled_mm's on the same operands, against A . B^T in float64: for a and w as given, then with both
    replaced in place by their absolute values (sums that only grow: a truncating accumulator's worst case).
    The runs read a and wq (w preshuffled)."""
    import torch
    import fusedgemm as fg
    rows = []
    one_a, one_b = torch.ones(a.shape[0], 1, device="cuda"), torch.ones(1, w.shape[0], device="cuda")
    for data in ("N(0,1)", "|N(0,1)|"):
        if data.startswith("|"):
            a.copy_(a.float().abs().to(a.dtype))
            w.copy_(w.float().abs().to(w.dtype))
            wq.data.copy_(fg.preshuffle(w).data)
        ref = a.double() @ w.double().t()
        rounded = ref.to(torch.bfloat16)
        cands = dict(runs)
        for fast in (False, True):
            cands[f"_scaled_mm{' fast' if fast else ''}"] = (
                lambda fast=fast: out.copy_(torch._scaled_mm(a, w.t(), scale_a=one_a, scale_b=one_b,
                                                             out_dtype=torch.bfloat16, use_fast_accum=fast)))
        for name, run in cands.items():
            out.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            err = out.double() - ref
            rel = (err.pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
            miss = (out != rounded).double().mean().item()
            rows.append(f"{label:28} {data:9} {name:22} rms {rel:.3e}  not correctly rounded {100 * miss:6.2f}%")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-only", type=Path, help="build the probe cubins into this directory and stop")
    ap.add_argument("--cubins", type=Path, help="time the probe cubins built earlier into this directory")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--operands", action="store_true", help="pass f32 row and column scales and a bf16 bias (as "
                    "the bench's bias_silu calls) instead of no operands")
    ap.add_argument("--cases", nargs="*", help="only the cases whose label contains one of these strings")
    ap.add_argument("--clocks", type=float, default=0.0, help="seconds of back-to-back runs per kernel while "
                    "sampling the SM clock and power (0: off)")
    ap.add_argument("--stamps", action="store_true", help="a per-CTA timeline of each case's normal kernel")
    ap.add_argument("--kstamps", type=Path, help="a per-K-block timeline of each persistent case's normal kernel "
                    "(kblock_timeline.py); one CTA's blocks in full are written into this directory")
    ap.add_argument("--kstamps-act", choices=("none", "silu", "gelu", "relu"), default="silu",
                    help="the activation of the --kstamps build's kernels (default silu, as the bench)")
    ap.add_argument("--kstamps-variant", default="default", choices=list(VARIANTS),
                    help="the build variant whose defines the --kstamps build adds")
    ap.add_argument("--accuracy", action="store_true",
                    help="also each variant's normal-mode error against float64 (needs --act none), beside "
                         "_scaled_mm's with and without fast accumulation, on N(0, 1) and |N(0, 1)| inputs")
    ap.add_argument("--configs", nargs="*", help="build only these configs' probe kernels (a faster build)")
    ap.add_argument("--l2", nargs="*", help="L2 promotions of A's and B's tensor maps to time side by side, each "
                    "A:B in bytes (0, 64, 128, 256), e.g. 256:256 128:256 (default: the one the package uses)")
    ap.add_argument("--act", choices=("none", "silu", "gelu", "relu"), default="none",
                    help="the activation of every variant's kernels except the timeline's (default none: the identity "
                    "epilogue; silu: the bench's bias_silu work)")
    ap.add_argument("--variants", nargs="*", help=f"build and time only these build variants ({', '.join(VARIANTS)}; "
                    "default: all)")
    args = ap.parse_args()
    if args.accuracy and args.act != "none":
        ap.error("--accuracy compares A . B^T itself: use --act none")
    global ACT
    ACT = args.act
    KSTAMPS_VARIANT[1].extend(VARIANTS[args.kstamps_variant])  # before --variants narrows VARIANTS
    VARIANT_ACT[KSTAMPS_VARIANT[0]] = args.kstamps_act
    if args.variants:
        for name in args.variants:
            VARIANTS.setdefault(name, [])
        for name in [v for v in VARIANTS if v not in args.variants]:
            del VARIANTS[name]
    if args.configs:
        for name in [c for c in CFGS if c not in args.configs]:
            del CFGS[name]
    if args.build_only:
        args.build_only.mkdir(parents=True, exist_ok=True)
        names = [*VARIANTS, STAMPS_VARIANT[0], KSTAMPS_VARIANT[0]]
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for path in pool.map(lambda v: build(args.build_only, v), names):
                print(path)
        return 0

    import torch

    import fusedgemm as fg
    from fusedgemm.checks import preset_values
    from fusedgemm.plan import call as g  # the tensor maps and L2 promotions a call plan uses
    from fusedgemm.bench.common import Timer, sustained
    from fusedgemm.runtime import kernels
    from fusedgemm.runtime.launch import Module, encode_tensor_map_tiled

    cubin_dir = args.cubins or Path(tempfile.mkdtemp())

    def load(v: str) -> Module:
        if args.cubins:  # built earlier (perhaps by another revision): the layout must still be this one
            check_layout(cubin_dir / f"probe_{v}.cubin", v)
            return Module(cubin_dir / f"probe_{v}.cubin", "nvidia", 0)
        return Module(build(cubin_dir, v), "nvidia", 0)

    with ThreadPoolExecutor(max_workers=len(VARIANTS)) as pool:  # one nvcc per variant, side by side
        mods = dict(zip(VARIANTS, pool.map(load, VARIANTS)))
    timer = Timer(reps=args.reps)
    accuracy_rows = []
    stream = torch.cuda.current_stream().cuda_stream
    clocks = []
    timelines = []
    ptimelines = []
    stamps_mod = load(STAMPS_VARIANT[0]) if args.stamps else None
    kstamps_mod = load(KSTAMPS_VARIANT[0]) if args.kstamps else None
    ktimelines = []
    l2s = args.l2 or [None]  # None: the promotion _CallPlan picks
    def col_name(mode: str, v: str, l2) -> str:
        return ((f"{mode}/{v}" if len(VARIANTS) > 1 else mode)
                + (f"@{l2}" if len(l2s) > 1 or l2 is not None else ""))
    cols = [col_name(mode, v, l2) for mode in MODES for v in VARIANTS for l2 in l2s]
    print(f"{'case':28} " + " ".join(f"{c:>14}" for c in cols) + "   (event us, median)")
    for label, (m, n, k, cfg_name, splits, in_name, modes) in CASES.items():
        if (args.cases and not any(c in label for c in args.cases)) or cfg_name not in CFGS:
            continue
        cfg = kernels.GEMM_CONFIGS[cfg_name]
        dtype = torch.float8_e4m3fn if in_name == "fp8" else torch.int8
        a = torch.randn(m, k, device="cuda").clamp(-100, 100).to(dtype)
        w = torch.randn(n, k, device="cuda").clamp(-100, 100).to(dtype)
        wq = fg.preshuffle(w)
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        l2 = g._TMAP_L2_DECODE if cfg.swap_ab else g._TMAP_L2_256B  # as _CallPlan picks

        def maps(promotion):  # -> (A's map, B's map) with L2 promotion "a:b" in bytes (0: none), or _CallPlan's
            la, lb = (l2, l2) if promotion is None else (L2_PROMOTION[x] for x in promotion.split(":"))
            return (g._tensor_map_a(a.data_ptr(), m, k, cfg.block_m, la),
                    g._tensor_map_b(wq.data.data_ptr(), n, k, cfg.block_n, lb, 4 if cfg.pair_b else 8))
        plain_map = encode_tensor_map_tiled(0, 2, w.data_ptr(), (k, n), (k,), (128, cfg.block_n), (1, 1), 0, 3, 3, 0)
        # Everything but the tensor maps: the Params of a bf16 output with no scales, no bias, alpha 1 (results
        # are garbage in the probe modes anyway); --operands: f32 row / column scales and a bf16 bias, as the bench.
        if args.operands:
            sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
            bias = torch.randn(n, device="cuda").to(torch.bfloat16)
            ops = preset_values(bias.data_ptr(), 2, sa.data_ptr(), 1, sb.data_ptr(), 1, 1.0)  # 2: kElemBf16
        else:
            ops = preset_values(0, 0, 0, 0, 0, 0, 1.0)
        values = dict(M=m, N=n, K=k, out=out.data_ptr(), ld_out=n, **ops)
        grid = ((n + cfg.block_n - 1) // cfg.block_n, (m + cfg.block_m - 1) // cfg.block_m, splits)
        cluster = (1, 1, splits)
        if cfg.pair_b:  # B-multicast pairs, clustered along x (as plan/call.py launches them)
            grid, cluster = (2 * grid[0], -(-grid[1] // 2), 1), (2, 1, 1)
        if cfg.persistent:  # one wave of CTAs looping over the tiles (as plan/call.py launches it)
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            grid = (min(grid[0] * grid[1], sms) // cluster[0] * cluster[0], 1, 1)
        runs = {}
        for mode in modes:
            for v, mod in mods.items():
                sig = probe_spec(v, cfg_name, in_name).signature
                kern = mod.kernel(probe_name(in_name, cfg_name, mode), sig)
                kern.set_max_dynamic_smem(cfg.smem)
                for promotion in l2s:
                    a_map, b_map = maps(promotion)
                    bm = plain_map if mode == "plain_b" else b_map
                    kargs = sig.values_in_order(dict(values, a_map=a_map, b_map=bm))

                    def run(kern=kern, kargs=kargs):
                        kern.launch_cluster(grid, cluster, cfg.warps * 32, cfg.smem, stream, *kargs)
                    runs[col_name(mode, v, promotion)] = run
        row = dict(zip(runs, timer.interleaved(list(runs.values()))))  # rep by rep: one GPU clock for all
        if args.clocks:
            for col, run in runs.items():
                clocks.append((label, col, *sustained(run, args.clocks)))
        print(f"{label:28} " + " ".join(f"{row[c]:14.1f}" if c in row else f"{'-':>14}" for c in cols), flush=True)
        if args.accuracy and in_name == "fp8":
            normal = {c: r for c, r in runs.items() if c.startswith("normal")}
            accuracy_rows.extend(accuracy(label, a, w, wq, out, normal))
        def timeline_args(variant: str):  # a timeline build's signature and packed values at this case
            sig = probe_spec(variant, cfg_name, in_name).signature
            a_map, b_map = maps(None)
            return sig, sig.values_in_order(dict(values, a_map=a_map, b_map=b_map))
        if stamps_mod is not None and not cfg.persistent:  # stamps: CTA-per-tile kernels
            sig, kargs = timeline_args(STAMPS_VARIANT[0])
            timelines.append((label, timeline(stamps_mod, probe_name(in_name, cfg_name, "normal"), sig, cfg, grid,
                                              cluster, stream, kargs, k, flush=timer.flush_l2)))
        elif stamps_mod is not None and cfg.persistent:
            sig, kargs = timeline_args(STAMPS_VARIANT[0])
            ptimelines.append((label, persistent_timeline(
                stamps_mod, probe_name(in_name, cfg_name, "normal"), sig, cfg, grid, cluster, stream, kargs, k)))
        if kstamps_mod is not None and cfg.persistent:
            sig, kargs = timeline_args(KSTAMPS_VARIANT[0])
            args.kstamps.mkdir(parents=True, exist_ok=True)
            for mode in [x for x in modes if x in ("normal", "no_copy")]:
                dump = args.kstamps / f"kblocks_{label.replace(' ', '_').replace('=', '')}_{mode}.txt"
                ktimelines.append((f"{label} [{mode}]", kblock_timeline.run(
                    kstamps_mod, probe_name(in_name, cfg_name, mode), sig, cfg, grid, cluster, stream, kargs, k,
                    dump)))
        if args.clocks:  # the vendor GEMM at the same shape, for its clock and power
            if in_name == "fp8":
                sa, sb = torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")
                blas = lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            else:
                blas = lambda: torch._int_mm(a, w.t())
            clocks.append((label, "torch", *sustained(blas, args.clocks)))
    if accuracy_rows:
        print("\nerror against float64 (bf16 out; rms relative to the reference's rms, and the share of outputs "
              "not equal to the correctly rounded value)")
        for row in accuracy_rows:
            print(row)
    if timelines:
        print("\nper-CTA timeline of the normal kernel with a SiLU epilogue (median over CTAs; us, except "
              "cycles); ideal = the main loop's MMA cycles at the datasheet rate (4096 fp8 MAC per SM per clock)")
        print(f"{'case':28} {'wall':>7} {'CTAs/SM':>7} {'first':>6} {'start':>6} {'loop':>7} {'epi':>6} {'gap':>6} "
              f"{'loop cyc':>9} {'ideal':>7} {'MHz':>5}  max: {'start':>6} {'loop':>7} {'epi':>6}")
        for label, t in timelines:
            print(f"{label:28} {t['wall']:7.1f} {t['per_sm']:7.1f} {t['first']:6.2f} {t['start']:6.2f} {t['loop']:7.2f} "
                  f"{t['epi']:6.2f} {t['gap']:6.2f} {t['loop_cycles']:9.0f} {t['ideal']:7.0f} {t['mhz']:5.0f}       "
                  f"{t['start_max']:6.2f} {t['loop_max']:7.2f} {t['epi_max']:6.2f}")
    if ptimelines:
        print("\npersistent kernels with a SiLU epilogue: per-tile SM cycles, median over CTAs and tiles (not the "
              "first or last of a CTA); ideal = a tile's MMA cycles at 4096 fp8 MAC per SM per clock")
        names = list(ptimelines[0][1])
        print(f"{'case':28} " + " ".join(f"{c:>8}" for c in names))
        for label, t in ptimelines:
            print(f"{label:28} " + " ".join(f"{t[c]:8.0f}" for c in names))
    kblock_timeline.print_table(ktimelines)
    if clocks:
        print(f"\n{'back to back, no L2 flush':28} {'kernel':>16} {'us/call':>9} {'SM MHz':>7} {'W':>6}")
        for label, col, us, mhz, watts in clocks:
            print(f"{label:28} {col:>16} {us:9.1f} {mhz:7.0f} {watts:6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
