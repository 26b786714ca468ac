#!/usr/bin/env python3
"""Host time per eager call of fusedgemm.bmm_tiny and torch.bmm, same process (issue 18 item 6): a batch of
tiny GEMMs whose kernels take a few us, so a loop of calls is bound by the host path. Median of batches of
calls (each batch synchronised once at its end), us per call. Run on a GPU machine."""
import statistics
import sys
import time

import torch

import fusedgemm as fg


def per_call(fn, calls=2000, batches=15) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(times)


def main() -> int:
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    worst = 0.0
    for batch, m, n, k in ((1024, 12, 12, 64), (1024, 16, 16, 16), (1024, 3, 7, 5)):
        a = torch.randn(batch, m, k, device="cuda")
        b = torch.randn(batch, k, n, device="cuda")
        ours, theirs = per_call(lambda: fg.bmm_tiny(a, b)), per_call(lambda: torch.bmm(a, b))
        worst = max(worst, ours / theirs)
        print(f"{batch:5} x {m}x{n}x{k}:  fusedgemm.bmm_tiny {ours:6.2f} us   torch.bmm {theirs:6.2f} us   "
              f"ratio {ours / theirs:.2f}")
    print(f"worst ratio {worst:.2f} (target <= 1.00)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
