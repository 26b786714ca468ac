#!/usr/bin/env python3
"""Host time of one bmm_tiny launch (--batch x 12x12x64; the default 8 keeps each kernel far shorter than its
launch, so the loops measure the host) by the driver-call form: the bound launch
(packed buffer through `extra`), the same ctypes call without the Python wrappers, kernelParams (an array of
pointers into the packed buffer), cuLaunchKernelEx, and torch's own launch of a spin kernel as a reference.
Median us per call over batches of back-to-back calls. Run on a GPU machine."""
import ctypes
import statistics

import torch

import fusedgemm as fg
from fusedgemm import tiny_bmm
from fusedgemm.runtime import kernels, launch as L
from fusedgemm.runtime.device import current_raw_stream
from fusedgemm.bench.host_overhead import per_call


def main():
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    batch = p.parse_args().batch
    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(30):  # GPU clocks up (an idle GPU starts at a few hundred MHz)
        x @ x
    a = torch.randn(batch, 12, 64, device="cuda")
    b = torch.randn(batch, 64, 12, device="cuda")
    out = fg.bmm_tiny(a, b)
    hit = next(iter(tiny_bmm._FAST.values()))
    kern, grid, threads, smem, args = tiny_bmm._cached_launch(a, b)
    be, func = kern._be, kern._func
    sig = kernels.BMM_TINY
    full = (a.data_ptr(), b.data_ptr(), out.data_ptr(), *args)
    buf = ctypes.create_string_buffer(sig.struct.size)
    sig.struct.pack_into(buf, 0, *full)
    size = ctypes.c_size_t(sig.struct.size)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(size), 0)
    extra_ptr = ctypes.c_void_p(ctypes.addressof(extra))
    params = (ctypes.c_void_p * len(sig.params))(*[ctypes.addressof(buf) + off for off in sig.offsets])
    params_ptr = ctypes.c_void_p(ctypes.addressof(params))
    gx, gy, gz = grid
    V = ctypes.c_void_p
    stream = current_raw_stream(0)
    sv = V(stream)
    launch_k, launch_ex = be.cuLaunchKernel, be.cuLaunchKernelEx
    cfg = L._LaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
    cfg.sharedMemBytes, cfg.hStream, cfg.numAttrs = smem, stream, 0
    cfg_ptr = V(ctypes.addressof(cfg))
    pa, pb, pc = full[:3]
    variants = {
        "bound launch": lambda: hit.launch(current_raw_stream(0), pa, pb, pc),
        "ctypes extra": lambda: launch_k(func, gx, gy, gz, threads, 1, 1, smem, sv, None, extra_ptr),
        "ctypes kernelParams": lambda: launch_k(func, gx, gy, gz, threads, 1, 1, smem, sv, params_ptr, None),
        "cuLaunchKernelEx extra": lambda: launch_ex(cfg_ptr, func, None, extra_ptr),
        "cuLaunchKernelEx kernelParams": lambda: launch_ex(cfg_ptr, func, params_ptr, None),
        "torch.cuda._sleep(0)": lambda: torch.cuda._sleep(0),
        "torch.empty": lambda: torch.empty(batch, 12, 12, device=hit.device),
        "fg.bmm_tiny": lambda: fg.bmm_tiny(a, b),
        "torch.bmm": lambda: torch.bmm(a, b),
    }
    ref = torch.bmm(a, b)
    for name, fn in variants.items():
        if "ctypes" in name or "Ex" in name:
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            assert torch.allclose(out, ref, atol=1e-4), name  # each form launches the same, correct kernel
    rounds = {name: [] for name in variants}
    for _ in range(3):
        for name, fn in variants.items():
            rounds[name].append(per_call(fn))
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; us per call, median of 3 rounds")
    for name, ts in rounds.items():
        print(f"  {name:32s} {statistics.median(ts):6.2f}   ({', '.join(f'{t:.2f}' for t in ts)})")


if __name__ == "__main__":
    main()
