"""fp32 at precision 'ieee' (torch's default 'highest'): matmul_fused's F32x3 kernel (three TF32 products of split
operands) beside torch's fp32 GEMM + epilogue, time and error against float64 (GPU machine).

    PYTHONPATH=pkg python3 ci/matmul_fp32_exact.py
"""
import torch

import fusedgemm as fg
from fusedgemm.bench.common import Timer


def main():
    torch.set_float32_matmul_precision("highest")
    timer = Timer(reps=10)
    print(f"{'M':>6s} {'N':>6s} {'K':>6s} {'ours us':>9s} {'torch us':>9s} {'x':>6s} {'ours TF/s':>9s} "
          f"{'ours err':>9s} {'torch err':>9s}")
    for m, n, k in ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 6144, 4096), (16, 4096, 4096)):
        a = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda") / k ** 0.5
        b = torch.randn(n, device="cuda")
        ours = timer(lambda: fg.matmul_fused(a, w, b, activation="gelu", precision="ieee"))
        ref = timer(lambda: torch.nn.functional.gelu(torch.nn.functional.linear(a, w, b), approximate="tanh"))
        rows = slice(0, min(m, 256))
        y64 = torch.nn.functional.gelu(a[rows].double() @ w.double().T + b.double(), approximate="tanh")
        y = fg.matmul_fused(a, w, b, activation="gelu", precision="ieee")[rows]
        r = torch.nn.functional.gelu(torch.nn.functional.linear(a, w, b), approximate="tanh")[rows]
        e_ours = ((y.double() - y64).norm() / y64.norm()).item()
        e_torch = ((r.double() - y64).norm() / y64.norm()).item()
        print(f"{m:6d} {n:6d} {k:6d} {ours:9.1f} {ref:9.1f} {ref / ours:6.2f} {2 * m * n * k / ours / 1e6:9.1f} "
              f"{e_ours:9.2e} {e_torch:9.2e}", flush=True)


if __name__ == "__main__":
    main()
