"""The grouped GEMMs (fusedgemm.grouped) on a GPU against a float64 oracle per group: bf16 / fp16 / fp8 / int8, both
layouts, every config the grouped plan can take (forced), ragged groups (empty, one row, groups straddling row
blocks), MoE-sized shapes with random and skewed routing, per-expert bias / scales, the routing weight per row,
SwiGLU, outputs poisoned with NaN through out= (rows the masked layout must not write stay NaN), CUDA-graph
replays with the routing changed between them, and the debug checks of malformed group sizes.

Tolerance: relative Frobenius error of the whole output against the float64 oracle, below a few output ulps (the
fp32 accumulation of exact 8/16-bit products adds ~1e-6; fp8's truncating accumulator ~1e-3)."""
import pytest
import torch

import fusedgemm as fg
from fusedgemm.plan import forced_config

pytestmark = pytest.mark.gpu

TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5}


@pytest.fixture(autouse=True)
def gpu_run_of_pending_paths(monkeypatch):
    """These tests are the first GPU run of the paths fusedgemm.pending holds back: turn them on."""
    from fusedgemm import pending

    monkeypatch.setattr(pending, "PENDING_GPU_RUN", set())


def arch():
    from fusedgemm.runtime.arch import device_arch

    return device_arch(torch.cuda.current_device())


def configs():
    return ("tile_64x128", "tile_128x128") if arch() == "sm_90a" else ("portable_16x16_k8", "portable_128x128")


