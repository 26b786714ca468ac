"""The fusion pass on 8-bit GEMMs on the GPU (skipped without one): torch._scaled_mm + chain, fg.gemm_a8 + chain
and Linear8 + chain run ONE gemm_a8 kernel and agree with a float64 run of the same math within the unfused torch
ops' own error (plus one rounding of the output type); the fused fp8 output store; fg.fuse and fg.backend."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fusedgemm as fg
from fusedgemm.fusion import execute as runtime
from fusedgemm.nn import Linear8

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a GPU", allow_module_level=True)

HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float8_e4m3fn: 2.0 ** -4,
            torch.float8_e4m3fnuz: 2.0 ** -4}


def fp8():
    from fusedgemm.runtime.arch import device_arch

    return fg.FP8_DTYPE_FOR_ARCH[device_arch(torch.cuda.current_device())]


def poison_allocator():
    """0xff in the caching allocator's free blocks: an unwritten output element shows as NaN."""
    blocks = [torch.empty(1 << 20, dtype=torch.uint8, device="cuda").fill_(0xFF) for _ in range(16)]
    big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda").fill_(0xFF)
    del blocks, big


@pytest.fixture
def mode(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEDGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "_DECISIONS", None)
    monkeypatch.setenv("FUSEDGEMM_FUSION", "always")


class Scaled(nn.Module):
    """torch._scaled_mm(x, W.t(), row-wise scales, bias) -> silu -> + r, or -> a scaled fp8 cast (fp8_out)."""

    def __init__(self, n, k, fp8_out=False):
        super().__init__()
        self.register_buffer("w", torch.randn(n, k, device="cuda").to(fp8()))
        self.register_buffer("sb", (torch.rand(1, n, device="cuda") + 0.5) / k ** 0.5)
        self.register_buffer("bias", torch.randn(n, device="cuda").bfloat16())
        self.fp8_out = fp8_out

    def forward(self, x, sa, r):
        y = torch._scaled_mm(x, self.w.t(), scale_a=sa, scale_b=self.sb, bias=self.bias, out_dtype=torch.bfloat16)
        if self.fp8_out:
            return (F.silu(y) * 16.0).clamp(-240.0, 240.0).to(fp8())
        return F.silu(y) + r

    def ref64(self, x, sa, r):
        y = F.silu((x.double() @ self.w.double().t()) * sa.double() * self.sb.double() + self.bias.double())
        return (y * 16.0).clamp(-240.0, 240.0) if self.fp8_out else y + r.double()


def _check(out, eager, ref):
    """Within the unfused ops' own error against float64, plus one rounding of the output type."""
    assert not torch.isnan(out.double()).any(), "unwritten (poisoned) output elements remain"
    err = (out.double() - ref).abs().max().item()
    err_eager = (eager.double() - ref).abs().max().item()
    assert err <= err_eager + HALF_ULP[out.dtype] * ref.abs().max().item(), (err, err_eager)


def _kernel_ran(site):
    return runtime.STATS[site.program]["kernel"] >= 1


@pytest.mark.parametrize("m", [1, 37, 512])
@pytest.mark.parametrize("fp8_out", [False, True])
def test_scaled_mm_chain_runs_one_gemm_a8(m, fp8_out, mode):
    torch.manual_seed(m)
    n, k = 1536, 1024
    mod = Scaled(n, k, fp8_out)
    fused = fg.fuse(mod)
    (site,) = fused.fusion_report.sites
    assert site.fused, str(fused.fusion_report)
    x = torch.randn(m, k, device="cuda").to(fp8())
    sa = torch.rand(m, 1, device="cuda") + 0.5
    r = torch.randn(m, n, device="cuda").bfloat16()
    with torch.no_grad():
        eager = mod(x, sa, r)
        poison_allocator()
        out = fused(x, sa, r)
        torch.cuda.synchronize()
    assert _kernel_ran(site) and out.dtype == eager.dtype
    _check(out.cpu(), eager.cpu(), mod.ref64(x, sa, r).cpu())


