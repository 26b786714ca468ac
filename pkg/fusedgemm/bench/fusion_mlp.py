"""python -m fusedgemm.bench fusion_mlp: the fusion decision on the Llama MLP (4096 / 14336, bf16) alone. Eager against
fg.fuse under FUSEDGEMM_FUSION=auto (the measured decision), never (the region's own torch ops) and always (the SwiGLU
kernel), timed rep by rep in one process (CUDA events, L2 flushed); the decision's own measurement (device and host
us, fused / unfused); and the host's issue time per call of each path. Needs transformers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from .common import Timer, gpu_problem


def run(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusedgemm.bench fusion_mlp", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="*", default=[2048, 4096],
                    help="token counts (M) to run, one row each (default: 2048 4096)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per mode, rep by rep; medians (default 20)")
    args = ap.parse_args(argv)
    problem = gpu_problem("fusion_mlp")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    import logging

    import transformers

    logging.basicConfig(level=logging.WARNING)
    log = logging.getLogger("fusedgemm.fusion")  # each decision's measured times, not every unfused call's note
    log.setLevel(logging.INFO)
    log.addFilter(lambda r: r.getMessage().startswith(("fusion timing", "fusion decision")))

    import fusedgemm as fg

    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=1,
                                   num_attention_heads=32, num_key_value_heads=8, vocab_size=1000)
    torch.manual_seed(0)
    mlp = transformers.models.llama.modeling_llama.LlamaMLP(cfg).cuda().bfloat16().eval()
    fused = fg.fuse(mlp)
    timer = Timer(reps=args.reps, warmup=3)
    print(f"{torch.cuda.get_device_name()}: Llama MLP 4096 / 14336 bf16, device us (median, rep by rep)")
    print(f"{'tokens':>7} {'eager':>8} {'auto':>8} {'never':>8} {'always':>8}   auto's decision")
    for t in args.tokens:
        h = torch.randn(t, 4096, device="cuda", dtype=torch.bfloat16)

        def under(mode):
            def run():
                os.environ["FUSEDGEMM_FUSION"] = mode
                return fused(h)
            return run

        with torch.no_grad():
            under("auto")()  # the decision is measured on the first call
            decision = " | ".join(s.line() for s in fused.fusion_report.sites if s.fused)
            from fusedgemm.fusion import execute
            bucket = f"M<={1 << max(0, (t - 1).bit_length())}|"
            decision += "".join(f"; measured fused / unfused us {v['us']}" for k, v in execute._load_decisions().items()
                                if bucket in k)
            runs = [lambda: mlp(h), under("auto"), under("never"), under("always")]
            times = timer.interleaved(runs)
            os.environ["FUSEDGEMM_FUSION"] = "auto"
        print(f"{t:>7} " + " ".join(f"{x:8.1f}" for x in times) + f"   {decision}", flush=True)
        host = {}
        with torch.no_grad():
            for mode in ("never", "always"):
                samples = []
                for _ in range(7):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    under(mode)()
                    samples.append((time.perf_counter() - t0) * 1e6)
                host[mode] = statistics.median(samples)
        os.environ["FUSEDGEMM_FUSION"] = "auto"
        print(f"{'':>7} host us per call (issue, from an idle GPU): never {host['never']:.1f}, "
              f"always {host['always']:.1f}", flush=True)
    return 0

