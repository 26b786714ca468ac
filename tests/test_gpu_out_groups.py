"""gemm_a8 / grouped_gemm_a8 (out_group=128) on an sm_90a GPU (skipped without one): the output written as the next
layer's 1x128 block-quantised fp8 input by the wgmma kernels' epilogue (sm90_gemm_stores.hpp store_groups; the
persistent kernels' sm90_gemm_persistent.hpp store_parked_groups), outputs
poisoned, checked twice: against quantize_rows of the same kernel's fp32 output (the op's contract: same config, so
the same sums and activations; equal but for FMA contraction) and, dequantised, against the float64 oracle
(check_dequantized: sm_90a's activations use the fast hardware tanh / exp). A gate / up pair's, and decode-size
calls, run as the GEMM to fp32 then quantize_rows (out_groups.two_kernels)."""
from __future__ import annotations

import pytest
import torch

import fusedgemm as fg
import fusedgemm.epilogue as E
from fusedgemm.reference import block_scaled_acc
from poisoned_outputs import POISON_BYTE, check_group_codes, poisoned_outputs

pytestmark = pytest.mark.gpu

FP8 = torch.float8_e4m3fn
# (M, N, K): ragged rows and a last group of 16 columns; one partial K block; decode; both tiles the plan picks
# (tile_128x128 once the 128 x 128 tiles fill the SMs twice: 2048 x 4096).
SHAPES = ((131, 144, 320), (37, 256, 96), (1, 512, 1024), (2048, 4096, 512))


@pytest.fixture(autouse=True)
def gpu_run_of_pending_paths(monkeypatch):
    """These tests are the first GPU run of the paths fusedgemm.pending holds back: turn them on."""
    from fusedgemm import pending

    monkeypatch.setattr(pending, "PENDING_GPU_RUN", set())


@pytest.fixture(autouse=True)
def sm90():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from fusedgemm.runtime.arch import device_arch

    if device_arch(torch.cuda.current_device()) != "sm_90a":
        pytest.skip("the sm_90a kernels")


def _rand(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).cuda()


def check_dequantized(codes, scales, y64, what, rel=2e-3):
    """codes * scales against the float64 oracle y64, element by element: within half an fp8 step of the value
    (2^-4 relative) plus `rel` of its group's max |y| (sm_90a's fast tanh / exp are ~5e-4 relative to 1, so SiLU's
    negative tail is off by an absolute amount: code-by-code comparisons fail there by many small steps). Poison
    left anywhere fails."""
    assert not scales.isnan().any(), f"{what}: scales never written"
    assert not (codes.view(torch.uint8) == POISON_BYTE[codes.dtype]).any(), f"{what}: codes never written"
    y64 = y64.to(codes.device)
    n = codes.shape[-1]
    per_col = scales.repeat_interleave(128, dim=-1)[..., :n].double()
    got = codes.double() * per_col
    pad = -n % 128
    groups = torch.nn.functional.pad(y64.abs(), (0, pad)).unflatten(-1, (-1, 128)).amax(-1)
    bound = 2.0 ** -4 * y64.abs() + rel * groups.repeat_interleave(128, dim=-1)[..., :n] + 1e-30
    worst = ((got - y64).abs() / bound).max().item()
    assert worst <= 1.0, f"{what}: dequantised codes off by {worst:.2f}x the bound"


