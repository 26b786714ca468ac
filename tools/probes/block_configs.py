"""Kernel time of gemm_a8's block-scaled fp8 (DeepSeek 1x128 / 128x128 scales, bias + SiLU) on every block-scaled
sm_90a config, pinned, beside the per-channel kernel on the plan's config: which config block_plan should pick per
shape, and what block scaling costs on each. GPU machine, from the repository root:

    PYTHONPATH=pkg python3 tools/probes/block_configs.py [--M 256 1024 4096] [--only qkv down]

Prints one row per shape and M: per config its kernel us (profiler), the plan's choice, the per-channel time."""
import argparse
import math

import torch


def main() -> None:
    import fusedgemm as fg
    from fusedgemm.bench.common import Timer, kernel_us
    from fusedgemm.bench.gemm_a8 import load_grid
    from fusedgemm.blockscale import BLOCK_CONFIGS, block_plan
    from fusedgemm.plan import forced_config
    from fusedgemm.runtime.kernels import GEMM_CONFIGS

    p = argparse.ArgumentParser()
    p.add_argument("--M", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--only", nargs="+")
    p.add_argument("--configs", nargs="+", default=[c for c in BLOCK_CONFIGS if not GEMM_CONFIGS[c].swap_ab])
    args = p.parse_args()
    _ms, shapes = load_grid(None)
    timer = Timer()
    dev = torch.cuda.current_device()
    fp8 = torch.float8_e4m3fn
    print("shape M N K | " + " ".join(f"{c}" for c in args.configs) + " | plan | per-channel")
    for name, s in shapes.items():
        if args.only and name not in args.only:
            continue
        n, k = s["N"], s["K"]
        for m in args.M:
            a = torch.randn(m, k, device="cuda").to(fp8)
            wq = fg.preshuffle(torch.randn(n, k, device="cuda").to(fp8))
            bias = torch.randn(n, device="cuda").to(torch.bfloat16)
            sa = torch.rand(m, math.ceil(k / 128), device="cuda")
            sb = torch.rand(math.ceil(n / 128), math.ceil(k / 128), device="cuda") / math.sqrt(k)
            times = []
            for c in args.configs:
                with forced_config(c):
                    times.append(kernel_us(lambda: fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb,
                                                              epilogue="bias_silu"), timer))
            plan = block_plan(m, n, k, dev)[0].name
            sa_pc, sb_pc = sa[:, 0].contiguous(), sb[:, 0].repeat_interleave(128)[:n].contiguous()
            pc = kernel_us(lambda: fg.gemm_a8(a, wq, bias, scale_a=sa_pc, scale_b=sb_pc, epilogue="bias_silu"), timer)
            print(f"{name} {m} {n} {k} | " + " ".join(f"{t:.1f}" for t in times) + f" | {plan} | {pc:.1f}")


if __name__ == "__main__":
    main()