def rel(y, ref):
    return ((y.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def routed_sizes(tokens, experts, topk, skew, gen):
    """Rows per expert of tokens x topk assignments: uniform, or Zipf-like popularity (skew > 0)."""
    p = torch.arange(1, experts + 1, dtype=torch.float64) ** -skew
    picks = torch.multinomial(p.expand(tokens, experts), topk, replacement=False, generator=gen)
    return torch.bincount(picks.flatten(), minlength=experts).tolist()


def oracle(x, w_nk, sizes, fn):
    out, r0 = [], 0
    for g, s in enumerate(sizes):
        out.append(fn(x[r0:r0 + s].double() @ w_nk[g].double().T, g, slice(r0, r0 + s)))
        r0 += s
    return torch.cat(out)


def nan_out(shape, dtype):
    return torch.full(shape, float("nan"), device="cuda").to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", [None, *range(2)])
def test_ragged_groups(dtype, config):
    sizes = [5, 0, 1, 130, 64, 200, 0, 3]
    g, n, k = len(sizes), 192, 256
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(sum(sizes), k, device="cuda", generator=gen).to(dtype)
    w = (torch.randn(g, n, k, device="cuda", generator=gen) / 16).to(dtype)
    bias = torch.randn(g, n, device="cuda", generator=gen)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    out = nan_out((sum(sizes), n), dtype)
    if config is None:
        fg.grouped_matmul(x, w, offs=offs, bias=bias, activation="silu", out=out)
    else:
        with forced_config(configs()[config]):
            fg.grouped_matmul(x, w, offs=offs, bias=bias, activation="silu", out=out)
    ref = oracle(x, w, sizes, lambda acc, gi, _r: torch.nn.functional.silu(acc + bias[gi].double()))
    assert torch.isfinite(out).all() and rel(out, ref) < TOL[dtype]


@pytest.mark.parametrize("model", [(128, 8, 2048, 1536), (8, 2, 1024, 2048)])  # (experts, top-k, K, N)
@pytest.mark.parametrize("tokens", [1, 16, 256, 2048])
@pytest.mark.parametrize("skew", [0.0, 1.2])
def test_moe_shapes_fp8_and_bf16(model, tokens, skew):
    experts, topk, k, n = model
    gen = torch.Generator().manual_seed(tokens)
    sizes = routed_sizes(tokens, experts, topk, skew, gen)
    m = sum(sizes)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    x = torch.randn(m, k, device="cuda")
    w = torch.randn(experts, n, k, device="cuda") / 32
    xb, wb = x.bfloat16(), w.bfloat16()
    rw = torch.rand(m, device="cuda")
    y = fg.grouped_matmul(xb, wb, offs=offs, epilogue="acc * m_vec(rw)", operands={"rw": rw})
    assert rel(y, oracle(xb, wb, sizes, lambda acc, _g, r: acc * rw[r].double()[:, None])) < TOL[torch.bfloat16]
    x8, w8 = x.to(torch.float8_e4m3fn), (w * 32).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(experts, n, device="cuda") / 64
    y8 = fg.grouped_gemm_a8(x8, fg.preshuffle(w8), scale_a=sa, scale_b=sb, offs=offs, epilogue="silu")
    ref8 = oracle(x8, w8, sizes, lambda acc, gi, r: torch.nn.functional.silu(
        acc * sa[r].double()[:, None] * sb[gi].double()))
    assert rel(y8, ref8) < 1e-2


def test_int8_per_expert_scale_fp32_out():
    sizes = [7, 33, 0, 129]
    g, n, k = len(sizes), 64, 96
    xi = torch.randint(-30, 30, (sum(sizes), k), dtype=torch.int8, device="cuda")
    wi = torch.randint(-30, 30, (g, n, k), dtype=torch.int8, device="cuda")
    se = torch.rand(g, device="cuda") / 64
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    y = fg.grouped_gemm_a8(xi, fg.preshuffle(wi), scale_b=se, offs=offs, out_dtype=torch.float32)
    assert rel(y, oracle(xi, wi, sizes, lambda acc, gi, _r: acc * float(se[gi]))) < 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_swiglu_masked_layout(dtype):
    g, mmax, i, k = 6, 40, 96, 128
    x = torch.randn(g, mmax, k, device="cuda")
    wgu = torch.randn(g, 2 * i, k, device="cuda") / 16
    used = torch.tensor([40, 0, 1, 17, 33, 8], dtype=torch.int32, device="cuda")
    out = nan_out((g, mmax, i), torch.bfloat16)
    if dtype == torch.bfloat16:
        xq, wq = x.bfloat16(), wgu.bfloat16()
        fg.grouped_swiglu(xq, wq, masked_m=used, expected_m=16, out=out)
    else:
        xq, wq = x.to(dtype), (wgu * 16).to(dtype)
        fg.grouped_swiglu(xq, wq, masked_m=used, expected_m=16, scale_b=1 / 16, out=out)
    scale = 1.0 if dtype == torch.bfloat16 else 1 / 16
    for gi, u in enumerate(used.tolist()):
        if u:
            acc = xq[gi, :u].double() @ wq[gi].double().T * scale
            ref = torch.nn.functional.silu(acc[:, :i]) * acc[:, i:]
            assert rel(out[gi, :u], ref) < 1e-2, gi
        assert torch.isnan(out[gi, u:].float()).all(), f"group {gi}: rows past masked_m written"


def test_cuda_graph_replays_new_routing():
    """One capture; the group sizes change on the device between replays (no recapture, no host sync)."""
    g, n, k, m = 8, 128, 256, 96
    x = torch.randn(m, k, device="cuda").bfloat16()
    w = (torch.randn(g, n, k, device="cuda") / 16).bfloat16()
    offs = torch.zeros(g, dtype=torch.int32, device="cuda")
    offs.copy_(torch.tensor([12] * 8).cumsum(0).to(torch.int32))
    fg.grouped_matmul(x, w, offs=offs)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fg.grouped_matmul(x, w, offs=offs)
    for sizes in ([12] * 8, [96, 0, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5, 6, 75]):
        offs.copy_(torch.tensor(sizes).cumsum(0).to(torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert rel(y, oracle(x, w, sizes, lambda acc, _g, _r: acc)) < TOL[torch.bfloat16], sizes


def test_debug_checks(monkeypatch):
    import fusedgemm.grouped_checks as grouped

    x = torch.randn(10, 64, device="cuda").bfloat16()
    w = torch.randn(2, 32, 64, device="cuda").bfloat16()
    bad = torch.tensor([7, 3], dtype=torch.int32, device="cuda")
    monkeypatch.setattr(grouped, "CHECK_GROUPS", True)
    with pytest.raises(ValueError, match="non-decreasing"):
        fg.grouped_matmul(x, w, offs=bad)
    monkeypatch.setattr(grouped, "CHECK_GROUPS", False)
    y = fg.grouped_matmul(x, w, offs=bad)  # unchecked: clamped in the kernel, nothing outside the tensors touched
    torch.cuda.synchronize()
    assert y.shape == (10, 32)


@pytest.mark.parametrize("config", [None, *range(2)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_m_indices_layout(config, dtype):
    """DeepGEMM's m_indices layout: experts' rows at multiples of 128, -1 padding after them (left NaN in out=),
    an expert spanning several 128-row runs, empty experts; bf16 and fp8 with per-row / per-expert scales."""
    sizes = [5, 0, 300, 1, 128]
    g, n, k = len(sizes), 256, 256
    idx = []
    for e, s in enumerate(sizes):
        if s:
            idx += [e] * s + [-1] * (-s % 128)
    idx = torch.tensor(idx, dtype=torch.int32, device="cuda")
    m = idx.numel()
    x = torch.randn(m, k, device="cuda")
    w = torch.randn(g, n, k, device="cuda") / 16
    real = idx >= 0
    out = nan_out((m, n), torch.bfloat16)
    ctx = forced_config(configs()[config]) if config is not None else torch.no_grad()
    with ctx:
        if dtype == torch.bfloat16:
            xq, wq = x.bfloat16(), w.bfloat16()
            fg.grouped_matmul(xq, wq, m_indices=idx, out=out)
            scale = torch.ones(g, n, device="cuda")
        else:
            xq, wq = x.to(dtype), (w * 16).to(dtype)
            scale = torch.rand(g, n, device="cuda") / 16
            fg.grouped_gemm_a8(xq, fg.preshuffle(wq), scale_b=scale, m_indices=idx, out=out)
    rows = real.nonzero().flatten()
    e = idx[rows].long()
    ref = torch.einsum("mk,mnk->mn", xq[rows].double(), wq[e].double()) * scale[e].double()
    assert rel(out[rows], ref) < 1e-2
    assert torch.isnan(out[~real].float()).all(), "padding rows were written"


@pytest.mark.parametrize("config", [None, *range(2)])
@pytest.mark.parametrize("layout", ["offs", "masked"])
def test_block_scales(config, layout):
    """DeepSeek-style block scales (x 1 x 128 per row, each expert's weight 128 x 128: scale_b [G, N/128, K/128]) with
    bias + SiLU, ragged groups (empty, one row, straddling row blocks), K not a multiple of 128 (a partial last
    block), N of a partial last scale block: against the block formula in float64 per group; the masked layout's
    unused rows stay NaN. Then grouped_swiglu with the checkpoint's gate / up block scales (merged order)."""
    from fusedgemm.reference import block_scaled_acc

    sizes = [5, 0, 1, 130, 64, 200, 0, 3]
    g, n, k = len(sizes), 400, 320
    gen = torch.Generator().manual_seed(3)
    fp8 = fg.FP8_DTYPE_FOR_ARCH[arch()]
    w = (torch.randn(g, n, k, generator=gen) * 2).to(fp8)
    sb = torch.rand(g, -(-n // 128), -(-k // 128), generator=gen) + 0.5
    bias = torch.randn(g, n, generator=gen)
    rows = 256 if layout == "masked" else sum(sizes)
    x = (torch.randn(g * rows if layout == "masked" else rows, k, generator=gen) * 2).to(fp8)
    sa = torch.rand(x.shape[0], -(-k // 128), generator=gen) + 0.5
    want = torch.full((x.shape[0], n), float("nan"), dtype=torch.float64)
    r0 = 0
    for e, s in enumerate(sizes):
        lo = e * rows if layout == "masked" else r0
        if s:
            acc = block_scaled_acc(x[lo:lo + s], w[e], sa[lo:lo + s], sb[e])
            want[lo:lo + s] = torch.nn.functional.silu(acc + bias[e].double())
        r0 += s
    kw = (dict(masked_m=torch.tensor(sizes, dtype=torch.int32, device="cuda"), expected_m=64)
          if layout == "masked" else dict(offs=torch.tensor(sizes).cumsum(0).to(torch.int32).cuda()))
    xg = x.cuda().view(g, rows, k) if layout == "masked" else x.cuda()
    sag = sa.cuda().view(g, rows, -1) if layout == "masked" else sa.cuda()
    out = nan_out((*xg.shape[:-1], n), torch.bfloat16)
    wq = fg.preshuffle(w.cuda())
    ctx = forced_config(configs()[config]) if config is not None else torch.no_grad()
    with ctx:
        fg.grouped_gemm_a8(xg, wq, bias.cuda(), scale_a=sag, scale_b=sb.cuda(), epilogue="bias_silu", out=out, **kw)
    out = out.reshape(-1, n).cpu()
    used = ~torch.isnan(want[:, 0])
    assert torch.isnan(out[~used].float()).all(), "rows no expert owns were written"
    assert rel(out[used], want[used]) < TOL[torch.bfloat16]
    inter = 256
    w13 = (torch.randn(g, 2 * inter, k, generator=gen) * 0.5).to(fp8)
    s13 = torch.rand(g, 2 * inter // 128, -(-k // 128), generator=gen) + 0.5  # gate blocks, then up blocks
    want = torch.full((x.shape[0], inter), float("nan"), dtype=torch.float64)
    r0 = 0
    for e, s in enumerate(sizes):
        lo = e * rows if layout == "masked" else r0
        if s:
            gate = block_scaled_acc(x[lo:lo + s], w13[e, :inter], sa[lo:lo + s], s13[e, :inter // 128])
            up = block_scaled_acc(x[lo:lo + s], w13[e, inter:], sa[lo:lo + s], s13[e, inter // 128:])
            want[lo:lo + s] = torch.nn.functional.silu(gate) * up
        r0 += s
    with ctx:
        h = fg.grouped_swiglu(xg, w13.cuda(), scale_a=sag, scale_b=s13.cuda(), out_dtype=torch.float32, **kw)
    h = h.reshape(-1, inter).cpu()
    assert rel(h[used], want[used]) < 2e-3  # fp8 wgmma sums within a K block (module docstring)


def persistent_configs():
    from fusedgemm.plan.grouped_call import grouped_config_ok
    from fusedgemm.runtime.kernels import GEMM_CONFIGS

    return [c for c, cfg in GEMM_CONFIGS.items() if cfg.persistent and grouped_config_ok(c)]


@pytest.mark.parametrize("kind", ["bf16", "fp8", "swiglu_bf16", "swiglu_fp8"])
@pytest.mark.parametrize("layout", ["offs", "masked"])
def test_persistent_configs(kind, layout):
    """GroupedPersistent<Config> (the group table, gemm_groups.hpp): every persistent config that serves the kind, on
    ragged groups (empty ones, one row, groups straddling row blocks, 44 groups: more than one per lane of the
    table's warp); outputs poisoned, rows past masked_m must stay NaN."""
    if arch() != "sm_90a":
        pytest.skip("the persistent grouped kernels are sm_90a's")
    from fusedgemm.runtime.kernels import GEMM_CONFIGS

    swiglu = kind.startswith("swiglu")
    dtype = "fp8" if kind.endswith("fp8") else "bf16"
    gen = torch.Generator(device="cuda").manual_seed(7)
    sizes = [5, 0, 1, 130, 0, 300, 0, 3] * 5 + [257, 0, 64, 2]  # 44 groups
    g, n, k = len(sizes), 384, 320
    mmax = max(sizes)
    x = torch.randn(sum(sizes), k, device="cuda", generator=gen)
    w = torch.randn(g, n, k, device="cuda", generator=gen) / 16
    bias = torch.randn(g, n // 2 if swiglu else n, device="cuda", generator=gen)
    if dtype == "fp8":
        xq, wq = x.to(torch.float8_e4m3fn), (w * 16).to(torch.float8_e4m3fn)
        sa, sb = torch.rand(sum(sizes), device="cuda", generator=gen) + 0.5, torch.rand(g, n, device="cuda") / 16
    else:
        xq, wq = x.bfloat16(), w.bfloat16()
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    n_out = n // 2 if swiglu else n

    def ref_rows(gi, rows):
        acc = xq[rows].double() @ wq[gi].double().T
        if dtype == "fp8":
            acc = acc * sa[rows].double()[:, None] * sb[gi].double()
        if swiglu:
            return torch.nn.functional.silu(acc[:, :n_out]) * acc[:, n_out:]
        return torch.nn.functional.silu(acc + bias[gi].double())

    def call(out, where):
        if swiglu:
            kw = dict(scale_a=sa, scale_b=sb) if dtype == "fp8" else {}
            return fg.grouped_swiglu(xq_in, wq, out=out, **kw, **where)
        if dtype == "fp8":
            return fg.grouped_gemm_a8(xq_in, wq8, scale_a=sa, scale_b=sb, bias=bias, epilogue="silu", out=out, **where)
        return fg.grouped_matmul(xq_in, wq, bias=bias, activation="silu", out=out, **where)

    wq8 = fg.preshuffle(wq) if dtype == "fp8" and not swiglu else None
    ran = []
    for config in persistent_configs():
        if not GEMM_CONFIGS[config].serves(dtype):
            continue
        if layout == "offs":
            xq_in, where = xq, dict(offs=offs)
            out = nan_out((sum(sizes), n_out), torch.bfloat16)
        else:  # [G, Mmax, K]: group gi's rows at gi * Mmax
            if dtype == "fp8":
                pytest.skip("masked fp8: scale_a per row of [G, Mmax] (covered by the offs layout's kernel)")
            xq_in = torch.zeros(g, mmax, k, device="cuda", dtype=xq.dtype)
            r0 = 0
            for gi, s in enumerate(sizes):
                xq_in[gi, :s] = xq[r0:r0 + s]
                r0 += s
            where = dict(masked_m=torch.tensor(sizes, dtype=torch.int32, device="cuda"), expected_m=64)
            out = nan_out((g, mmax, n_out), torch.bfloat16)
        with forced_config(config):
            call(out, where)
        torch.cuda.synchronize()
        r0 = 0
        for gi, s in enumerate(sizes):
            got = out[r0:r0 + s] if layout == "offs" else out[gi, :s]
            if s:
                assert rel(got, ref_rows(gi, slice(r0, r0 + s))) < 1e-2, (config, gi)
            if layout == "masked":
                assert torch.isnan(out[gi, s:].float()).all(), (config, gi, "rows past masked_m written")
            r0 += s
        assert layout == "masked" or torch.isfinite(out).all(), config
        ran.append(config)
    assert ran, "no persistent config serves " + dtype


def test_persistent_config_graph_replays_new_routing():
    if arch() != "sm_90a":
        pytest.skip("the persistent grouped kernels are sm_90a's")
    g, n, k, m = 8, 256, 256, 640
    x = torch.randn(m, k, device="cuda").bfloat16()
    w = (torch.randn(g, n, k, device="cuda") / 16).bfloat16()
    offs = torch.tensor([80] * 8, device="cuda").cumsum(0).to(torch.int32)
    with forced_config("persistent_128x128"):
        fg.grouped_matmul(x, w, offs=offs)  # compile outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = fg.grouped_matmul(x, w, offs=offs)
    for sizes in ([80] * 8, [640, 0, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5, 6, 619], [0] * 7 + [640]):
        offs.copy_(torch.tensor(sizes).cumsum(0).to(torch.int32))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel(y, oracle(x, w, sizes, lambda acc, _g, _r: acc)) < TOL[torch.bfloat16], sizes
