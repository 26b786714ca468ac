"""Kernel paths that are built and checked on the CPU (their SASS, registers, no spills, argument layout) but have
not yet run on a GPU: the session that wrote them was lent no machine. Until a GPU run of their tests passes, the
default plan does not take them and calls that would need them are refused by name; the GPU tests (and anyone who
wants to try them) turn them on by emptying PENDING_GPU_RUN. Each entry names the tests that clear it.

    sm90_persistent_out_group   gemm_a8(..., out_group=128) on the persistent 128 x 128 kernels (store_parked_groups,
                                sm90_gemm_persistent.hpp); meanwhile the CTA-per-tile tiles take those calls, and a
                                pinned persistent config runs it. tests/test_gpu_out_groups.py
    sm90_block_scaled_pairs     a gate / up pair with a block scale_b on sm_90a (two scale_b values per tile,
                                BlockScaleRows kPairs). tests/test_gpu_blockscale.py, tests/test_gpu_grouped.py
    sm90_grouped_block_scales   grouped_gemm_a8 / grouped_swiglu with block scales on sm_90a (BlockScaled grouped
                                kernels). tests/test_gpu_grouped.py
    sm90_grouped_persistent     grouped GEMMs on the persistent configs (GroupedPersistent<Config>: the group table,
                                gemm_groups.hpp); meanwhile only a pinned config asks for them, and is refused.
                                tests/test_gpu_grouped.py::test_persistent_configs
"""
from __future__ import annotations

PENDING_GPU_RUN: set[str] = {"sm90_persistent_out_group", "sm90_block_scaled_pairs", "sm90_grouped_block_scales",
                             "sm90_grouped_persistent"}


def pending(path: str) -> bool:
    """Whether kernel path `path` (a name above) still waits for its first GPU run."""
    return path in PENDING_GPU_RUN


def refuse(op: str, path: str, what: str) -> None:
    """A clear error for a call that needs a pending path."""
    if pending(path):
        raise NotImplementedError(
            f"{op}: {what} on sm_90a is built but has not yet run on a GPU, so it is not taken by default "
            f"(fusedgemm.pending: '{path}'). To run it anyway: fusedgemm.pending.PENDING_GPU_RUN.discard('{path}')")
