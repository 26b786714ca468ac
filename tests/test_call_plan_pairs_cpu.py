"""CallPlan's launch shape for the B-multicast pair configs, on the CPU (the kernel and the plan mocked): the grid is
(2 x column tiles, pairs of row blocks) in clusters of two along x, a persistent (or tile-loop) pair grid is a whole
number of clusters, and B's box holds half the tile (half the rows of a plain B, half the K chunks of a preshuffled
one)."""
import types

import pytest
import torch

import fusedgemm.plan.call as cp
from fusedgemm.checks import preset_values
from fusedgemm.runtime import kernels
from fusedgemm.epilogue.presets import spec_for_activation


@pytest.fixture
def launches(monkeypatch):
    binds = []

    def kernel_for(dev, spec):
        def bind(grid, cluster, block, smem):
            binds.append((spec.cfg.name, grid, cluster, block, smem))
            return lambda *args: None
        return types.SimpleNamespace(signature=spec.signature, bind=bind)

    monkeypatch.setattr(cp, "kernel_for", kernel_for)
    monkeypatch.setattr(cp, "sm_count", lambda dev: 132)
    return binds


def make_plan(monkeypatch, config, kind, m, n, k):
    monkeypatch.setattr(cp, "plan_for", lambda *a, **kw: (kernels.GEMM_CONFIGS[config], 1))
    out = torch.bfloat16
    return cp.CallPlan(0, "sm_90a", kind, m, n, k, out, spec_for_activation("silu"),
                       preset_values(0, 0, 0, 0, 0, 0, 1.0), ("out",))


@pytest.mark.parametrize("config, kind, m, n, k, grid, cluster, box_rows, chunks", [
    # 3 row blocks -> 2 pairs (the last pair's second CTA has no rows); 3 column tiles -> 6 CTAs along x
    ("pair_128x256", "bf16", 300, 600, 264, (6, 2, 1), (2, 1, 1), 128, 8),
    ("tile_128x256", "bf16", 300, 600, 264, (3, 3, 1), (1, 1, 1), 256, 8),
    # persistent pairs: one wave, a whole number of clusters; preshuffled B: half the K chunks per CTA
    ("pair_persistent_128x128", "fp8", 1900, 2064, 1040, (132, 1, 1), (2, 1, 1), 128, 4),
    ("pair_persistent_128x128", "bf16", 1900, 2064, 1040, (132, 1, 1), (2, 1, 1), 64, 8),
    ("persistent_128x128", "fp8", 1900, 2064, 1040, (132, 1, 1), (1, 1, 1), 128, 8),
    ("pair_persistent_128x128", "fp8", 300, 256, 1040, (8, 1, 1), (2, 1, 1), 128, 4),  # 2 x 2 pair units: 8 CTAs
    # tile-loop configs: one wave like the persistent ones (pairs: a whole number of clusters)
    ("pair_loop_128x256", "bf16", 1900, 2064, 1040, (132, 1, 1), (2, 1, 1), 128, 8),
    ("pair_loop_128x256", "bf16", 300, 600, 264, (12, 1, 1), (2, 1, 1), 128, 8),  # 3 x 2 pair units: 12 CTAs
    ("loop_128x256", "bf16", 1900, 2064, 1040, (132, 1, 1), (1, 1, 1), 256, 8),
    ("loop_128x256", "bf16", 300, 600, 264, (9, 1, 1), (1, 1, 1), 256, 8),
])
def test_pair_grids_clusters_and_b_boxes(monkeypatch, launches, config, kind, m, n, k, grid, cluster, box_rows,
                                         chunks):
    plan = make_plan(monkeypatch, config, kind, m, n, k)
    ((name, got_grid, got_cluster, _block, _smem),) = launches
    assert (name, got_grid, got_cluster) == (config, grid, cluster)
    assert got_grid[0] % got_cluster[0] == 0
    assert (plan.b_box_rows, plan.b_chunks) == (box_rows, chunks)
