"""fg.nn.FusedMoE on a GPU: the fused path (two grouped GEMMs) against the transformers block's own forward, bf16,
for Mixtral, Qwen3-MoE (norm_topk_prob on / off) and Qwen2-MoE with its shared expert; the block is built as
tests/test_moe_module.py builds it (tiny sizes, random parameters)."""
import pytest
import torch

from fusedgemm.nn import FusedMoE

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")
moe_cpu = pytest.importorskip("test_moe_module")


@pytest.mark.parametrize("kind,norm", moe_cpu.CASES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 37), (4, 256)])
def test_fused_forward_matches_the_block(kind, norm, shape, monkeypatch):
    calls = []
    real = moe_cpu.MOE.grouped_swiglu
    monkeypatch.setattr(moe_cpu.MOE, "grouped_swiglu", lambda *a, **k: calls.append(1) or real(*a, **k))
    b = moe_cpu.block(kind, norm, torch.bfloat16).cuda()
    moe = FusedMoE.from_module(b)
    x = moe_cpu.inputs(shape, torch.bfloat16).cuda()
    with torch.inference_mode():
        got = moe(x)
        want = b(x)
        want = want[0] if isinstance(want, tuple) else want
    got = got[0] if isinstance(got, tuple) else got
    assert calls, "forward fell back to the block on a GPU"
    assert got.shape == want.shape and got.dtype == want.dtype
    moe_cpu.close(got, want, 3e-2)


@pytest.mark.parametrize("kind,norm", moe_cpu.CASES)
@pytest.mark.parametrize("dtype", ["fp8", "int8"])
def test_8bit_experts_on_the_gpu(kind, norm, dtype):
    """FusedMoE.from_module(block, dtype=...) on a GPU: quantize_rows + the 8-bit grouped kernels, within 8-bit
    rounding of the bf16 block (the CPU test holds the pipeline to its torch transcription exactly)."""
    b = moe_cpu.block(kind, norm, torch.bfloat16).cuda()
    moe = FusedMoE.from_module(b, dtype=dtype)
    x = moe_cpu.inputs((3, 37), torch.bfloat16).cuda()
    with torch.inference_mode():
        got = moe(x)
        want = b(x)
    want = want[0] if isinstance(want, tuple) else want
    moe_cpu.close(got, want, 0.15 if dtype == "fp8" else 0.06)


@pytest.mark.parametrize("kind", ["qwen3", "deepseek"])
def test_cuda_graph_replays_with_new_routing(kind):
    """The fused path has no host sync: one capture, then replays with new inputs (so new routing and new group
    sizes) each match the block."""
    b = moe_cpu.block(kind, True, torch.bfloat16).cuda()
    moe = FusedMoE.from_module(b)
    x = moe_cpu.inputs((2, 24), torch.bfloat16).cuda()
    with torch.inference_mode():
        moe(x)  # kernels compiled and plans made outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = moe(x)
        for seed in (3, 4, 5):
            x.copy_(moe_cpu.inputs((2, 24), torch.bfloat16, seed=seed).cuda())
            graph.replay()
            want = b(x)
            moe_cpu.close(y, want[0] if isinstance(want, tuple) else want, 3e-2)
