"""python -m fusedgemm.bench train_step: a training step (forward + backward) of one Linear + activation layer,
fusedgemm.nn.FusedLinear against eager torch (nn.Linear then the activation), in one process; medians of CUDA-event
pairs with L2 flushed. Columns: the whole step's us for torch and ours, their ratio, and the forward alone.
"""
from __future__ import annotations

import argparse
import sys

import torch

from .cli import add_dtype, torch_dtype
from .common import Timer, gpu_problem

# (name, M, N, K): LLM projections at training batch sizes
SHAPES = [("qkv", 4096, 6144, 4096), ("o_proj", 4096, 4096, 4096), ("gate_up", 4096, 28672, 4096),
          ("down", 4096, 4096, 14336), ("qkv", 16384, 6144, 4096)]


def _torch_act(name: str):
    f = torch.nn.functional
    return {"gelu": lambda y: f.gelu(y, approximate="tanh"), "silu": f.silu, "relu": torch.relu,
            "gelu_erf": f.gelu}[name]


def run(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench train_step", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype(p, "--dtype", ["bf16", "fp16"], "bf16", "dtype of the layer and its input")
    p.add_argument("--act", nargs="+", default=["gelu", "silu"], choices=["gelu", "silu", "relu", "gelu_erf"],
                   help="activations to time, one table block each (default: gelu silu)")
    p.add_argument("--reps", type=int, default=10, help="timed steps per path and shape; medians (default 10)")
    args = p.parse_args(argv)
    problem = gpu_problem("train_step")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import fusedgemm as fg

    dt = torch_dtype(args.dtype)
    timer = Timer(reps=args.reps)
    print(f"{'shape':8s} {'M':>6s} {'N':>6s} {'K':>6s} {'act':8s} {'torch us':>9s} {'ours us':>9s} {'x':>6s} "
          f"{'fwd torch':>9s} {'fwd ours':>9s}")
    for act in args.act:
        torch_act = _torch_act(act)
        for name, m, n, k in SHAPES:
            lin = torch.nn.Linear(k, n, device="cuda", dtype=dt)
            fused = fg.nn.FusedLinear.from_linear(lin, activation=act)
            x = torch.randn(m, k, device="cuda", dtype=dt).requires_grad_()
            dy = torch.randn(m, n, device="cuda", dtype=dt)

            def step_torch():
                x.grad = lin.weight.grad = lin.bias.grad = None
                torch_act(lin(x)).backward(dy)

            def step_ours():
                x.grad = lin.weight.grad = lin.bias.grad = None
                fused(x).backward(dy)

            with torch.no_grad():
                fwd_t = timer(lambda: torch_act(lin(x)))
                fwd_o = timer(lambda: fused(x))
            t, o = timer(step_torch), timer(step_ours)
            print(f"{name:8s} {m:6d} {n:6d} {k:6d} {act:8s} {t:9.1f} {o:9.1f} {t / o:6.2f} {fwd_t:9.1f} {fwd_o:9.1f}",
                  flush=True)
    return 0
