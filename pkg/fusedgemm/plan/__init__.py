"""Plans: which tile config and split-K factor a gemm_a8 call takes, one module per arch family (sm90.py,
cdna.py), after the tuned table of measured exceptions (tuned.py). `FUSEDGEMM_PRINT_CONFIGS=1` prints each choice
and what made it; `forced_config` pins one (tests, the bench)."""
from __future__ import annotations

import contextlib
import os

from ..runtime import kernels
from ..runtime.arch import device_arch
from ..runtime.build import UNIT_ARCHES
from . import cdna, sm90, tuned

SPLITS = (1, 2, 4, 8)  # split-K factors = cluster sizes (8 is the portable cluster limit)
_PRINT_CONFIGS = os.environ.get("FUSEDGEMM_PRINT_CONFIGS", "") not in ("", "0")
_FORCED: tuple[str, int] | None = None  # (config name, splits) pinned by forced_config


def forced() -> tuple[str, int] | None:
    return _FORCED


@contextlib.contextmanager
def forced_config(name: str, splits: int = 1):
    """Run gemm_a8 calls inside the block with one tile config and split-K factor (tests cover every config
    the heuristic can pick this way; the bench compares plans). Not thread-safe: tests and tools only."""
    global _FORCED
    if name not in kernels.GEMM_CONFIGS:
        raise ValueError(f"unknown gemm_a8 config {name!r}; expected one of {sorted(kernels.GEMM_CONFIGS)}")
    cfg = kernels.GEMM_CONFIGS[name]
    if splits not in SPLITS or (splits > 1 and not cfg.splits_k):
        raise ValueError(f"splits must be one of {SPLITS} (> 1 only for the sm_90 wgmma configs that are neither "
                         f"persistent nor B-multicast pairs), got {splits} for {name}")
    saved, _FORCED = _FORCED, (name, splits)
    try:
        yield
    finally:
        _FORCED = saved


def with_plan(fn, name: str, splits: int = 1):
    """fn wrapped to run under forced_config(name, splits) on every call: one callable per plan, for timing plans
    side by side (the bench's --compare-plans, tools/probes/ncu_compare.py)."""
    def run(*args, **kwargs):
        with forced_config(name, splits):
            return fn(*args, **kwargs)
    return run


def plans(arch: str, in_kind: str = "fp8") -> list[tuple[str, int]]:
    """Every (config name, split-K factor) the heuristic may choose on `arch` for input kind `in_kind` (the GPU
    tests run each): gemm_a8's for fp8 / int8 (the default), matmul_fused's for bf16 / fp16 / tf32. A config
    that does not serve the kind (tile_128x256: the 16/32-bit kinds only) is left out."""
    wide = in_kind in kernels.MATMUL_IN
    if in_kind not in (*kernels.ALL_IN, *kernels.SPLIT_IN):
        raise ValueError(f"in_kind must be one of {', '.join((*kernels.ALL_IN, *kernels.SPLIT_IN))}, got {in_kind!r}")
    out = []
    for name, cfg in kernels.GEMM_CONFIGS.items():
        if not cfg.serves(in_kind):
            continue
        if cfg.sm90:
            out += [(name, s) for s in (SPLITS if cfg.splits_k else SPLITS[:1])] if arch == "sm_90a" else []
        elif arch != "sm_90a":
            out.append((name, 1))
        elif name == "portable_128x128" and not wide:  # sm_90a keeps one mma.sync config reachable for gemm_a8, tested;
            out.append((name, 1))  # matmul_fused runs on the wgmma configs only there
    return out


def choose_config(m: int, n: int, k: int, arch: str = "sm_90a", sms: int = 132,
                  persistent_ok: bool = True, in_kind: str = "fp8") -> tuple[kernels.TileConfig, int]:
    """-> (tile config, split-K factor): the pinned plan, else the arch's heuristic for input kind `in_kind`.
    persistent_ok: the epilogue fits the persistent config's staged values."""
    if _FORCED is not None:
        name, splits = _FORCED
        cfg = kernels.GEMM_CONFIGS[name]
        built_for = UNIT_ARCHES.get(cfg.unit)
        if built_for is not None and arch not in built_for:  # else a compile error deep in the build
            raise ValueError(f"forced_config({name!r}): that config is built only for {', '.join(built_for)}, "
                             f"not {arch}")
        return cfg, splits
    if arch == "sm_90a":
        cfg, splits = sm90.choose(m, n, k, sms, persistent_ok, in_kind)
    else:
        cfg, splits = cdna.choose(m, n, k, arch, in_kind)
    if _PRINT_CONFIGS:
        print(f"[fusedgemm] gemm_a8 M={m} N={n} K={k} {in_kind} -> {cfg.name} split-K {splits} (heuristic)")
    return cfg, splits


_SM_COUNT: dict[int, int] = {}
_GPU_NAME: dict[int, str] = {}


def sm_count(device_index: int) -> int:
    n = _SM_COUNT.get(device_index)
    if n is None:
        import torch

        n = _SM_COUNT[device_index] = torch.cuda.get_device_properties(device_index).multi_processor_count
    return n


def gpu_name(device_index: int) -> str:
    name = _GPU_NAME.get(device_index)
    if name is None:
        import torch

        name = _GPU_NAME[device_index] = torch.cuda.get_device_name(device_index)
    return name


def tuned_plan(m: int, n: int, k: int, gpu: str, arch: str, persistent_ok: bool,
               in_kind: str) -> tuple[kernels.TileConfig, int] | None:
    """The tuned table's plan for this problem on this GPU, if it has one that can run here: a config of this arch
    that serves the kind, a split the arch's plans list (so the GPU tests ran it), and, if persistent, an epilogue
    that fits its staging."""
    hit = tuned.lookup(gpu, in_kind, n, k, m)
    if hit is None or _FORCED is not None:
        return None
    cfg = kernels.GEMM_CONFIGS.get(hit[0])
    if cfg is None or hit not in plans(arch, in_kind) or (cfg.persistent and not persistent_ok):
        return None
    if _PRINT_CONFIGS:
        print(f"[fusedgemm] gemm_a8 M={m} N={n} K={k} {in_kind} -> {cfg.name} split-K {hit[1]} (tuned: {gpu})")
    return cfg, hit[1]


def plan_for(m: int, n: int, k: int, device_index: int, persistent_ok: bool = True,
             in_kind: str = "fp8") -> tuple[kernels.TileConfig, int]:
    """The (tile config, split-K) a call of this shape and input kind takes on device `device_index`: the pinned
    plan, else the tuned table's for this GPU, else the arch's heuristic."""
    arch = device_arch(device_index)
    hit = tuned_plan(m, n, k, gpu_name(device_index), arch, persistent_ok, in_kind)
    if hit is not None:
        return hit
    return choose_config(m, n, k, arch, sm_count(device_index) if arch == "sm_90a" else 0, persistent_ok, in_kind)
