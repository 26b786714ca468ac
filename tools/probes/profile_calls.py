#!/usr/bin/env python3
"""Host and device time of gemm_a8 calls per plan (first call, repeated calls): where does a call's time go?
Prints a table; with --profile, the cProfile top entries of the first checked call of each plan."""
import cProfile
import pstats
import sys
import time

import torch

import fusedgemm as fg
from fusedgemm.gemm_a8 import forced_config, plans
from fusedgemm.runtime.arch import device_arch


def main() -> int:
    arch = device_arch(torch.cuda.current_device())
    dt = fg.FP8_DTYPE_FOR_ARCH[arch]
    m, n, k = 130, 144, 4096
    a = torch.randn(m, k, device="cuda").to(dt)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    sa, sb = torch.rand(m, device="cuda"), torch.rand(n, device="cuda")
    for plan in plans(arch):
        wq = fg.preshuffle(torch.randn(n, k, device="cuda").to(dt))
        times = []
        for i in range(4):
            torch.cuda.synchronize()
            t = time.perf_counter()
            prof = cProfile.Profile() if (i == 0 and "--profile" in sys.argv and plan[0] in ("tile_128x128", "swap_16x128")) else None
            if prof:
                prof.enable()
            with forced_config(*plan):
                fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
            torch.cuda.synchronize()
            if prof:
                prof.disable()
                pstats.Stats(prof).sort_stats("cumulative").print_stats(12)
            times.append((time.perf_counter() - t) * 1e3)
        print(f"{plan[0]:9} s{plan[1]}  " + "  ".join(f"{x:8.2f} ms" for x in times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
