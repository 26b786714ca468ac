"""Every public op on CPU tensors inside `fusedgemm.testing.emulate`: the package's own path (checks -> plan ->
build -> runtime/launch.py's HIP calls) runs the real gfx942 / gfx950 kernels in the emulator, reached through the
one hook (runtime.device.emulated_arch) wherever the package decides "CPU tensor -> torch reference". Outputs the
ops allocate are poisoned (torch.empty fills NaN / an impossible code), shapes are small and ragged, and results
are checked against float64 oracles. Outside the context the same calls take the torch reference (no launch)."""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
from fusedgemm.reference import gemm_a8_reference, quantize_rows_reference  # noqa: E402
from fusedgemm.runtime.device import emulated_arch  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from poisoned_outputs import poisoned_outputs  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

ARCHES = ("gfx942", "gfx950")
FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}


def rel(y, ref):
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


@contextlib.contextmanager
def emulated(arch):
    with poisoned_outputs(), emulate(arch) as dev:
        assert emulated_arch() == arch
        yield dev
    assert emulated_arch() is None


def kernels(dev) -> list[str]:
    return [name for name, _grid, _block in dev.launches]


@pytest.mark.parametrize("arch", ARCHES)
def test_quantize_rows(arch, seed):
    """fp8 (the arch's variant: 'fp8' resolves to e4m3fnuz on gfx942) and int8, the vector and the element
    kernel, a zero row and a saturated one: bit-exact to the reference."""
    for dtype, (m, k) in (("fp8", (5, 64)), ("int8", (3, 37))):
        x = (torch.randn(m, k) * 3).to(torch.bfloat16)
        x[1] = 0
        x[0, 3] = 1e4
        with emulated(arch) as dev:
            q, scale = fg.quantize_rows(x, dtype)
        assert kernels(dev) and all(n.startswith("fg_quantize_rows") for n in kernels(dev))
        assert q.dtype == (FP8[arch] if dtype == "fp8" else torch.int8)
        rq, rs = quantize_rows_reference(x, q.dtype)
        assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(scale, rs), f"{dtype} {m}x{k}"


@pytest.mark.parametrize("arch", ARCHES)
def test_bmm_tiny(arch, seed):
    """bmm_tiny through the public op (and fg.bmm), one wave and several (the LDS exchange behind
    __syncthreads), f32 / bf16, b broadcast."""
    cases = ((torch.float32, (3, 5, 6, 7), False), (torch.bfloat16, (2, 33, 40, 24), False),
             (torch.float32, (4, 17, 64, 48), True))
    for dtype, (batch, m, n, k), broadcast in cases:
        a = torch.randn(batch, m, k).to(dtype)
        b = torch.randn(1 if broadcast else batch, k, n).to(dtype)
        with emulated(arch) as dev:
            out = fg.bmm_tiny(a, b) if not broadcast else fg.bmm(a, b)
        assert len(dev.launches) == 1 and kernels(dev)[0].startswith("fg_bmm_tiny"), kernels(dev)
        tol = 1e-6 if dtype == torch.float32 else 8e-3
        assert not out.isnan().any() and rel(out, a.double() @ b.double()) < tol, (dtype, batch, m, n, k)


@pytest.mark.parametrize("arch", ARCHES)
def test_gemm_a8_presets_and_expression(arch, seed):
    """gemm_a8: a preset with bias and scales (ragged M, N not a tile multiple), then an expression epilogue with
    row / column / aux operands and its saved tensor."""
    m, n, k = 19, 48, 96
    a, w = (torch.randn(m, k) * 2).to(FP8[arch]), (torch.randn(n, k) * 2).to(FP8[arch])
    wq = fg.preshuffle(w)
    bias, sa, sb = torch.randn(n).to(torch.bfloat16), torch.rand(m) + 0.5, torch.rand(n) + 0.5
    with emulated(arch) as dev:
        y = fg.gemm_a8(a, wq, bias, scale_a=sa, scale_b=sb, epilogue="bias_gelu")
    assert len(dev.launches) == 1
    ref = gemm_a8_reference(a, w, bias, scale_a=sa, scale_b=sb, epilogue="bias_gelu", out_dtype=torch.float64,
                            unrounded=True)
    assert not y.isnan().any() and rel(y, ref) < 8e-3

    res, s = torch.randn(m, n).to(torch.bfloat16), torch.rand(n) + 0.5
    with emulated(arch) as dev:
        y, saved = fg.gemm_a8(a, wq, epilogue="relu(save(acc * n_vec(s), fp32)) + aux(res)",
                              operands={"s": s, "res": res}, out_dtype=torch.float32)
    assert len(dev.launches) == 1
    pre = (a.double() @ w.double().T) * s.double()
    assert rel(saved, pre) < 1e-6 and rel(y, torch.relu(pre) + res.double()) < 1e-6