def test_scaled_mm_backend_with_inductor(mode):
    torch._dynamo.reset()
    torch.manual_seed(1)
    n, k = 768, 512
    mod = Scaled(n, k)
    before = len(fg.fusion.REPORTS)
    compiled = torch.compile(mod, backend=fg.backend)
    x = torch.randn(64, k, device="cuda").to(fp8())
    sa, r = torch.rand(64, 1, device="cuda") + 0.5, torch.randn(64, n, device="cuda").bfloat16()
    with torch.no_grad():
        out, eager = compiled(x, sa, r), mod(x, sa, r)
    fused = [s for rep in fg.fusion.REPORTS[before:] for s in rep.fused]
    assert len(fused) == 1, "\n".join(map(str, fg.fusion.REPORTS[before:]))
    _check(out.cpu(), eager.cpu(), mod.ref64(x, sa, r).cpu())


class WithLinear8(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = Linear8.from_linear(nn.Linear(k, n, device="cuda"), "fp8", activation="gelu")

    def forward(self, x, r):
        return F.silu(self.fc(x)) * 0.5 + r


@pytest.mark.parametrize("compiled", [False, True])
def test_linear8_chain(compiled, mode):
    """Linear8 (fg.fuse: the module; fg.backend: quantize_rows + the gemm_a8 op) with the chain in its epilogue.
    Reference: the same quantized codes (the module's own quantize_rows) and weights in float64."""
    torch._dynamo.reset()
    torch.manual_seed(2)
    k, n = 1024, 768
    mod = WithLinear8(k, n)
    before = len(fg.fusion.REPORTS)
    run = torch.compile(mod, backend=fg.backend) if compiled else fg.fuse(mod)
    x = torch.randn(3, 40, k, device="cuda").bfloat16()
    r = torch.randn(3, 40, n, device="cuda").bfloat16()
    with torch.no_grad():
        eager = mod(x, r)
        poison_allocator()
        out = run(x, r)
        xq, sx = fg.quantize_rows(x, mod.fc.weight.dtype)
    sites = [s for rep in fg.fusion.REPORTS[before:] for s in rep.fused] if compiled else \
        run.fusion_report.fused
    assert len(sites) == 1 and all(_kernel_ran(s) for s in sites)
    w = fg.unshuffle(fg.PreshuffledWeight(mod.fc.weight)).double().cpu()
    y = (xq.double().cpu() @ w.t()) * sx.double().cpu()[:, None] * mod.fc.weight_scale.double().cpu()
    y = F.gelu(y + mod.fc.bias.double().cpu(), approximate="tanh")
    ref = (F.silu(y) * 0.5).reshape(3, 40, n) + r.double().cpu()
    _check(out.cpu(), eager.cpu(), ref)


def test_gemm_a8_call_backend(mode):
    torch._dynamo.reset()
    torch.manual_seed(3)
    k, n, m = 512, 256, 100

    class Calls(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.randn(n, k, device="cuda").to(fp8())
            self.wq = fg.preshuffle(self.w)
            self.register_buffer("sb", (torch.rand(n, device="cuda") + 0.5) / k ** 0.5)

        def forward(self, x, sa, r):
            return fg.gemm_a8(x, self.wq, scale_a=sa, scale_b=self.sb, epilogue="relu",
                              out_dtype=torch.bfloat16) * 2.0 + r

    mod = Calls()
    before = len(fg.fusion.REPORTS)
    compiled = torch.compile(mod, backend=fg.backend)
    x = torch.randn(m, k, device="cuda").to(fp8())
    sa, r = torch.rand(m, device="cuda") + 0.5, torch.randn(m, n, device="cuda").bfloat16()
    with torch.no_grad():
        out, eager = compiled(x, sa, r), mod(x, sa, r)
    assert len([s for rep in fg.fusion.REPORTS[before:] for s in rep.fused]) == 1
    ref = F.relu((x.double() @ mod.w.double().t()) * sa.double()[:, None] * mod.sb.double()) * 2.0 + r.double()
    _check(out.cpu(), eager.cpu(), ref.cpu())


def test_weight_update_is_seen(mode):
    torch.manual_seed(4)
    mod = Scaled(256, 512)
    fused = fg.fuse(mod)
    x = torch.randn(16, 512, device="cuda").to(fp8())
    sa, r = torch.rand(16, 1, device="cuda") + 0.5, torch.randn(16, 256, device="cuda").bfloat16()
    with torch.no_grad():
        fused(x, sa, r)
        mod.w.copy_(torch.randn(256, 512, device="cuda").to(fp8()))
        out, eager = fused(x, sa, r), mod(x, sa, r)
    _check(out.cpu(), eager.cpu(), mod.ref64(x, sa, r).cpu())