def _check(codes, scales, y64, what, call, k, **plan):
    """codes, scales against the oracle (loosely) and against quantize_rows of call(out_dtype=float32) -- the same
    kernel's fp32 output, on the tile the group-quantised call took (group_config of K and `plan`: block_scaled,
    in_kind) -- strictly."""
    from fusedgemm.out_groups import group_config, two_kernels
    from fusedgemm.plan import forced_config

    check_dequantized(codes, scales, y64, what)
    m, n, dev = codes.shape[-2] if codes.dim() == 2 else None, codes.shape[-1], torch.cuda.current_device()
    tile = None  # the grouped calls, and the calls that run as GEMM + quantize_rows: the plan's own tile
    if m is not None and not two_kernels("sm_90a", False, m, n, dev):
        tile = group_config(False, "sm_90a", m, n, dev, k=k, **plan)
    if tile is not None:
        with forced_config(tile):
            y32 = call(out_dtype=torch.float32)
    else:  # the grouped calls: the plan's own tile either way
        y32 = call(out_dtype=torch.float32)
    check_group_codes(codes, scales, y32.double(), f"{what} (own fp32 output)", rtol=1e-6, max_differ=1e-3)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_fp8_bias_silu_per_channel(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    a, w = _rand(g, m, k, scale=2).to(FP8), _rand(g, n, k, scale=2).to(FP8)
    bias, sa, sb = _rand(g, n), torch.rand(m, generator=g).cuda() + 0.5, torch.rand(n, generator=g).cuda() + 0.5
    wq = fg.preshuffle(w)

    def call(**kw):
        return fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", **kw)

    with poisoned_outputs():
        codes, scales = call(out_group=128)
    assert codes.shape == (m, n) and codes.dtype == FP8 and scales.shape == (m, -(-n // 128))
    pre = (a.double() @ w.double().T) * sa.double()[:, None] * sb.double() + bias.double()
    _check(codes, scales, torch.nn.functional.silu(pre), f"fp8 bias_silu {m}x{n}x{k}", call, k)


def _group_configs(block_scaled: bool):
    from fusedgemm.blockscale import BLOCK_CONFIGS
    from fusedgemm.runtime.tile_configs import holds_groups
    from fusedgemm.runtime.kernels import GEMM_CONFIGS

    return [c for c, t in GEMM_CONFIGS.items() if t.sm90 and t.serves("fp8") and holds_groups(c, "sm_90a", 128)
            and (not block_scaled or c in BLOCK_CONFIGS)]


@pytest.mark.parametrize("block_scaled", [False, True], ids=["channel", "block"])
def test_every_group_config_pinned(block_scaled, seed):
    """Every config that holds groups, pinned (forced_config), on a shape of more 128 x 128 tiles than SMs (the
    persistent CTAs take several tiles, the last one stored with the consumer warps' help), ragged rows and a last
    group of 16 columns: against quantize_rows of the same config's fp32 output, and the oracle."""
    from fusedgemm.plan import forced_config, sm_count

    g = torch.Generator().manual_seed(seed)
    m, n, k = 1100, 128 * (-(-sm_count(torch.cuda.current_device()) // 9)) + 16, 384
    a, w = _rand(g, m, k, scale=2).to(FP8), _rand(g, n, k, scale=2).to(FP8)
    bias = _rand(g, n)
    if block_scaled:
        sa = torch.rand(m, -(-k // 128), generator=g).cuda() + 0.5
        sb = torch.rand(-(-n // 128), -(-k // 128), generator=g).cuda() + 0.5
        acc = block_scaled_acc(a.cpu(), w.cpu(), sa.cpu(), sb.cpu()).cuda()
    else:
        sa, sb = torch.rand(m, generator=g).cuda() + 0.5, torch.rand(n, generator=g).cuda() + 0.5
        acc = (a.double() @ w.double().T) * sa.double()[:, None] * sb.double()
    want = torch.nn.functional.silu(acc + bias.double())
    wq = fg.preshuffle(w)
    configs = _group_configs(block_scaled)
    assert "persistent_128x128" in configs and "tile_64x128" in configs
    for config in configs:
        with forced_config(config):
            with poisoned_outputs():
                codes, scales = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_group=128)
            y32 = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out_dtype=torch.float32)
        what = f"{config} {'block' if block_scaled else 'channel'}"
        check_dequantized(codes, scales, want, what)
        check_group_codes(codes, scales, y32.double(), f"{what} (own fp32 output)", rtol=1e-6, max_differ=1e-3)


def test_a_pinned_config_that_cannot_hold_groups_is_refused():
    from fusedgemm.plan import forced_config

    a, wq = torch.ones(300, 256, device="cuda").to(FP8), fg.preshuffle(torch.ones(256, 256, device="cuda").to(FP8))
    with forced_config("swap_16x128"), pytest.raises(ValueError, match="cannot run on the pinned config"):
        fg.gemm_a8(a, wq, epilogue="silu", out_group=128)


def test_int8_and_the_fp32_output_of_the_same_kernel(seed):
    """int8 (exact int32 sums) with GELU (erf)."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 131, 384, 640
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g).cuda()
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g).cuda()
    sa = torch.rand(m, generator=g).cuda() * 0.01
    wq = fg.preshuffle(w)
    with poisoned_outputs():
        codes, scales = fg.gemm_a8(a, wq, scale_a=sa, epilogue="gelu_erf", out_group=128)
    pre = (a.double() @ w.double().T) * sa.double()[:, None]
    _check(codes, scales, torch.nn.functional.gelu(pre), "int8 gelu_erf",
           lambda **kw: fg.gemm_a8(a, wq, scale_a=sa, epilogue="gelu_erf", **kw), k, in_kind="int8")


def test_expression_with_aux_on_block_scales(seed):
    """An [M, N] aux operand (rows past M never evaluated) on DeepSeek block scales: the layer that feeds the next."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 131, 256, 320
    a, w = _rand(g, m, k, scale=2).to(FP8), _rand(g, n, k, scale=2).to(FP8)
    sa = torch.rand(m, -(-k // 128), generator=g).cuda() + 0.5
    sb = torch.rand(-(-n // 128), -(-k // 128), generator=g).cuda() + 0.5
    res, s = _rand(g, m, n).to(torch.bfloat16), torch.rand(n, generator=g).cuda() + 0.5
    wq = fg.preshuffle(w)

    def call(**kw):
        return fg.gemm_a8(a, wq, scale_a=sa, scale_b=sb, epilogue=E.parse("silu(acc * n_vec(s)) + aux(res)"),
                          operands={"s": s, "res": res}, **kw)

    with poisoned_outputs():
        codes, scales = call(out_group=128)
    acc = block_scaled_acc(a.cpu(), w.cpu(), sa.cpu(), sb.cpu()).cuda()
    _check(codes, scales, torch.nn.functional.silu(acc * s.double()) + res.double(), "block expression", call, k,
           block_scaled=True, persistent_ok=False)


def test_grouped_offs_and_masked(seed):
    """grouped_gemm_a8 (contiguous offs with an empty expert; masked decode layout): rows no expert owns stay
    poisoned."""
    g = torch.Generator().manual_seed(seed)
    G, n, k = 3, 256, 384
    w = _rand(g, G, n, k, scale=2).to(FP8)
    sb = torch.rand(G, n, generator=g).cuda() + 0.5
    x = _rand(g, 70, k, scale=2).to(FP8)
    offs = torch.tensor([20, 20, 70], dtype=torch.int32, device="cuda")
    wq = fg.preshuffle(w)

    def call(**kw):
        return fg.grouped_gemm_a8(x, wq, scale_b=sb, offs=offs, epilogue="silu", **kw)

    with poisoned_outputs():
        codes, scales = call(out_group=128)
    want = torch.empty(70, n, dtype=torch.float64, device="cuda")
    for e, (lo, hi) in enumerate(((0, 20), (20, 20), (20, 70))):
        want[lo:hi] = torch.nn.functional.silu((x[lo:hi].double() @ w[e].double().T) * sb[e].double())
    check_dequantized(codes, scales, want, "grouped offs")
    check_group_codes(codes, scales, call(out_dtype=torch.float32).double(), "grouped offs (own fp32 output)",
                      rtol=1e-6, max_differ=1e-3)
    xm = _rand(g, G, 16, k, scale=2).to(FP8)
    masked = torch.tensor([5, 0, 16], dtype=torch.int32, device="cuda")
    with poisoned_outputs():
        codes, scales = fg.grouped_gemm_a8(xm, fg.preshuffle(w), scale_b=sb, masked_m=masked, expected_m=8,
                                           epilogue="silu", out_group=128)
    for e, r in enumerate(masked.tolist()):
        if r:
            y = torch.nn.functional.silu((xm[e, :r].double() @ w[e].double().T) * sb[e].double())
            check_dequantized(codes[e, :r], scales[e, :r], y, f"masked expert {e}")
        assert scales[e, r:].isnan().all() and (codes[e, r:].view(torch.uint8) == POISON_BYTE[FP8]).all()


def test_cuda_graph_replay(seed):
    g = torch.Generator().manual_seed(seed)
    a, w = _rand(g, 64, 512, scale=2).to(FP8), fg.preshuffle(_rand(g, 384, 512, scale=2).to(FP8))
    sa = torch.rand(64, generator=g).cuda() + 0.5
    fg.gemm_a8(a, w, scale_a=sa, epilogue="silu", out_group=128)  # build outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        codes, scales = fg.gemm_a8(a, w, scale_a=sa, epilogue="silu", out_group=128)
    a.copy_(_rand(g, 64, 512, scale=2).to(FP8))
    graph.replay()
    want = torch.nn.functional.silu((a.double() @ fg.unshuffle(w).double().T) * sa.double()[:, None])
    _check(codes, scales, want, "graph replay", lambda **kw: fg.gemm_a8(a, w, scale_a=sa, epilogue="silu", **kw), 512)


def test_gate_up_pairs_run_as_the_gemm_then_quantize_rows(seed):
    """A gate / up pair's groups are 256 GEMM columns, wider than any 8-bit sm_90a tile: gemm_a8 and grouped_swiglu
    run the GEMM to fp32, then quantize_rows(group=128) -- the caller's own two-step, bit for bit."""
    g = torch.Generator().manual_seed(seed)
    a, w = _rand(g, 37, 256, scale=2).to(FP8), fg.preshuffle(_rand(g, 512, 256, scale=0.5).to(FP8))
    codes, scales = fg.gemm_a8(a, w, epilogue="silu(gate) * up", out_group=128)
    want = fg.quantize_rows(fg.gemm_a8(a, w, epilogue="silu(gate) * up", out_dtype=torch.float32), FP8, group=128)
    assert torch.equal(codes.view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(scales, want[1])
    x, w13 = _rand(g, 70, 256, scale=2).to(FP8), _rand(g, 3, 512, 256, scale=0.5).to(FP8)
    offs = torch.tensor([20, 20, 70], dtype=torch.int32, device="cuda")
    codes, scales = fg.grouped_swiglu(x, w13, offs=offs, out_group=128)
    want = fg.quantize_rows(fg.grouped_swiglu(x, w13, offs=offs, out_dtype=torch.float32), FP8, group=128)
    assert torch.equal(codes.view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(scales, want[1])