@pytest.mark.parametrize("arch", ARCHES)
def test_matmul_fused(arch, seed):
    """matmul_fused bf16 / fp16 with alpha, beta and c (M ragged, 3-D A)."""
    for dtype in (torch.bfloat16, torch.float16):
        x, w = torch.randn(2, 9, 48).to(dtype), (torch.randn(40, 48) / 4).to(dtype)
        c = torch.randn(2, 9, 40).to(dtype)
        with emulated(arch) as dev:
            y = fg.matmul_fused(x, w, alpha=0.5, beta=2.0, c=c, activation="silu")
        assert len(dev.launches) == 1 and y.shape == (2, 9, 40)
        assert not y.isnan().any() and rel(y, F.silu(0.5 * x.double() @ w.double().T + 2 * c.double())) < 8e-3


@pytest.mark.parametrize("arch", ARCHES)
def test_swiglu(arch, seed):
    """fg.swiglu: 16-bit x over a merged weight (interleaved and cached on first use), and 8-bit x over a
    preshuffled interleaved weight with scales: the paired epilogue store."""
    m, k, i = 13, 64, 40
    x, w, b = torch.randn(m, k).to(torch.bfloat16), (torch.randn(2 * i, k) / 8).to(torch.bfloat16), \
        torch.randn(2 * i).to(torch.bfloat16)
    with emulated(arch) as dev:
        y = fg.swiglu(x, w, b)
    assert len(dev.launches) == 1 and y.shape == (m, i)
    g = x.double() @ w[:i].double().T + b[:i].double()
    u = x.double() @ w[i:].double().T + b[i:].double()
    assert not y.isnan().any() and rel(y, F.silu(g) * u) < 8e-3

    x8, w8 = (torch.randn(m, k) * 2).to(FP8[arch]), (torch.randn(2 * i, k) * 2).to(FP8[arch])
    sa, sb = torch.rand(m) + 0.5, torch.rand(2 * i) + 0.5
    wi = fg.interleave_gate_up(w8, preshuffle=True)
    with emulated(arch) as dev:
        y = fg.swiglu(x8, wi, scale_a=sa, scale_b=sb, activation="gelu")
    assert len(dev.launches) == 1 and y.shape == (m, i)
    acc = (x8.double() @ w8.double().T) * sa.double()[:, None] * sb.double()
    assert not y.isnan().any() and rel(y, F.gelu(acc[:, :i], approximate="tanh") * acc[:, i:]) < 8e-3


@pytest.mark.parametrize("arch", ARCHES)
def test_nn_layers(arch, seed):
    """fg.nn.Linear8 (from_linear quantizes the weight with the kernel; forward: quantize_rows then gemm_a8; 'fp8'
    is the arch's variant) and fg.nn.FusedLinear (matmul_fused with a residual)."""
    from fusedgemm.preshuffle import PreshuffledWeight

    lin = torch.nn.Linear(48, 32)
    x = torch.randn(2, 5, 48).to(torch.bfloat16)
    with torch.no_grad():
        with emulated(arch) as dev:
            m8 = fg.nn.Linear8.from_linear(lin, activation="silu")
            y = m8(x)
        assert m8.weight.dtype == FP8[arch] and y.shape == (2, 5, 32)
        # the weight's quantize_rows (from_linear), the activations', the GEMM
        assert [n.split("_")[1] for n in kernels(dev)] == ["quantize", "quantize", "gemm"], kernels(dev)
        wq, sw = quantize_rows_reference(lin.weight.detach(), FP8[arch])
        w8 = fg.unshuffle(PreshuffledWeight(m8.weight))
        assert torch.equal(w8.view(torch.uint8), wq.view(torch.uint8)) and torch.equal(m8.weight_scale, sw)
        xq, sx = quantize_rows_reference(x.reshape(10, 48), FP8[arch])
        w = w8.double() * sw.double()[:, None]
        ref = F.silu((xq.double() * sx.double()[:, None]) @ w.T + m8.bias.double()).reshape(2, 5, 32)
        assert not y.isnan().any() and rel(y, ref) < 8e-3

        lin16 = torch.nn.Linear(48, 32).to(torch.bfloat16)
        res = torch.randn(2, 5, 32).to(torch.bfloat16)
        with emulated(arch) as dev:
            y = fg.nn.FusedLinear.from_linear(lin16, activation="gelu")(x, res)
        assert len(dev.launches) == 1 and kernels(dev)[0].startswith("fg_matmul")
        ref = F.gelu(x.double() @ lin16.weight.double().T + lin16.bias.double() + res.double(), approximate="tanh")
        assert not y.isnan().any() and rel(y, ref) < 8e-3


