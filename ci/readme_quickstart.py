#!/usr/bin/env python3
"""Run README.md's Quick start on a GPU: every ```python block of that section, in order, in one namespace
(so the README stays true). Prints one line per block; exits non-zero on the first failure."""
import re
import sys
import time
from pathlib import Path

text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```python\n(.*?)```", section, re.S)
namespace: dict = {}
for i, code in enumerate(blocks):
    t = time.perf_counter()
    exec(compile(code, f"README quick start block {i}", "exec"), namespace)
    print(f"block {i}: ok ({time.perf_counter() - t:.1f} s, {len(code.splitlines())} lines)", flush=True)
if "h" in namespace:  # matmul_fused's expression example: relu(x @ w.T + bn) * r, in float64 on the GPU
    import torch

    ns = namespace
    ref_h = torch.relu(ns["x"].double() @ ns["w"].double().T + ns["bn"].double()) * ns["r"].double()
    err_h = ((ns["h"].double() - ref_h).norm() / ref_h.norm()).item()
    print(f"matmul_fused expression example: rel error vs float64 {err_h:.2e}")
    if err_h > 1e-2:
        sys.exit(1)
if "ref" in namespace and "y" in namespace:
    import torch

    err = ((namespace["y"].cpu().double() - namespace["ref"]).norm() / namespace["ref"].norm()).item()
    print(f"expression example: rel error vs E.evaluate {err:.2e}")
    sys.exit(0 if err < 1e-2 else 1)
