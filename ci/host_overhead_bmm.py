#!/usr/bin/env python3
"""Host time per eager call of fusedgemm.bmm_tiny and torch.bmm, same process (issue 18 item 6): a batch of
tiny GEMMs whose kernels take a few us, so a loop of calls is bound by the host path. Median of batches of
calls (each batch synchronised once at its end), us per call. Run on a GPU machine."""
import statistics
import sys
import time

import torch

import fusedgemm as fg


def warm_clocks() -> None:
    """~0.2 s of GPU work first: an idle GPU starts these loops at a few hundred MHz, where a tiny kernel takes
    longer than its launch and the loop measures the GPU, not the host path (seen on the H100: 18.6 us per call
    in a cold loop, 11.9 in the same loop after other work)."""
    x = torch.randn(4096, 4096, device="cuda")
    t = time.perf_counter()
    while time.perf_counter() - t < 0.2:
        x @ x
        torch.cuda.synchronize()


def per_call(fn, calls=2000, batches=15) -> float:
    warm_clocks()
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
        ours, theirs = [], []
        for _ in range(3):  # interleaved rounds, medians
            ours.append(per_call(lambda: fg.bmm_tiny(a, b)))
            theirs.append(per_call(lambda: torch.bmm(a, b)))
        ours, theirs = statistics.median(ours), statistics.median(theirs)
        worst = max(worst, ours / theirs)
        print(f"{batch:5} x {m}x{n}x{k}:  fusedgemm.bmm_tiny {ours:6.2f} us   torch.bmm {theirs:6.2f} us   "
              f"ratio {ours / theirs:.2f}")
    print(f"worst ratio {worst:.2f} (target <= 1.00)")
    breakdown()
    return 0


def breakdown() -> None:
    """Where the hot path's time goes (1024 x 12x12x64): each piece alone in a loop of its own."""
    from fusedgemm import tiny_gemm
    from fusedgemm.runtime.device import current_raw_stream

    a = torch.randn(1024, 12, 64, device="cuda")
    b = torch.randn(1024, 64, 12, device="cuda")
    out = fg.bmm_tiny(a, b)
    hit = next(iter(tiny_gemm._FAST.values()))
    pa, pb, pc = a.data_ptr(), b.data_ptr(), out.data_ptr()
    pieces = {
        "whole call": lambda: fg.bmm_tiny(a, b),
        "torch.empty": lambda: torch.empty(1024, 12, 12, dtype=a.dtype, device=hit.device),
        "bound launch": lambda: hit.launch(current_raw_stream(0), pa, pb, pc),
        "key": lambda: (a.shape, a.stride(), a.dtype, a.get_device(), b.shape, b.stride(), b.dtype, b.get_device(),
                        a.data_ptr() & 15, b.data_ptr() & 15),
        "torch.bmm(out=)": lambda: torch.bmm(a, b, out=out),
    }
    print("  ".join(f"{name} {per_call(fn):.2f} us" for name, fn in pieces.items()))


if __name__ == "__main__":
    sys.exit(main())
