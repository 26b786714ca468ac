#!/usr/bin/env python3
"""gemm_a8's large-M kernels next to torch's fp8 GEMM, one call each, for Nsight Compute to read side by side.

    python3 tools/probes/ncu_compare.py                 # warm-up only: builds / loads every kernel, checks the results
    ncu --profile-from-start off --set full -o rep python3 tools/probes/ncu_compare.py --profile

Each case runs once between cudaProfilerStart / Stop (--profile), so the report holds exactly one launch per case:
torch._scaled_mm with row-wise scales (CUTLASS's fp8 kernel, no epilogue beyond the scales), then gemm_a8 on each
forced config with the identity epilogue (the same work) and with bias + SiLU. Shape: M N K from the command line,
default the grid's qkv at M = 8192. `--kinds fp8,int8` adds the int8 kernels on the same configs (after
torch._int_mm), e.g. to set fp8's promotion beside int8's loop, which has none; `--kinds bf16` runs matmul_fused's
kernels on those configs against torch.mm (cuBLAS's bf16 GEMM, no epilogue); `--kinds fp8,fp8block` adds the
block-scaled kernels (1x128 / 128x128 scales: scale_a's row value in every K block, scale_b ones; identity epilogue
only) on the same configs, beside the per-channel ones: where block scaling's time goes.
"""
import argparse
import functools

import torch

import fusedgemm as fg
from fusedgemm.plan import with_plan


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("shape", nargs="*", type=int, default=[8192, 6144, 4096])
    p.add_argument("--profile", action="store_true")
    p.add_argument("--configs", default="persistent_128x128,pair_persistent_128x128,tile_128x192")
    p.add_argument("--kinds", default="fp8", help="fp8, int8, bf16 (matmul_fused against torch.mm) or several, "
                   "comma-separated")
    args = p.parse_args()
    m, n, k = args.shape
    torch.manual_seed(0)
    sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    cases, refs = [], {}
    for kind in args.kinds.split(","):
        if kind in ("fp8", "fp8block"):
            dt = fg.FP8_DTYPE_FOR_ARCH["sm_90a"]
            a = (torch.randn(m, k, device="cuda") / 4).to(dt)
            w = (torch.randn(n, k, device="cuda") / 4).to(dt)

            def base(a=a, w=w):
                return torch._scaled_mm(a, w.t(), scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=torch.bfloat16)
            label, refs[kind] = "torch._scaled_mm", base()
            if kind == "fp8block":  # the same products: scale_a per row in every K block, scale_b ones
                kb = -(-k // 128)
                sa_b = sa[:, None].expand(m, kb).contiguous()
                sb_b = torch.ones(-(-n // 128), kb, device="cuda")
                refs[kind] = torch._scaled_mm(a, w.t(), scale_a=sa[:, None], scale_b=torch.ones(1, n, device="cuda"),
                                              out_dtype=torch.bfloat16)

                def ours_block(epi, a=a, wq=fg.preshuffle(w)):
                    return fg.gemm_a8(a, wq, scale_a=sa_b, scale_b=sb_b, epilogue=epi)
                for cfg in args.configs.split(","):
                    cases.append((f"{kind} {cfg} none", with_plan(functools.partial(ours_block, "none"), cfg)))
                continue
        elif kind == "bf16":  # matmul_fused's kernels against torch.mm (cuBLAS, no epilogue)
            a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)

            def base(a=a, w=w):
                return torch.mm(a, w.t())
            label, refs[kind] = "torch.mm", base()

            def ours(epi, a=a, w=w):
                return fg.matmul_fused(a, w, bias if epi != "none" else None,
                                       activation="silu" if epi != "none" else "none")
        else:
            a = torch.randint(-8, 8, (m, k), device="cuda", dtype=torch.int8)
            w = torch.randint(-8, 8, (n, k), device="cuda", dtype=torch.int8)

            def base(a=a, w=w):
                return torch._int_mm(a, w.t())
            label, refs[kind] = "torch._int_mm", (base().float() * sa[:, None] * sb[None, :]).to(torch.bfloat16)
        if kind != "bf16":
            def ours(epi, a=a, wq=fg.preshuffle(w)):
                return fg.gemm_a8(a, wq, bias if epi != "none" else None, scale_a=sa, scale_b=sb, epilogue=epi)
        cases.append((label, base))
        for cfg in args.configs.split(","):
            for epi in ("none", "bias_silu"):
                cases.append((f"{kind} {cfg} {epi}", with_plan(functools.partial(ours, epi), cfg)))
    for name, fn in cases:  # warm-up: builds, loads, and a sanity check of the identity-epilogue results
        y = fn()
        if name.endswith("none"):
            ref = refs[name.split()[0]]
            err = ((y.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            print(f"{name}: max error relative to max |y| {err:.2e}")
            assert err < 2e-2, name
    torch.cuda.synchronize()
    if args.profile:
        for name, fn in cases:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
    print("cases:", ", ".join(name for name, _ in cases))


if __name__ == "__main__":
    main()
