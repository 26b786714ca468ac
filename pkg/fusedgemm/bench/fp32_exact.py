"""python -m fusedgemm.bench fp32_exact: fp32 at precision 'ieee' (torch's default 'highest'), matmul_fused's kernel
of three TF32 products of split operands beside torch's fp32 F.linear + GELU: time (medians of CUDA-event pairs, L2
flushed) and relative error against float64 on the first 256 rows.
"""
from __future__ import annotations

import argparse
import sys

import torch

from .common import Timer, gpu_problem

SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 6144, 4096), (16, 4096, 4096)]


def run(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench fp32_exact", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=10, help="timed calls per path and shape; medians (default 10)")
    args = p.parse_args(argv)
    problem = gpu_problem("fp32_exact")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import fusedgemm as fg

    gelu = torch.nn.functional.gelu
    torch.set_float32_matmul_precision("highest")
    timer = Timer(reps=args.reps)
    print(f"{'M':>6s} {'N':>6s} {'K':>6s} {'ours us':>9s} {'torch us':>9s} {'x':>6s} {'ours TF/s':>9s} "
          f"{'ours err':>9s} {'torch err':>9s}")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda") / k ** 0.5
        b = torch.randn(n, device="cuda")
        ours = timer(lambda: fg.matmul_fused(a, w, b, activation="gelu", precision="ieee"))
        ref = timer(lambda: gelu(torch.nn.functional.linear(a, w, b), approximate="tanh"))
        rows = slice(0, min(m, 256))
        y64 = gelu(a[rows].double() @ w.double().T + b.double(), approximate="tanh")
        y = fg.matmul_fused(a, w, b, activation="gelu", precision="ieee")[rows]
        r = gelu(torch.nn.functional.linear(a, w, b), approximate="tanh")[rows]
        e_ours = ((y.double() - y64).norm() / y64.norm()).item()
        e_torch = ((r.double() - y64).norm() / y64.norm()).item()
        print(f"{m:6d} {n:6d} {k:6d} {ours:9.1f} {ref:9.1f} {ref / ours:6.2f} {2 * m * n * k / ours / 1e6:9.1f} "
              f"{e_ours:9.2e} {e_torch:9.2e}", flush=True)
    return 0
