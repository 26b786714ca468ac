#!/usr/bin/env python3
"""Timing probes of the sm_90 wgmma kernel (run on the GPU machine): which stage bounds it.

Builds cuda_src/include/fusedgemm/gemm_a8_sm90.hpp's kernel with each ProbeMode (normal, no MMAs, no
copies, plain row-major B through a swizzled 2-D map, no copies with B read through a swizzled
descriptor) into scratch cubins and times them, same process, on decode and large shapes. Each build
variant adds nvcc defines (VARIANTS; an experiment adds one to compare code paths in one process). Results
are garbage in the probe modes; only the times matter.

    python3 ci/probe_sm90.py                      # build here (nvcc) and time
    python3 ci/probe_sm90.py --build-only DIR     # build the cubins into DIR (no GPU needed)
    python3 ci/probe_sm90.py --cubins DIR         # time cubins built earlier
    python3 ci/probe_sm90.py --clocks 2 ...       # also: each kernel back to back for 2 s, with the SM clock
                                                  # and board power nvidia-smi reads meanwhile (and the same
                                                  # for torch's _scaled_mm / _int_mm at each shape)
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MODES = {"normal": 0, "no_mma": 1, "no_copy": 2, "plain_b": 3, "no_copy_plain_b": 4}
CFGS = {"w64n128": "fg::ConfigW64N128", "w128n128": "fg::ConfigW128N128", "w128n192": "fg::ConfigW128N192",
        "w192n128": "fg::ConfigW192N128", "v16n128": "fg::ConfigV16N128"}
INPUTS = {"fp8": "fg::Fp8E4M3", "i8": "fg::Int8"}
VARIANTS = {"default": []}
ENTRY = """
extern "C" __global__ void __launch_bounds__(CFG::kThreads, CFG::kMinBlocksPerSm) probe_IN_NAME_LABEL(
    const __grid_constant__ fg::sm90::TmaDesc a_map, const __grid_constant__ fg::sm90::TmaDesc b_map,
    fg::u16* out, const void* bias, const float* sa, const float* sb, int M, int N, int K, int bk, int sas,
    int sbs, float alpha) {
  fg::gemm_a8_wgmma<IN_T, fg::OutBf16, fg::ActIdentity, CFG, MODE>(a_map, b_map, out, bias, sa, sb, M, N,
                                                                   K, bk, sas, sbs, alpha);
}
"""
# label: (M, N, K, config, split-K, input, probe modes timed)
CASES = {
    "qkv M=1 v16n128 s4": (1, 6144, 4096, "v16n128", 4, "fp8", ("normal", "no_mma", "no_copy")),
    "qkv M=256 w128n128": (256, 6144, 4096, "w128n128", 1, "fp8", ("normal", "no_copy")),
    "qkv M=1024 w128n192": (1024, 6144, 4096, "w128n192", 1, "fp8", ("normal", "no_copy")),
    "qkv M=8192 w128n128": (8192, 6144, 4096, "w128n128", 1, "fp8", ("normal", "no_mma", "no_copy")),
    "qkv M=8192 w128n192": (8192, 6144, 4096, "w128n192", 1, "fp8", ("normal", "no_mma", "no_copy")),
    "qkv M=8192 w192n128": (8192, 6144, 4096, "w192n128", 1, "fp8", ("normal", "no_mma", "no_copy")),
    "qkv M=8192 w128n128 int8": (8192, 6144, 4096, "w128n128", 1, "i8", ("normal", "no_copy")),
    "qkv M=8192 w192n128 int8": (8192, 6144, 4096, "w192n128", 1, "i8", ("normal", "no_copy")),
}


def build(out_dir: Path, variant: str) -> Path:
    from fusedgemm.runtime.build import NVCC_FLAGS, find_nvidia_tool, source_root

    src = [f'#include "{source_root()}/cuda_src/include/fusedgemm/gemm_a8_sm90.hpp"']
    for name, cfg in CFGS.items():
        for in_name, in_t in INPUTS.items():
            for mode, v in MODES.items():
                src.append(ENTRY.replace("NAME", name).replace("LABEL", mode).replace("MODE", str(v))
                           .replace("CFG", cfg).replace("IN_T", in_t).replace("IN", in_name))
    cu = out_dir / f"probe_{variant}.cu"
    cu.write_text("\n".join(src))
    out = out_dir / f"probe_{variant}.cubin"
    flags = [f for f in NVCC_FLAGS if f not in ("-Xptxas", "-v")]
    subprocess.run([os.environ.get("FUSEDGEMM_NVCC") or find_nvidia_tool("nvcc"), *flags, *VARIANTS[variant],
                    "-o", str(out), str(cu)], check=True)
    return out


def sustained(fn, seconds: float):
    """Run fn back to back for `seconds` while nvidia-smi samples the SM clock and board power (every 100 ms).
    Returns (us per call, median MHz, median W) over the samples after the first 0.3 s. The clocks are only
    read, never set."""
    import statistics
    import time

    import torch

    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0, calls = time.perf_counter(), 0
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        calls += 10
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    samples = [tuple(float(x) for x in line.split(",")) for line in smi.communicate()[0].splitlines()[3:]
               if line.strip()]
    mhz = statistics.median(x[0] for x in samples) if samples else float("nan")
    watts = statistics.median(x[1] for x in samples) if samples else float("nan")
    return start.elapsed_time(end) * 1e3 / calls, mhz, watts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-only", type=Path, help="build the probe cubins into this directory and stop")
    ap.add_argument("--cubins", type=Path, help="time the probe cubins built earlier into this directory")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--cases", nargs="*", help="only the cases whose label contains one of these strings")
    ap.add_argument("--clocks", type=float, default=0.0, help="seconds of back-to-back runs per kernel while "
                    "sampling the SM clock and power (0: off)")
    args = ap.parse_args()
    if args.build_only:
        args.build_only.mkdir(parents=True, exist_ok=True)
        for v in VARIANTS:
            print(build(args.build_only, v))
        return 0

    import torch

    import fusedgemm as fg
    import importlib
    g = importlib.import_module("fusedgemm.gemm_a8")  # the module (the package exports the function)
    from fusedgemm.bench.common import Timer
    from fusedgemm.runtime import kernels
    from fusedgemm.runtime.launch import Module, encode_tensor_map_tiled

    cubin_dir = args.cubins or Path(tempfile.mkdtemp())
    mods = {v: Module(cubin_dir / f"probe_{v}.cubin" if args.cubins else build(cubin_dir, v), "nvidia", 0)
            for v in VARIANTS}
    timer = Timer(reps=args.reps)
    stream = torch.cuda.current_stream().cuda_stream
    clocks = []
    cols = [f"{mode}/{v}" if len(VARIANTS) > 1 else mode for mode in MODES for v in VARIANTS]
    print(f"{'case':28} " + " ".join(f"{c:>14}" for c in cols) + "   (event us, median)")
    for label, (m, n, k, cfg_name, splits, in_name, modes) in CASES.items():
        if args.cases and not any(c in label for c in args.cases):
            continue
        cfg = kernels.GEMM_A8_CONFIGS[cfg_name]
        dtype = torch.float8_e4m3fn if in_name == "fp8" else torch.int8
        a = torch.randn(m, k, device="cuda").clamp(-100, 100).to(dtype)
        w = torch.randn(n, k, device="cuda").clamp(-100, 100).to(dtype)
        wq = fg.preshuffle(w)
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        l2 = g._TMAP_L2_DECODE if cfg.swap_ab else g._TMAP_L2_256B  # as _CallPlan picks
        a_map = g._tensor_map_a(a.data_ptr(), m, k, cfg.block_m, l2)
        b_map = g._tensor_map_b(wq.data.data_ptr(), n, k, cfg.block_n, l2)
        plain_map = encode_tensor_map_tiled(0, 2, w.data_ptr(), (k, n), (k,), (128, cfg.block_n), (1, 1), 0, 3, 3, 0)
        grid = ((n + cfg.block_n - 1) // cfg.block_n, (m + cfg.block_m - 1) // cfg.block_m, splits)
        row = {}
        for mode in modes:
            for v, mod in mods.items():
                kern = mod.kernel(f"probe_{in_name}_{cfg_name}_{mode}", kernels.GEMM_A8_SM90)
                kern.set_max_dynamic_smem(cfg.smem)
                bm = plain_map if mode == "plain_b" else b_map

                def run():
                    kern.launch_cluster(grid, (1, 1, splits), cfg.warps * 32, cfg.smem, stream, a_map, bm,
                                        out.data_ptr(), 0, 0, 0, m, n, k, 0, 0, 0, 1.0)
                col = f"{mode}/{v}" if len(VARIANTS) > 1 else mode
                row[col] = timer(run)
                if args.clocks:
                    clocks.append((label, col, *sustained(run, args.clocks)))
        print(f"{label:28} " + " ".join(f"{row[c]:14.1f}" if c in row else f"{'-':>14}" for c in cols), flush=True)
        if args.clocks:  # the vendor GEMM at the same shape, for its clock and power
            if in_name == "fp8":
                sa, sb = torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")
                blas = lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            else:
                blas = lambda: torch._int_mm(a, w.t())
            clocks.append((label, "torch", *sustained(blas, args.clocks)))
    if clocks:
        print(f"\n{'back to back, no L2 flush':28} {'kernel':>16} {'us/call':>9} {'SM MHz':>7} {'W':>6}")
        for label, col, us, mhz, watts in clocks:
            print(f"{label:28} {col:>16} {us:9.1f} {mhz:7.0f} {watts:6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
