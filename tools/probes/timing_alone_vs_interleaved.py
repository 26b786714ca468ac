"""One fp8 bias_silu shape in a process of its own (GPU machine): ours (the shipped plan), persistent_128x128, tile_128x128 split
2 and _scaled_mm alone, each timed alone and all interleaved rep by rep, two rounds. Written for the sweep's N 1024 K
5120 M 1024 row, which measured 27-29 us there against 21-24 in plan comparisons (docs/perf-notes.md, --sweep).

    PYTHONPATH=pkg python3 tools/probes/timing_alone_vs_interleaved.py [M N K]   # default 1024 1024 5120
"""
import math
import sys

import torch

import fusedgemm as fg
from fusedgemm.bench.common import Timer
from fusedgemm.plan import plan_for, with_plan


def main():
    m, n, k = (int(x) for x in (sys.argv[1:4] if len(sys.argv) > 3 else (1024, 1024, 5120)))
    timer = Timer(reps=50)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.rand(m, device="cuda") / math.sqrt(k), torch.rand(n, device="cuda")
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    wq = fg.preshuffle(w)
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")

    def ours():
        return fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=torch.bfloat16, out=out)

    def scaled_mm():
        return torch._scaled_mm(a, w.t(), scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=torch.bfloat16)

    cfg, splits = plan_for(m, n, k, 0)
    print(f"M {m} N {n} K {k}: the plan takes {cfg.name}:{splits}")
    fns = {"ours": ours, "persistent_128x128": with_plan(ours, "persistent_128x128", 1), "tile_128x128:2": with_plan(ours, "tile_128x128", 2),
           "(c)": scaled_mm}
    for rnd in range(2):
        alone = {name: timer(fn) for name, fn in fns.items()}
        together = dict(zip(fns, timer.interleaved(list(fns.values()))))
        print(f"round {rnd}: " + "  ".join(f"{name} {alone[name]:.1f} / {together[name]:.1f}" for name in fns)
              + "   (us, alone / interleaved)")


if __name__ == "__main__":
    main()
