"""Time matmul_fused under every (tile config, split-K) of sm_90a on a few shapes, beside torch.mm (GPU machine):
which existing plan suits bf16 / fp16 / tf32, whose K blocks hold half / a quarter of fp8's values.

    PYTHONPATH=pkg python3 ci/matmul_plans.py [--dtype bf16] [--shapes qkv:1,qkv:64,qkv:4096,...]
"""
import argparse
import json

import torch

import fusedgemm as fg
from fusedgemm.bench.common import Timer
from fusedgemm.plan import choose_config, plans, with_plan
from fusedgemm.runtime.kernels import GEMM_A8_CONFIGS

GRID = {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
        "moe_dn": (7168, 2048)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "tf32"])
    p.add_argument("--shapes", default="qkv:1,qkv:64,o_proj:256,qkv:1024,qkv:4096,down:4096,moe_dn:8192")
    p.add_argument("--json")
    p.add_argument("--small-tiles-up-to", type=int, default=64,
                   help="also time the 64-row tiles (w64n128) for M up to this (default: decode sizes only)")
    p.add_argument("--configs", default=None, help="comma-separated config names to time (default: every plan)")
    args = p.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = True
    timer = Timer(reps=15)
    rows = []
    for item in args.shapes.split(","):
        name, m = item.split(":")
        m = int(m)
        n, k = GRID[name]
        x = torch.randn(m, k, device="cuda").to(dt)
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(dt)
        b = torch.randn(n, device="cuda").to(dt)
        cfg, s = choose_config(m, n, k, "sm_90a", torch.cuda.get_device_properties(0).multi_processor_count, True,
                               args.dtype)
        line = {"shape": name, "M": m, "N": n, "K": k, "heuristic": f"{cfg.name}:{s}"}
        runs = {}
        for cname, splits in plans("sm_90a", args.dtype):
            if args.configs and cname not in args.configs.split(","):
                continue
            if GEMM_A8_CONFIGS[cname].unit != "gemm_a8_sm90" or (m > args.small_tiles_up_to
                                                                  and GEMM_A8_CONFIGS[cname].block_m <= 64):
                continue
            if m <= 16 and cname not in ("v16n128", "w64n128") or (16 < m <= 64 and cname != "w64n128") or \
                    (cname == "v16n128" and m > 16):
                continue
            run = with_plan(lambda: fg.matmul_fused(x, w, b, activation="silu", precision="tf32"), cname, splits)
            try:
                run()
            except Exception as e:  # noqa: BLE001
                line[f"{cname}:{splits}"] = f"error {type(e).__name__}"
                continue
            runs[f"{cname}:{splits}"] = run
        # torch.mm and every plan in turn, rep by rep (Timer.interleaved): one GPU clock for all
        t_mm, *times = timer.interleaved([lambda: torch.mm(x, w.t()), *runs.values()])
        line["torch.mm"] = t_mm
        line.update(zip(runs, times))
        rows.append(line)
        plan_times = {k_: v for k_, v in line.items() if ":" in k_ and k_ != "heuristic" and isinstance(v, float)}
        best = min(plan_times, key=plan_times.get)
        print(f"{name:8s} M={m:5d} torch.mm {t_mm:8.1f} us | heuristic {line['heuristic']:12s} "
              f"{line.get(line['heuristic'], float('nan')):8.1f} | best {best:12s} {plan_times[best]:8.1f} "
              f"({2 * m * n * k / plan_times[best] / 1e6:.0f} TFLOP/s) | " +
              " ".join(f"{k_}={v:.0f}" for k_, v in sorted(plan_times.items(), key=lambda kv: kv[1])[:6]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
