"""A training step of one Linear + activation layer (forward + backward), fusedgemm.nn.FusedLinear against eager
torch (nn.Linear then the activation), same process, medians of CUDA-event pairs (GPU machine).

    PYTHONPATH=pkg python3 ci/matmul_train_step.py [--dtype bf16] [--act gelu silu]
"""
import argparse

import torch

import fusedgemm as fg
from fusedgemm.bench.common import Timer

SHAPES = [("qkv", 4096, 6144, 4096), ("o_proj", 4096, 4096, 4096), ("gate_up", 4096, 28672, 4096),
          ("down", 4096, 4096, 14336), ("qkv", 16384, 6144, 4096)]
TORCH_ACT = {"gelu": lambda y: torch.nn.functional.gelu(y, approximate="tanh"), "silu": torch.nn.functional.silu,
             "relu": torch.relu, "gelu_erf": torch.nn.functional.gelu}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--act", nargs="+", default=["gelu", "silu"])
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    timer = Timer(reps=args.reps)
    print(f"{'shape':8s} {'M':>6s} {'N':>6s} {'K':>6s} {'act':8s} {'torch us':>9s} {'ours us':>9s} {'x':>6s} "
          f"{'fwd torch':>9s} {'fwd ours':>9s}")
    for act in args.act:
        for name, m, n, k in SHAPES:
            lin = torch.nn.Linear(k, n, device="cuda", dtype=dt)
            fused = fg.nn.FusedLinear.from_linear(lin, activation=act)
            x = torch.randn(m, k, device="cuda", dtype=dt).requires_grad_()
            dy = torch.randn(m, n, device="cuda", dtype=dt)

            def step_torch():
                x.grad = lin.weight.grad = lin.bias.grad = None
                TORCH_ACT[act](lin(x)).backward(dy)

            def step_ours():
                x.grad = lin.weight.grad = lin.bias.grad = None
                fused(x).backward(dy)

            with torch.no_grad():
                fwd_t = timer(lambda: TORCH_ACT[act](lin(x)))
                fwd_o = timer(lambda: fused(x))
            t, o = timer(step_torch), timer(step_ours)
            print(f"{name:8s} {m:6d} {n:6d} {k:6d} {act:8s} {t:9.1f} {o:9.1f} {t / o:6.2f} {fwd_t:9.1f} {fwd_o:9.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
