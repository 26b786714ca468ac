"""Block-scaled FP8 gemm_a8 on an sm_90a GPU (skipped without CUDA): DeepSeek-style scale_a [M, ceil(K/128)] and
scale_b [ceil(N/128), ceil(K/128)] against the float64 oracle with the block formula
(reference.gemm_a8_block_reference), outputs NaN-poisoned, with a tolerance relative to torch's own error where the
installed torch has a block-scaled _scaled_mm (else one bf16 rounding plus fp32 accumulation). Also: mixed scale
modes, ragged shapes, a CUDA graph capture of one call.

The block-scaled kernels are generated units (one per tile config and epilogue): the module fixture builds the ones
these tests use in parallel first, so the whole file takes well under a minute on a warm machine."""
import concurrent.futures
import math

import pytest
import torch

import fusedgemm as fg
from fusedgemm.bench.gemm_a8 import torch_block_mm as _torch_block_mm
from fusedgemm.blockscale import BLOCK_CONFIGS
from fusedgemm.reference import gemm_a8_block_reference, rel_error
from poisoned_outputs import poisoned_outputs

pytestmark = pytest.mark.gpu

FP8 = torch.float8_e4m3fn
MS = (1, 37, 256, 1000)
NKS = ((256, 512), (384, 1280), (4096, 7168))
EXPR = "silu(acc) * n_vec(g) + aux(res)"
PAIR_EXPR = "silu(gate) * up"
ONE_ROUNDING = 2.0 ** -8  # norm-relative error bound of one bf16 rounding (half an ulp is <= 2^-9 per element)


