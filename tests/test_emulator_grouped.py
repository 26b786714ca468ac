"""The grouped GEMM kernels (gemm_groups.hpp on the portable and CDNA templates) executed in the emulator as gfx942
and gfx950, through the public ops: ragged groups (an empty one, one-row ones, groups straddling row blocks), both
layouts, every tile config, 16- and 8-bit inputs, per-expert column operands, per-row operands, the paired
(SwiGLU) epilogue. Outputs are poisoned; rows the masked layout must not write stay poisoned."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
from fusedgemm.plan import forced_config  # noqa: E402
from fusedgemm.plan.cdna import CONFIGS  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from poisoned_outputs import poisoned_outputs  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
SIZES = (5, 0, 1, 17)  # an empty group, a one-row group; 17 rows straddle a 16-row block


def offs_of(sizes):
    return torch.tensor(sizes).cumsum(0).to(torch.int32)


def rel(y, ref):
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


def oracle(x, w_nk, sizes, fn):
    """fn(acc [rows, N] float64, g, rows slice) per group, rows of x grouped by `sizes`."""
    out, r0 = [], 0
    for g, s in enumerate(sizes):
        out.append(fn(x[r0:r0 + s].double() @ w_nk[g].double().T, g, slice(r0, r0 + s)))
        r0 += s
    return torch.cat(out)


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
@pytest.mark.parametrize("config", CONFIGS)
def test_grouped_matmul_configs(arch, config, seed):
    """bf16 with a per-expert bias and SiLU on every config; then fp16 with a routing weight per row."""
    g, n, k = len(SIZES), 48, 64
    x = torch.randn(sum(SIZES), k).bfloat16()
    w = (torch.randn(g, n, k) / 8).bfloat16()
    bias = torch.randn(g, n)
    with poisoned_outputs(), emulate(arch) as dev, forced_config(config):
        y = fg.grouped_matmul(x, w, offs=offs_of(SIZES), bias=bias, activation="silu")
    assert dev.launches and all("_grouped_" in name for name, _g, _b in dev.launches)
    ref = oracle(x, w, SIZES, lambda acc, gi, _r: torch.nn.functional.silu(acc + bias[gi].double()))
    assert torch.isfinite(y).all() and rel(y, ref) < 1e-2, config


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
def test_grouped_routing_weight_and_masked(arch, seed):
    """fp16, the down projection's epilogue (acc * m_vec(rw)) in the contiguous layout; then the masked layout:
    rows past masked_m[g] are not written (still poisoned)."""
    g, n, k = len(SIZES), 32, 48
    x = torch.randn(sum(SIZES), k).half()
    w = (torch.randn(g, n, k) / 8).half()
    rw = torch.rand(sum(SIZES))
    with poisoned_outputs(), emulate(arch):
        y = fg.grouped_matmul(x, w, offs=offs_of(SIZES), epilogue="acc * m_vec(rw)", operands={"rw": rw})
    ref = oracle(x, w, SIZES, lambda acc, _g, r: acc * rw[r].double()[:, None])
    assert rel(y, ref) < 1e-2
    mmax = 20
    xm = torch.randn(g, mmax, k).half()
    used = torch.tensor([20, 0, 3, 17], dtype=torch.int32)
    with poisoned_outputs(), emulate(arch):
        ym = fg.grouped_matmul(xm, w, masked_m=used, expected_m=8)
    for gi, u in enumerate(used.tolist()):
        if u:
            assert rel(ym[gi, :u], xm[gi, :u].double() @ w[gi].double().T) < 1e-2, gi
        assert torch.isnan(ym[gi, u:]).all(), f"group {gi}: rows past masked_m were written"


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
def test_grouped_gemm_a8_and_swiglu(arch, seed):
    """fp8 with per-row and per-expert-channel scales and GeLU; int8 per-expert scales; SwiGLU over the experts'
    merged gate/up weights (bf16), against float64 oracles."""
    g, n, k = len(SIZES), 32, 64
    m = sum(SIZES)
    fp8 = FP8[arch]
    x8 = torch.randn(m, k).to(fp8)
    w8 = torch.randn(g, n, k).to(fp8)
    sa, sb = torch.rand(m) + 0.5, torch.rand(g, n) / 16
    with poisoned_outputs(), emulate(arch):
        y = fg.grouped_gemm_a8(x8, fg.preshuffle(w8), scale_a=sa, scale_b=sb, offs=offs_of(SIZES), epilogue="gelu")
    ref = oracle(x8, w8, SIZES, lambda acc, gi, r: torch.nn.functional.gelu(
        acc * sa[r].double()[:, None] * sb[gi].double(), approximate="tanh"))
    assert rel(y, ref) < 1e-2
    xi = torch.randint(-20, 20, (m, k), dtype=torch.int8)
    wi = torch.randint(-20, 20, (g, n, k), dtype=torch.int8)
    se = torch.rand(g) / 64
    with poisoned_outputs(), emulate(arch):
        yi = fg.grouped_gemm_a8(xi, fg.preshuffle(wi), scale_b=se, offs=offs_of(SIZES), out_dtype=torch.float32)
    assert rel(yi, oracle(xi, wi, SIZES, lambda acc, gi, _r: acc * float(se[gi]))) < 1e-6
    wgu = (torch.randn(g, 2 * n, k) / 8).bfloat16()
    x = torch.randn(m, k).bfloat16()
    with poisoned_outputs(), emulate(arch):
        h = fg.grouped_swiglu(x, wgu, offs=offs_of(SIZES))
    ref = oracle(x, wgu, SIZES, lambda acc, _g, _r: torch.nn.functional.silu(acc[:, :n]) * acc[:, n:])
    assert h.shape == (m, n) and rel(h, ref) < 1e-2


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
def test_many_groups(arch, seed):
    """70 groups (the block's walk over offs takes three batches of 32), most of them empty or a row or two, on the
    16-row decode config: every group's rows land where its offs say."""
    sizes = torch.randint(0, 3, (70,)).tolist()
    sizes[0], sizes[-1] = 0, 5
    g, n, k = len(sizes), 16, 32
    x = torch.randn(sum(sizes), k).bfloat16()
    w = (torch.randn(g, n, k) / 4).bfloat16()
    bias = torch.randn(g, n)
    with poisoned_outputs(), emulate(arch), forced_config("portable_16x16_k8"):
        y = fg.grouped_matmul(x, w, offs=offs_of(sizes), bias=bias)
    assert rel(y, oracle(x, w, sizes, lambda acc, gi, _r: acc + bias[gi].double())) < 1e-2


def test_fast_path_repeats(seed, monkeypatch):
    """A repeated call signature takes the eager fast path (a recorded plan: addresses and the device re-checked,
    nothing else): new data and new group sizes give the right answer; a [G, N] scale and a bias are the call's own
    tensors each time; an [N] bias (expanded per call) is never recorded."""
    import fusedgemm.grouped as grouped

    hits = []
    real = grouped._FastPlan.launch
    monkeypatch.setattr(grouped._FastPlan, "launch", lambda self, *a: hits.append(1) or real(self, *a))
    g, n, k = 4, 32, 64
    with poisoned_outputs(), emulate("gfx942"):
        for sizes in ((5, 0, 1, 17), (0, 9, 9, 5), (23, 0, 0, 0)):
            x8 = torch.randn(23, k).to(FP8["gfx942"])
            w8 = torch.randn(g, n, k).to(FP8["gfx942"])
            sb, bias = torch.rand(g, n) / 16, torch.randn(g, n)
            y = fg.grouped_gemm_a8(x8, fg.preshuffle(w8), scale_b=sb, bias=bias, offs=offs_of(sizes),
                                   epilogue="bias_relu")
            ref = oracle(x8, w8, sizes, lambda acc, gi, _r: torch.relu(acc * sb[gi].double() + bias[gi].double()))
            assert rel(y, ref) < 1e-2, sizes
        assert len(hits) == 2  # the second and third calls
        before = len(grouped._PLANS)
        x = torch.randn(23, k).bfloat16()
        w = torch.randn(g, n, k).bfloat16()
        for _ in range(2):
            fg.grouped_matmul(x, w, offs=offs_of((5, 0, 1, 17)), bias=torch.randn(n))
        assert len(grouped._PLANS) == before  # an [N] bias is expanded per call: not recorded


@pytest.mark.parametrize("sizes", [(0,) * 30 + (1, 1, 1), (1,) * 5 + (0,) * 30, (0, 16, 0, 17, 0) + (0,) * 20])
def test_decode_grid_bound(sizes, seed):
    """Few rows over many experts: the grid is min(G, M)-bounded (5 rows over 35 experts: 5 row blocks, not 35),
    and every group's rows still land, wherever the non-empty groups sit."""
    from fusedgemm.grouped import GroupLayout
    from fusedgemm.plan.grouped_call import row_blocks

    g, n, k = len(sizes), 16, 32
    m = sum(sizes)
    lay = GroupLayout(g, m, 0, offs_of(sizes), (m,), 1)
    assert row_blocks(lay, 16) == (m + min(g, m) * 15) // 16 >= sum(-(-s // 16) for s in sizes)
    x = torch.randn(m, k).bfloat16()
    w = (torch.randn(g, n, k) / 4).bfloat16()
    with poisoned_outputs(), emulate("gfx942"), forced_config("portable_16x16_k8"):
        y = fg.grouped_matmul(x, w, offs=offs_of(sizes))
    assert rel(y, oracle(x, w, sizes, lambda acc, _g, _r: acc)) < 1e-2


@pytest.mark.parametrize("kind", ["qwen3", "deepseek"])
def test_fused_moe_on_emulated_gfx942(kind, monkeypatch):
    """fg.nn.FusedMoE's fused path on the emulated gfx942 kernels (two grouped GEMMs per call, the second and third
    calls through the eager fast path) against the transformers block's own forward, bf16."""
    pytest.importorskip("transformers")
    import fusedgemm.grouped as grouped
    import test_moe_module as blocks
    from fusedgemm.nn import FusedMoE

    hits = []
    real = grouped._FastPlan.launch
    monkeypatch.setattr(grouped._FastPlan, "launch", lambda self, *a: hits.append(1) or real(self, *a))
    b = blocks.block(kind, True, torch.bfloat16)
    moe = FusedMoE.from_module(b)
    x = blocks.inputs((1, 6), torch.bfloat16)
    with poisoned_outputs(), emulate("gfx942") as dev, torch.no_grad():
        for _ in range(3):
            got = moe._fused_forward(x)
    want = b(x)
    assert any("_grouped_" in name for name, _g, _b in dev.launches)
    assert len(hits) == 4  # calls 2 and 3, each with its two grouped GEMMs
    blocks.close(got, want[0] if isinstance(want, tuple) else want, 3e-2)


def m_indices_of(sizes, align=128):
    """DeepGEMM's contiguous layout: each expert's rows, then -1 up to the next multiple of `align`."""
    idx = []
    for g, s in enumerate(sizes):
        if s:
            idx += [g] * s + [-1] * (-s % align)
    return torch.tensor(idx, dtype=torch.int32)


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
@pytest.mark.parametrize("config", CONFIGS)
def test_m_indices_layout(arch, config, seed):
    """m_indices (DeepGEMM's layout): experts' rows at multiples of 128, -1 padding rows after them (never written:
    still poisoned), an expert with more than one 128-row run, empty experts, per-expert bias; every config (block
    heights 16, 64, 128 inside the aligned runs)."""
    sizes = (5, 0, 130, 1)
    g, n, k = len(sizes), 32, 64
    idx = m_indices_of(sizes)
    x = torch.randn(idx.numel(), k).bfloat16()
    w = (torch.randn(g, n, k) / 8).bfloat16()
    bias = torch.randn(g, n)
    with poisoned_outputs(), emulate(arch), forced_config(config):
        y = fg.grouped_matmul(x, w, m_indices=idx, bias=bias)
    real = idx >= 0
    ref = torch.stack([x[r].double() @ w[int(idx[r])].double().T + bias[int(idx[r])].double()
                       for r in range(idx.numel()) if idx[r] >= 0])
    assert rel(y[real], ref) < 1e-2
    assert torch.isnan(y[~real]).all(), "padding rows were written"
