"""python -m fusedgemm.bench host_overhead: host (CPU) microseconds per eager call, on problems so small that the
GPU's time is not the bound, beside torch's calls of the same work, in one process.

--op gemm_a8 (default): torch.mm, torch._scaled_mm, fusedgemm.gemm_a8 and the launch layer under it at M=16, N=16,
K=64. Each figure is the median over batches of (wall time of `calls` back-to-back calls) / calls, with
torch.cuda.synchronize() between batches; a batch stays at ~1000 calls so the driver's launch queue (about a
thousand pending launches) never fills, or the figure would be kernel time. "kernel us" (one launch timed by CUDA
events) is printed beside it. Before timing, checks (any failure makes the exit status 1): gemm_a8 matches torch;
the bare kernel launched through ctypes (the default) and through cuda-bindings (the fallback) writes the same bytes;
a launch from a fresh thread (no current CUDA context) gives the same bytes; encode_tensor_map_tiled gives the same
128 bytes through both; set_max_dynamic_smem lets the kernel launch with 100 KB of dynamic shared memory.

--op matmul_fused: matmul_fused (bias + SiLU, plain) beside torch.mm, F.linear (+ SiLU) and torch.empty at
16 x 256 x 256 bf16, interleaved batches, then a cProfile of the fast path.

--op bmm_tiny: fusedgemm.bmm_tiny against torch.bmm on batches of tiny GEMMs, then where the hot path's time goes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import traceback

import torch

from .common import gpu_problem, host_us_interleaved

M, N, K = 16, 16, 64
FAILED: list[str] = []


def kernel_us(fn, reps: int = 50) -> float | None:
    """Device time of one call, launched alone (after a sync)."""
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def check(name: str, fn):
    try:
        ok = fn()
    except Exception:
        ok = False
        traceback.print_exc()
    print(f"check {'ok  ' if ok else 'FAIL'} {name}")
    if not ok:
        FAILED.append(name)


def _gemm_a8(args) -> int:
    import fusedgemm as fg
    from fusedgemm.epilogue.codegen import DYN_KINDS
    from fusedgemm.gemm_a8 import preset_values
    from fusedgemm.plan import cdna
    from fusedgemm.runtime import launch
    from fusedgemm.runtime.arch import device_arch
    from fusedgemm.runtime.gemm_spec import preset_kernel

    dev = torch.cuda.current_device()
    arch = device_arch(dev)
    fp8 = fg.FP8_DTYPE_FOR_ARCH[arch]
    torch.manual_seed(0)
    x8 = torch.randn(M, K, device="cuda").to(fp8)
    w8 = torch.randn(N, K, device="cuda").to(fp8)
    wq = fg.preshuffle(w8)
    sa, sb = torch.rand(M, device="cuda"), torch.rand(N, device="cuda")
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    xb, wb = x8.to(torch.bfloat16), w8.to(torch.bfloat16).T
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.current_stream().cuda_stream
    be = launch.backend("nvidia")
    print(f"device: {torch.cuda.get_device_name(dev)} ({arch}); torch {torch.__version__}; "
          f"fusedgemm launch backend: {type(be).__name__}")

    # The bare kernel, through the default backend and through cuda-bindings (same code object, same context).
    # The preset kernel fg.gemm_a8(..., epilogue="bias_silu") runs at this size: fp8 in, bf16 out, SiLU.
    # the mma.sync kernel the CDNA-style plan takes at this size (grid 1 x 1); on sm_90a too, the unit built for it
    spec = preset_kernel(arch, cdna.choose(M, N, K)[0].name, "fp8", "bf16", "silu")
    name, sig, cfg = spec.kernel_name, spec.signature, spec.cfg
    mod = launch.module_for(spec.unit, dev)
    k_default = mod.kernel(name, sig)
    bb = launch._CudaBindingsBackend()
    bb.ensure_context(dev)
    k_bindings = launch.Kernel(bb, bb.function(bb.load(mod.path.read_bytes()), name), name, sig)
    grid, block = (N // cfg.block_n, -(-M // cfg.block_m), 1), cfg.warps * 32
    # A, B, M, N, K, then the epilogue's Params: out, its row stride, and the preset's operands (bf16 bias,
    # per-row and per-column fp32 scales, alpha 1).
    kargs = sig.values_in_order(dict(a=x8.data_ptr(), b=wq.data.data_ptr(), M=M, N=N, K=K, out=out.data_ptr(), ld_out=N,
                                **preset_values(bias.data_ptr(), DYN_KINDS["bf16"], sa.data_ptr(), 1,
                                                sb.data_ptr(), 1, 1.0)))
    tmap_args = (0, 2, x8.data_ptr(), (K, M), (K,), (K, M), (1, 1), 0, 3, 3, 0)  # uint8, 128B swizzle, L2 256B

    def bare(kern, smem=0, threads=block):
        kern(grid, threads, smem, stream, *kargs)
        return out.clone()

    # ---- checks ----
    def gemm_matches_torch():
        y = fg.gemm_a8(x8, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
        ref = torch.nn.functional.silu(x8.float() @ w8.float().T * sa[:, None] * sb[None, :] + bias.float())
        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        print(f"      gemm_a8 vs torch: max abs err / max |ref| = {err:.2e}")
        return err < 2e-2

    def same_bytes_both_backends():
        a, b = bare(k_default), bare(k_bindings)
        return torch.equal(a.view(torch.int16), b.view(torch.int16)) and a.abs().sum().item() > 0

    def fresh_thread_launch():
        ref, res = bare(k_default), []
        out.zero_()

        def work():  # a new thread has no current context: the launch fails once and is retried
            k_default(grid, block, 0, stream, *kargs)
            res.append(True)

        t = threading.Thread(target=work)
        t.start()
        t.join()
        torch.cuda.synchronize()
        return bool(res) and torch.equal(out.view(torch.int16), ref.view(torch.int16))

    def tensor_map_both_backends():
        a, b = launch.encode_tensor_map_tiled(*tmap_args), bb.encode_tensor_map_tiled(*tmap_args)
        return isinstance(a, bytes) and len(a) == 128 and a == b and any(a)

    def tensor_map_error():
        try:
            launch.encode_tensor_map_tiled(0, 2, x8.data_ptr() + 1, (K, M), (K,), (K, M), (1, 1), 0, 3, 3, 0)
        except launch.LaunchError as e:
            print(f"      misaligned address -> {e}"[:200])
            return True
        return False

    def large_dynamic_smem():
        ref = bare(k_default)
        smem = 100 * 1024
        try:  # without the attribute the driver must refuse (> 48 KB)
            bare(k_default, smem)
            print("      note: a 100 KB launch worked before set_max_dynamic_smem")
        except launch.LaunchError:
            pass
        k_default.set_max_dynamic_smem(smem)
        k_default.set_max_dynamic_smem(smem)  # idempotent
        return torch.equal(bare(k_default, smem).view(torch.int16), ref.view(torch.int16))

    def block_tuple():
        return torch.equal(bare(k_default, 0, (block, 1, 1)).view(torch.int16), bare(k_default).view(torch.int16))

    for name_, fn in [("gemm_a8 matches torch", gemm_matches_torch),
                      ("bare kernel: ctypes == cuda-bindings", same_bytes_both_backends),
                      ("launch from a fresh thread (INVALID_CONTEXT retry)", fresh_thread_launch),
                      ("block as (x, y, z)", block_tuple),
                      ("tensor map: ctypes == cuda-bindings", tensor_map_both_backends),
                      ("tensor map: driver error raised as LaunchError", tensor_map_error)]:
        check(name_, fn)

    # ---- timings ----
    cases = {
        "torch.mm (bf16)": lambda: torch.mm(xb, wb),
        "torch._scaled_mm (fp8 rowwise)": lambda: torch._scaled_mm(
            x8, w8.T, scale_a=sa.reshape(-1, 1), scale_b=sb.reshape(1, -1), out_dtype=torch.bfloat16),
        "fg.gemm_a8 bias_silu": lambda: fg.gemm_a8(x8, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu"),
        "fg.gemm_a8 bias_silu out=": lambda: fg.gemm_a8(x8, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu",
                                                         out=out),
        "Kernel.__call__ (ctypes)": lambda: k_default(grid, block, 0, stream, *kargs),
        "Kernel.__call__ (cuda-bindings)": lambda: k_bindings(grid, block, 0, stream, *kargs),
        "encode_tensor_map_tiled (ctypes)": lambda: launch.encode_tensor_map_tiled(*tmap_args),
        "encode_tensor_map_tiled (cuda-bindings)": lambda: bb.encode_tensor_map_tiled(*tmap_args),
        "torch.empty(16, 16)": lambda: torch.empty(M, N, device="cuda", dtype=torch.bfloat16),
    }
    rows = []
    print(f"\nhost us per call: median of {args.batches} interleaved batches x {args.calls} calls")
    print(f"{'':42s} {'host us':>8s} {'kernel us':>10s}")
    # Batches interleaved across the cases: a slow phase of the machine hits every case alike (sequential runs
    # of the same case disagreed by 20-40% between sessions).
    hosts = host_us_interleaved(cases, args.calls, args.batches)
    for case, fn in cases.items():
        try:
            h = hosts[case]
            d = None if case.startswith(("encode", "torch.empty")) else kernel_us(fn)
        except Exception as e:
            print(f"{case:42s} error: {type(e).__name__}: {e}"[:200])
            rows.append({"case": case, "error": f"{type(e).__name__}: {e}"})
            continue
        print(f"{case:42s} {h:8.2f} {'-' if d is None else format(d, '10.2f'):>10s}")
        rows.append({"case": case, "host_us": h, "kernel_us": d})

    # After the timings: raising the attribute must not colour them.
    check("set_max_dynamic_smem allows a 100 KB launch", large_dynamic_smem)

    host = {r["case"]: r.get("host_us") for r in rows}
    ours, mm = host.get("fg.gemm_a8 bias_silu"), host.get("torch.mm (bf16)")
    if ours and mm:
        print(f"\ngemm_a8 / torch.mm host time: {ours / mm:.2f} (target: <= 1.00)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "arch": arch, "torch": torch.__version__,
                       "backend": type(be).__name__, "batches": args.batches, "calls": args.calls, "rows": rows,
                       "failed_checks": FAILED}, f, indent=1)
    if FAILED:
        print(f"FAILED checks: {FAILED}")
    return 1 if FAILED else 0


def _warm_clocks() -> None:
    """~0.2 s of GPU work first: an idle GPU starts these loops at a few hundred MHz, where a tiny kernel takes
    longer than its launch and the loop measures the GPU, not the host path (seen on the H100: 18.6 us per call
    in a cold loop, 11.9 in the same loop after other work)."""
    x = torch.randn(4096, 4096, device="cuda")
    t = time.perf_counter()
    while time.perf_counter() - t < 0.2:
        x @ x
        torch.cuda.synchronize()


def per_call(fn, calls=2000, batches=15) -> float:
    _warm_clocks()
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


def _bmm_tiny(args) -> int:
    import fusedgemm as fg

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
    _breakdown()
    return 0


def _breakdown() -> None:
    import fusedgemm as fg
    """Where the hot path's time goes (1024 x 12x12x64): each piece alone in a loop of its own."""
    from fusedgemm import tiny_bmm
    from fusedgemm.runtime.device import current_raw_stream

    a = torch.randn(1024, 12, 64, device="cuda")
    b = torch.randn(1024, 64, 12, device="cuda")
    out = fg.bmm_tiny(a, b)
    hit = next(iter(tiny_bmm._FAST.values()))
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


