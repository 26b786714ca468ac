#!/usr/bin/env python3
"""GPU accuracy report for closing notes: worst relative error per dtype over dtype x epilogue x out_dtype x
shapes, beside the BLAS + separate-epilogue path's error on the same inputs. Run on the GPU machine from the
repository root: python3 scripts/gpu/accuracy_report.py"""
import itertools
import sys

import torch

sys.path.insert(0, "tests")
import fusedgemm as fg  # noqa: E402
from test_gpu_gemm_a8 import ONE_ROUNDING, blas_plus_epilogue, run_and_check  # noqa: E402

print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
worst = {}
count = 0
for kind, epi, od, (m, n, k) in itertools.product(
        ["fp8", "int8"], fg.EPILOGUES, [torch.bfloat16, torch.float16],
        [(1, 1040, 4096), (33, 48, 16384), (1000, 1040, 512), (64, 4096, 4096)]):
    err, (a, w, wq, bias, sa, sb, got, ref) = run_and_check(kind, m, n, k, epilogue=epi, out_dtype=od)
    base = float("nan")
    if m > 16:
        from fusedgemm.reference import rel_error
        base = rel_error(blas_plus_epilogue(a, w, bias, sa, sb, epi, od), ref)
    key = (kind, str(od).replace("torch.", ""))
    if err > worst.get(key, (0,))[0]:
        worst[key] = (err, epi, (m, n, k), base)
    assert err <= ONE_ROUNDING[od], (kind, epi, od, m, n, k, err)
    count += 1
print(f"{count} cases, every one within one rounding of the float64 oracle")
print(f"{'dtype':6} {'out':9} {'worst rel err':>13}  {'epilogue':14} {'shape':18} {'blas+epi err':>12}")
for (kind, od), (err, epi, shape, base) in sorted(worst.items()):
    print(f"{kind:6} {od:9} {err:13.3e}  {epi:14} {str(shape):18} {base:12.3e}")
