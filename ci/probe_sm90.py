#!/usr/bin/env python3
"""Timing probes of the sm_90 wgmma kernel (run on the GPU machine): which stage bounds it.

Builds cuda_src/include/fusedgemm/gemm_a8_sm90.hpp's kernel with each ProbeMode (normal, no MMAs, no
copies, plain row-major B through a swizzled 2-D map) into a scratch cubin and times them on a decode and
a large shape. Results are garbage in the probe modes; only the times matter."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import fusedgemm as fg
import importlib
g = importlib.import_module("fusedgemm.gemm_a8")  # the module (the package exports the function of that name)
from fusedgemm.bench.common import Timer
from fusedgemm.runtime import kernels
from fusedgemm.runtime.build import NVCC_FLAGS, find_nvidia_tool, source_root
from fusedgemm.runtime.launch import Module, encode_tensor_map_tiled

MODES = {"normal": 0, "no_mma": 1, "no_copy": 2, "plain_b": 3}
CFGS = {"w64n128": "fg::ConfigW64N128", "w128n128": "fg::ConfigW128N128", "w128n192": "fg::ConfigW128N192",
        "w192n128": "fg::ConfigW192N128"}
ENTRY = """
extern "C" __global__ void __launch_bounds__(CFG::kThreads, CFG::kMinBlocksPerSm) probe_NAME_LABEL(
    const __grid_constant__ fg::sm90::TmaDesc a_map, const __grid_constant__ fg::sm90::TmaDesc b_map,
    fg::u16* out, const void* bias, const float* sa, const float* sb, int M, int N, int K, int bk, int sas,
    int sbs, float alpha) {
  fg::gemm_a8_wgmma<fg::Fp8E4M3, fg::OutBf16, fg::ActIdentity, CFG, MODE>(a_map, b_map, out, bias, sa, sb, M, N,
                                                                          K, bk, sas, sbs, alpha);
}
"""


def build(tmp: Path) -> Path:
    src = [f'#include "{source_root()}/cuda_src/include/fusedgemm/gemm_a8_sm90.hpp"']
    for name, cfg in CFGS.items():
        for mode, v in MODES.items():
            src.append(ENTRY.replace("NAME", name).replace("LABEL", mode).replace("MODE", str(v))
                       .replace("CFG", cfg))
    (tmp / "probe.cu").write_text("\n".join(src))
    out = tmp / "probe.cubin"
    flags = [f for f in NVCC_FLAGS if f not in ("-Xptxas", "-v")]
    subprocess.run([os.environ.get("FUSEDGEMM_NVCC") or find_nvidia_tool("nvcc"), *flags, "-o", str(out),
                    str(tmp / "probe.cu")], check=True)
    return out


def main() -> int:
    tmp = Path(tempfile.mkdtemp())
    mod = Module(build(tmp), "nvidia", 0)
    timer = Timer(reps=20)
    stream = torch.cuda.current_stream().cuda_stream
    print(f"{'case':28} " + " ".join(f"{m:>9}" for m in MODES) + "   (us)")
    for label, (m, n, k, cfg_name, splits) in {
        "gate_up M=1 w64n128 s1": (1, 28672, 4096, "w64n128", 1),
        "gate_up M=64 w64n128 s1": (64, 28672, 4096, "w64n128", 1),
        "qkv M=1 w64n128 s4": (1, 6144, 4096, "w64n128", 4),
        "qkv M=8192 w128n128": (8192, 6144, 4096, "w128n128", 1),
        "qkv M=8192 w64n128": (8192, 6144, 4096, "w64n128", 1),
        "qkv M=8192 w192n128": (8192, 6144, 4096, "w192n128", 1),
        "qkv M=8192 w128n192": (8192, 6144, 4096, "w128n192", 1),
    }.items():
        cfg = kernels.GEMM_A8_CONFIGS[cfg_name]
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        wq = fg.preshuffle(w)
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        a_map = g._tensor_map_a(a.data_ptr(), m, k, cfg.block_m)
        b_map = g._tensor_map_b(wq.data.data_ptr(), n, k, cfg.block_n)
        plain_map = encode_tensor_map_tiled(0, 2, w.data_ptr(), (k, n), (k,), (128, cfg.block_n), (1, 1), 0, 3, 3, 0)
        grid = ((n + cfg.block_n - 1) // cfg.block_n, (m + cfg.block_m - 1) // cfg.block_m, splits)
        times = []
        for mode in MODES:
            kern = mod.kernel(f"probe_{cfg_name}_{mode}", kernels.GEMM_A8_SM90)
            kern.set_max_dynamic_smem(cfg.smem)
            bm = plain_map if mode == "plain_b" else b_map

            def run():
                kern.launch_cluster(grid, (1, 1, splits), cfg.warps * 32, cfg.smem, stream, a_map, bm,
                                    out.data_ptr(), 0, 0, 0, m, n, k, 0, 0, 0, 1.0)
            times.append(timer(run))
        print(f"{label:28} " + " ".join(f"{t:9.1f}" for t in times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