def _matmul_fused(args) -> int:
    import cProfile
    import pstats

    import torch.nn.functional as F

    import fusedgemm as fg

    dt = torch.bfloat16
    xs, ws, bs = (torch.randn(*s, device="cuda").to(dt) for s in ((16, 256), (256, 256), (256,)))
    fns = {"matmul_fused bias silu": lambda: fg.matmul_fused(xs, ws, bs, activation="silu"),
           "matmul_fused plain": lambda: fg.matmul_fused(xs, ws),
           "F.linear + silu": lambda: F.silu(F.linear(xs, ws, bs)),
           "F.linear": lambda: F.linear(xs, ws, bs),
           "torch.mm": lambda: torch.mm(xs, ws.t()),
           "torch.empty": lambda: torch.empty(16, 256, dtype=dt, device=xs.device)}
    print(f"host us per call, median of {args.batches} interleaved batches x {args.calls} calls, three rounds")
    for _ in range(3):
        print({k: round(v, 1) for k, v in host_us_interleaved(fns, args.calls, args.batches).items()}, flush=True)
    f = fns["matmul_fused bias silu"]
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        f()
    pr.disable()
    torch.cuda.synchronize()
    pstats.Stats(pr).sort_stats("tottime").print_stats(12)
    return 0


OPS = {"gemm_a8": _gemm_a8, "matmul_fused": _matmul_fused, "bmm_tiny": _bmm_tiny}


def run(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedgemm.bench host_overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", choices=list(OPS), default="gemm_a8", help="which op's host path to time (default gemm_a8)")
    p.add_argument("--batches", type=int, default=20, help="timed batches; the median is reported (default 20)")
    p.add_argument("--calls", type=int, default=1000, help="back-to-back calls per batch (default 1000)")
    p.add_argument("--json", metavar="FILE", help="write the results here (--op gemm_a8)")
    args = p.parse_args(argv)
    problem = gpu_problem("host_overhead")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return OPS[args.op](args)
