"""fusedgemm.pending: kernel paths built and CPU-checked but not yet run on a GPU are not taken by default -- the
sm_90a calls that would need them are refused by name (gate / up pairs with a block scale_b, grouped block scales),
or (out_group) planned on the CTA-per-tile tiles -- and emptying PENDING_GPU_RUN turns them on. No GPU needed: the
arch is patched, and every check here runs before a launch."""
from __future__ import annotations

import pytest
import torch

import fusedgemm as fg
from fusedgemm import pending

FP8 = torch.float8_e4m3fn


def test_every_pending_path_is_documented():
    assert pending.PENDING_GPU_RUN and all(p in pending.__doc__ for p in pending.PENDING_GPU_RUN)


def test_block_scaled_pair_on_sm90_is_refused_by_name():
    from fusedgemm.checks import check_gemm_a8_args

    a, w = torch.zeros(4, 256).to(FP8), fg.preshuffle(torch.zeros(512, 256).to(FP8))
    with pytest.raises(NotImplementedError, match="sm90_block_scaled_pairs"):
        check_gemm_a8_args(a, w, None, None, torch.ones(4, 2), "silu(gate) * up", torch.bfloat16, None, arch="sm_90a")
    check_gemm_a8_args(a, w, None, None, torch.ones(4, 2), "silu(gate) * up", torch.bfloat16, None, arch="gfx950")


def test_grouped_block_scales_on_sm90_are_refused_by_name(monkeypatch):
    import fusedgemm.grouped as grouped

    monkeypatch.setattr(grouped, "arch_of", lambda *_args: "sm_90a")
    x, w = torch.randn(10, 320).to(FP8), torch.randn(3, 256, 320).to(FP8)
    offs = torch.tensor([3, 3, 10], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="sm90_grouped_block_scales"):
        fg.grouped_gemm_a8(x, fg.preshuffle(w), offs=offs, scale_a=torch.rand(10, 3), scale_b=torch.rand(3, 2, 3))
    with pytest.raises(NotImplementedError, match="sm90_grouped_block_scales"):
        fg.grouped_swiglu(x, w, offs=offs, scale_a=torch.rand(10, 3), scale_b=torch.rand(3, 2, 3))


@pytest.mark.parametrize("held", [True, False])
def test_out_group_keeps_the_tiles_while_the_persistent_store_is_pending(monkeypatch, held):
    """A shape whose plan is persistent_128x128: the group-quantised call takes it only once the path is cleared."""
    import fusedgemm.plan as plan
    from fusedgemm.out_groups import group_config
    from fusedgemm.runtime.kernels import GEMM_CONFIGS

    monkeypatch.setattr(plan, "plan_for", lambda *_a, **_k: (GEMM_CONFIGS["persistent_128x128"], 1))
    monkeypatch.setattr(plan, "sm_count", lambda _dev: 132)
    if not held:
        monkeypatch.setattr(pending, "PENDING_GPU_RUN", set())
    got = group_config(False, "sm_90a", 4096, 4096, 0, k=4096)
    assert got == ("tile_128x128" if held else "persistent_128x128")