def cdiv(x, y):
    return -(-x // y)


def sm90():
    if not torch.cuda.is_available():
        return False
    from fusedgemm.runtime.arch import device_arch

    return device_arch(torch.cuda.current_device()) == "sm_90a"


@pytest.fixture(autouse=True)
def gpu_run_of_pending_paths(monkeypatch):
    """These tests are the first GPU run of the paths fusedgemm.pending holds back: turn them on."""
    from fusedgemm import pending

    monkeypatch.setattr(pending, "PENDING_GPU_RUN", set())


@pytest.fixture(scope="module", autouse=True)
def prebuilt():
    """Build every block-scaled kernel this file uses, in parallel (generated units compile one per process)."""
    if not sm90():
        pytest.skip("block-scaled FP8 kernels are sm_90a's (AMD: not yet)")
    from fusedgemm.checks import check_gemm_a8_args
    from fusedgemm.epilogue.presets import spec_for_activation
    from fusedgemm.runtime.build import code_object_path
    from fusedgemm.runtime.gemm_spec import GemmKernel

    a = torch.empty(8, 128, device="cuda").to(FP8)
    w = fg.preshuffle(torch.empty(128, 128, device="cuda").to(FP8))
    expr_spec = check_gemm_a8_args(a, w, None, None, None, EXPR, None, None,
                                   operands={"g": torch.ones(128, device="cuda"),
                                             "res": torch.ones(8, 128, device="cuda", dtype=torch.bfloat16)})["epi"]
    from fusedgemm.blockscale import block_plan

    dev = torch.cuda.current_device()
    shapes = [(m, n, k) for m in MS for n, k in NKS] + [(200, 384, 1280), (5, 200, 300), (130, 272, 1000),
                                                         (64, 128, 200), (37, 384, 1280)]
    configs = sorted({block_plan(m, -(-n // 16) * 16, -(-k // 16) * 16, dev)[0].name for m, n, k in shapes})
    specs = [GemmKernel("sm_90a", cfg, "fp8", "bf16", epi, "nk", True)
             for cfg in configs for epi in (spec_for_activation("none"), spec_for_activation("silu"), expr_spec)]
    specs += [GemmKernel("sm_90a", cfg, "fp8", "bf16", spec_for_activation("silu"), "nk", True)
              for cfg in BLOCK_CONFIGS if cfg not in configs]  # test_every_block_config_pinned
    w256 = fg.preshuffle(torch.empty(256, 128, device="cuda").to(FP8))
    pair_spec = check_gemm_a8_args(a, w256, None, None, None, PAIR_EXPR, None, None)["epi"]
    specs += [GemmKernel("sm_90a", cfg, "fp8", "bf16", pair_spec, "nk", True)
              for cfg in BLOCK_CONFIGS]  # test_gate_up_pair_every_block_config
    with concurrent.futures.ThreadPoolExecutor(len(specs)) as pool:
        list(pool.map(lambda s: code_object_path(s.unit, "sm_90a", s.source()), specs))


def problem(m, n, k, seed):
    """Inputs as a block-quantized checkpoint has them: fp8 codes of O(1) values, scales of a few magnitudes, so
    outputs are O(1) with both signs."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(FP8)
    w = torch.randn(n, k, device="cuda", generator=g).to(FP8)
    kb = cdiv(k, 128)
    sa = torch.rand(m, kb, device="cuda", generator=g) * 0.5 + 0.25
    sb = (torch.rand(cdiv(n, 128), kb, device="cuda", generator=g) * 1.5 + 0.25) / math.sqrt(k)
    return a, w, sa, sb


def torch_block_mm(a, w, sa, sb):
    """torch's block-scaled fp8 GEMM in bf16 (the bench's baseline), or None where the installed torch has none."""
    mm = _torch_block_mm(a, w, sa, sb)
    return None if mm is None else mm()


def tolerance(a, w, sa, sb, oracle):
    """The norm-relative error allowed: one bf16 rounding, or 1.25x torch's own error if that is larger."""
    y_torch = torch_block_mm(a, w, sa, sb)
    if y_torch is None:
        return ONE_ROUNDING, "torch has no block-scaled _scaled_mm here"
    err = rel_error(y_torch, oracle)
    assert err < 0.05, f"torch's block-scaled GEMM disagrees with the oracle: {err:.3g} (its scale layout misread?)"
    return max(ONE_ROUNDING, 1.25 * err), f"torch._scaled_mm error {err:.3g}"


def check(y, oracle, tol, note):
    assert not y.isnan().any(), "NaN left in the poisoned output"
    err = rel_error(y, oracle)
    assert err <= tol, f"rel error {err:.3g} > {tol:.3g} ({note})"
    # every element too: within a few bf16 ulps of the output's scale
    scale = oracle.abs().max().clamp_min(1e-30)
    assert ((y.cpu().double() - oracle).abs() <= 4 * ONE_ROUNDING * (oracle.abs() + 0.05 * scale)).all()


@pytest.mark.parametrize("n,k", NKS)
@pytest.mark.parametrize("m", MS)
def test_block_scaled_presets_and_expression(m, n, k):
    a, w, sa, sb = problem(m, n, k, seed=m * 7 + n + k)
    wq = fg.preshuffle(w)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    acc64 = gemm_a8_block_reference(a, w, scale_a=sa, scale_b=sb, unrounded=True)
    tol, note = tolerance(a, w, sa, sb, acc64)
    print(f"M={m} N={n} K={k}: {note}; ours {rel_error(fg.gemm_a8(a, wq, scale_a=sa, scale_b=sb), acc64):.3g}")
    # none
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    y = fg.gemm_a8(a, wq, scale_a=sa, scale_b=sb, out=out)
    assert y is out
    check(y, acc64, tol, note)
    # bias_silu
    out.fill_(float("nan"))
    y = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)
    z = acc64 + bias.cpu().double()
    check(y, z * torch.sigmoid(z), tol, note)
    # an expression epilogue
    g = torch.rand(n, device="cuda") + 0.5
    res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    out.fill_(float("nan"))
    y = fg.gemm_a8(a, wq, scale_a=sa, scale_b=sb, epilogue=EXPR, operands={"g": g, "res": res}, out=out)
    exact = acc64 * torch.sigmoid(acc64) * g.cpu().double() + res.cpu().double()
    check(y, exact, tol, note)


@pytest.mark.parametrize("mode", ["a_block_b_channel", "a_token_b_block", "a_none_b_block", "a_block_b_scalar"])
def test_mixed_scale_modes(mode):
    m, n, k = 200, 384, 1280
    a, w, sa, sb = problem(m, n, k, seed=3)
    per_token = torch.rand(m, device="cuda") + 0.5
    per_channel = (torch.rand(n, device="cuda") + 0.5) / math.sqrt(k)
    scale_a, scale_b = {"a_block_b_channel": (sa, per_channel), "a_token_b_block": (per_token, sb),
                        "a_none_b_block": (None, sb), "a_block_b_scalar": (sa, 1.0 / math.sqrt(k))}[mode]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    y = fg.gemm_a8(a, fg.preshuffle(w), scale_a=scale_a, scale_b=scale_b, out=out)
    oracle = gemm_a8_block_reference(a, w, scale_a=scale_a, scale_b=scale_b, unrounded=True)
    check(y, oracle, ONE_ROUNDING, mode)


@pytest.mark.parametrize("m,n,k", [(5, 200, 300), (130, 272, 1000), (64, 128, 200)])
def test_ragged_shapes(m, n, k):
    """N not a multiple of 128 (nor of 16), K not a multiple of 128 (nor of 16): the weight is stored padded, the
    last K block is partial (zero-filled), the last column tile reads scale_b's last row. (K >= 129: with one K
    block an [M, 1] scale_a is per-token and a [1, 1] scale_b a scalar -- the same math on the per-channel kernels.)"""
    a, w, sa, sb = problem(m, n, k, seed=11)
    y = fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb)
    check(y, gemm_a8_block_reference(a, w, scale_a=sa, scale_b=sb, unrounded=True), ONE_ROUNDING, "ragged")


def test_graph_capture():
    m, n, k = 37, 384, 1280
    a, w, sa, sb = problem(m, n, k, seed=5)
    wq = fg.preshuffle(w)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)  # warm up (builds, plans)
    out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_silu", out=out)
    assert out.isnan().all()  # captured, not run
    sa.mul_(2.0)  # the graph reads the scales at replay
    graph.replay()
    torch.cuda.synchronize()
    z = gemm_a8_block_reference(a, w, scale_a=sa, scale_b=sb, unrounded=True) + bias.cpu().double()
    check(out, z * torch.sigmoid(z), ONE_ROUNDING, "graph replay")


def test_non_block_configs_are_refused_when_pinned():
    from fusedgemm.plan import forced_config

    a, w, sa, sb = problem(16, 256, 512, seed=1)
    with forced_config("tile_128x192"), pytest.raises(ValueError, match="has no block-scaled kernel"):
        fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb)


