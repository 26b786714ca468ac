"""Host time per eager call of matmul_fused beside torch.mm / F.linear (interleaved batches), then a cProfile of the
fast path (GPU machine): PYTHONPATH=pkg python3 ci/host_overhead_matmul.py"""
import torch, torch.nn.functional as F, fusedgemm as fg
from fusedgemm.bench.common import host_us_interleaved
for dt in (torch.bfloat16,):
    xs, ws, bs = (torch.randn(*s, device="cuda").to(dt) for s in ((16, 256), (256, 256), (256,)))
    fns = {"matmul_fused bias silu": lambda: fg.matmul_fused(xs, ws, bs, activation="silu"),
           "matmul_fused plain": lambda: fg.matmul_fused(xs, ws),
           "F.linear + silu": lambda: F.silu(F.linear(xs, ws, bs)),
           "F.linear": lambda: F.linear(xs, ws, bs),
           "torch.mm": lambda: torch.mm(xs, ws.t()),
           "torch.empty": lambda: torch.empty(16, 256, dtype=dt, device=xs.device)}
    for r in range(3):
        print({k: round(v, 1) for k, v in host_us_interleaved(fns).items()}, flush=True)
import cProfile, pstats
f = fns["matmul_fused bias silu"]
pr = cProfile.Profile(); pr.enable()
for _ in range(2000): f()
pr.disable(); torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(12)