class _GatedMLP(torch.nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.gate, self.up = torch.nn.Linear(d, h, bias=False), torch.nn.Linear(d, h, bias=False)
        self.down = torch.nn.Linear(h, d)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x)) + x


def test_fuse_small_model(seed):
    """fg.fuse on a small gated MLP (bf16): its fused regions run the emulated kernels (gfx942), the unfused
    model is the oracle (computed in float64)."""
    torch.manual_seed(0)
    model = _GatedMLP(64, 48).to(torch.bfloat16).eval()
    fused = fg.fuse(model)
    assert fused.fusion_report.fused, str(fused.fusion_report)
    x = torch.randn(2, 7, 64).to(torch.bfloat16)
    with torch.no_grad():
        with emulated("gfx942") as dev:
            y = fused(x)
        ref = model.double()(x.double())
    assert dev.launches, "no fused region ran a kernel"
    assert all(n.startswith(("fg_matmul", "fg_gemm")) for n in kernels(dev)), kernels(dev)
    assert not y.isnan().any() and rel(y, ref) < 8e-3


@pytest.mark.parametrize("arch", ARCHES)
def test_wave_size_comes_from_the_arch(arch, seed):
    """The launch's threads are whole 64-lane waves of the arch (plan/call.py), whatever torch build runs it (this
    one is not ROCm's, and emulate no longer pretends it is): with 32 per warp an AMD GEMM got half its waves and
    computed half of K (the emulator showed it at K = 512)."""
    from fusedgemm.testing.emulator import codeobjects

    assert torch.version.hip is None
    m, n, k = 21, 48, 512
    a, w = (torch.randn(m, k) * 2).to(FP8[arch]), (torch.randn(n, k) * 2).to(FP8[arch])
    with emulated(arch) as dev:
        y = fg.gemm_a8(a, fg.preshuffle(w))
    (name, _grid, block), = dev.launches
    config, = [c for c in codeobjects.amd_gemm_configs(arch) if name.endswith("_" + c)]
    assert block == (codeobjects.tile_config(config).warps * 64, 1, 1)
    assert rel(y, a.double() @ w.double().T) < 8e-3


def test_outside_the_context_cpu_tensors_take_the_reference():
    """The hook is None outside emulate, and the ops' CPU paths launch nothing (no emulated HIP is there); a plan
    made inside a context does not outlive it."""
    x16, w16 = torch.randn(5, 32).to(torch.bfloat16), torch.randn(16, 32).to(torch.bfloat16)
    with emulate("gfx942") as dev:
        y = fg.matmul_fused(x16, w16)
    assert rel(y, x16.double() @ w16.double().T) < 8e-3
    launched = len(dev.launches)
    assert launched == 1
    y = fg.matmul_fused(x16, w16)  # the same signature after the context: the reference, not the kept plan
    assert len(dev.launches) == launched and rel(y, x16.double() @ w16.double().T) < 8e-3
    assert emulated_arch() is None
    x = torch.randn(3, 32)
    q, s = fg.quantize_rows(x)
    assert q.dtype == torch.float8_e4m3fn  # the CPU's fp8, not an emulated arch's
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    assert torch.allclose(fg.bmm_tiny(a, b), a @ b, atol=1e-5)
    w = torch.randn(16, 32)
    y = fg.swiglu(x, w)
    assert torch.allclose(y, F.silu(x @ w[:8].T) * (x @ w[8:].T), atol=1e-4)
