#!/usr/bin/env python3
"""Quick GPU smoke check of every gemm_a8 plan (config x split-K) on a few ragged shapes: error vs the float64
oracle, printed as a table. Run before the full tests when kernels changed (a hang shows up here, fast)."""
import math
import sys

import torch

import fusedgemm as fg
from fusedgemm.gemm_a8 import forced_config, plans
from fusedgemm.reference import gemm_a8_reference, rel_error
from fusedgemm.runtime.arch import device_arch


def main() -> int:
    arch = device_arch(torch.cuda.current_device())
    bad = 0
    for kind in ("fp8", "int8"):
        for plan in plans(arch):
            for m, n, k in ((1, 400, 1040), (130, 144, 4096), (37, 1040, 16)):
                torch.manual_seed(m + n + k)
                if kind == "int8":
                    a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda")
                    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda")
                    sa = torch.full((m,), 3.0 / (127 * 127 * math.sqrt(k)), device="cuda")
                else:
                    dt = fg.FP8_DTYPE_FOR_ARCH[arch]
                    a = torch.randn(m, k, device="cuda").to(dt)
                    w = torch.randn(n, k, device="cuda").to(dt)
                    sa = torch.full((m,), 1 / math.sqrt(k), device="cuda")
                sb = torch.rand(n, device="cuda") + 0.5
                bias = torch.randn(n, device="cuda").to(torch.bfloat16)
                out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                with forced_config(*plan):
                    fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)
                torch.cuda.synchronize()
                ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu",
                                        out_dtype=torch.bfloat16, unrounded=True)
                err = rel_error(out, ref)
                ok = err <= 2 ** -8 and not torch.isnan(out).any()
                bad += not ok
                print(f"{kind:5} {plan[0]:9} s{plan[1]}  {m:4} {n:5} {k:5}  err {err:.2e}  {'ok' if ok else 'FAIL'}",
                      flush=True)
    print("smoke:", "all ok" if not bad else f"{bad} FAILED")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