@pytest.mark.parametrize("m,splits", [(1, 1), (5, 2), (16, 4), (13, 8)])
def test_swapped_decode_tile_with_split_k(m, splits):
    """The swapped decode tile (weights as the wgmma's A): each thread's four activation rows are D's columns, their
    scale_a rows read per K block (swapped_block_scale_rows); split-K over the cluster as the plan splits it."""
    from fusedgemm.plan import forced_config

    a, w, sa, sb = problem(m, 384, 1280, seed=m)
    bias = torch.randn(384, device="cuda")
    with forced_config("swap_16x128", splits), poisoned_outputs():
        out = fg.gemm_a8(a, fg.preshuffle(w), bias.to(torch.bfloat16), scale_a=sa, scale_b=sb, epilogue="bias_silu")
    z = gemm_a8_block_reference(a, w, scale_a=sa, scale_b=sb, unrounded=True) + bias.to(torch.bfloat16).cpu().double()
    check(out, z * torch.sigmoid(z), ONE_ROUNDING, f"swap_16x128 M={m} splits={splits}")



@pytest.mark.parametrize("scale_a", ["block", "none"])
@pytest.mark.parametrize("config", BLOCK_CONFIGS)
def test_every_block_config_pinned(config, scale_a):
    """Each block-scaled config run pinned: its scale ring (BlockScaleRows: 4 slots, copies three K blocks ahead)
    wraps over 10 K blocks; rows past M in the last row tile; persistent configs loop over ~2 tiles per CTA (the
    ring reused across tiles), the CTA-per-tile ones split K in two (a CTA's ring starts at its first K block);
    scale_a absent (the ring's ones)."""
    from fusedgemm.plan import forced_config
    from fusedgemm.runtime.kernels import GEMM_CONFIGS

    cfg = GEMM_CONFIGS[config]
    m, n, k = (13, 384, 1280) if cfg.swap_ab else (2100, 2048, 1280)
    splits = 1 if cfg.one_wave else 2
    a, w, sa, sb = problem(m, n, k, seed=len(config))
    sa = sa if scale_a == "block" else None
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    with forced_config(config, splits), poisoned_outputs():
        out = fg.gemm_a8(a, fg.preshuffle(w), bias, scale_a=sa, scale_b=sb, epilogue="bias_silu")
    z = gemm_a8_block_reference(a, w, scale_a=sa, scale_b=sb, unrounded=True) + bias.cpu().double()
    check(out, z * torch.sigmoid(z), ONE_ROUNDING, f"{config} splits={splits} scale_a={scale_a}")


@pytest.mark.parametrize("config", BLOCK_CONFIGS)
def test_gate_up_pair_every_block_config(config):
    """A gate / up pair (silu(gate) * up on the interleaved weight: gate j row 2j, up j row 2j + 1) with the
    pair-ordered scale_b table (rows 2q, 2q + 1: the gate's and the up's 128-row block q; block_scales.hpp): each
    128-column tile reads two scale_b values (BlockScaleRows kPairs: even columns the gate's, odd the up's; a swapped
    tile's thread one of them by its rows' parity). Pinned per config, against the block formula per projection."""
    from fusedgemm.plan import forced_config
    from fusedgemm.reference import block_scaled_acc
    from fusedgemm.runtime.kernels import GEMM_CONFIGS

    cfg = GEMM_CONFIGS[config]
    m, n, k = (13, 512, 1280) if cfg.swap_ab else (1100, 2560, 1280)  # persistent: more tiles than SMs
    a, w, sa, sb = problem(m, n, k, seed=7 + len(config))
    with forced_config(config, 1), poisoned_outputs():
        out = fg.gemm_a8(a, fg.preshuffle(w), scale_a=sa, scale_b=sb, epilogue=PAIR_EXPR)
    a64, w64, sa64, sb64 = (t.cpu() for t in (a, w, sa, sb))
    gate = block_scaled_acc(a64, w64[0::2], sa64, sb64[0::2])
    up = block_scaled_acc(a64, w64[1::2], sa64, sb64[1::2])
    check(out, torch.nn.functional.silu(gate) * up, ONE_ROUNDING, f"{config} gate / up pair")
