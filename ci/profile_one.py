#!/usr/bin/env python3
"""One gemm_a8 call (and one bmm_tiny call) to profile under ncu: python3 ci/profile_one.py M N K."""
import sys

import torch

import fusedgemm as fg

m, n, k = (int(x) for x in sys.argv[1:4]) if len(sys.argv) >= 4 else (1, 6144, 4096)
dt = fg.FP8_DTYPE_FOR_ARCH["sm_90a"]
a = torch.randn(m, k, device="cuda").to(dt)
wq = fg.preshuffle(torch.randn(n, k, device="cuda").to(dt))
sa, sb = torch.rand(m, device="cuda"), torch.rand(n, device="cuda")
bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
x, y = torch.randn(16384, 12, 64, device="cuda"), torch.randn(16384, 64, 12, device="cuda")
for _ in range(3):
    fg.bmm_tiny(x, y)
torch.cuda.synchronize()
