"""The fusion pass on 8-bit GEMMs (CPU): torch._scaled_mm / torch._int_mm over W.t(), fg.gemm_a8 calls (their ops
under torch.compile) and fg.nn.Linear8 modules, each with the elementwise chain after it -- a final scaled cast to
fp8 included -- as one gemm_a8 call (program_a8.py). Checked: what matches in each spelling, the lowered call (its
expression and operands), the float64 oracle of the lowering (runtime.cpu_mode = "oracle") against the model,
refusals with their reasons, and the preshuffled weight copy cached on the weight and remade when it changes.

GPU numerics: tests/test_gpu_fusion_a8.py.
"""
import importlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fusedgemm as fg
from fusedgemm.fusion import execute as runtime, lowering, program, program_a8
from fusedgemm.nn import Linear8

preshuffle_mod = importlib.import_module("fusedgemm.preshuffle")  # the module (fg.preshuffle is the function)
FP8 = torch.float8_e4m3fn
K, N, M = 64, 48, 8


@pytest.fixture
def oracle():
    runtime.cpu_mode = "oracle"
    yield
    runtime.cpu_mode = "torch"


def _fp8(*shape):
    return torch.randn(*shape).to(FP8)


def _lowered(text):
    """The latest lowering of this program (programs repeat across parametrized cases; signatures differ)."""
    return [v for k, v in runtime._LOWERED.items() if k[0][0] == text][-1]


def _kernel_runs(text):
    return runtime.STATS.get(text, {}).get("kernel", 0)


class Scaled(nn.Module):
    """torch._scaled_mm(x, W.t(), ...) then `tail(y, self, r)`; `scales` "row" ([M, 1] / [1, N]) or "tensor"."""

    def __init__(self, tail, scales="row", bias=False, fast=False, n=N):
        super().__init__()
        self.register_buffer("w", _fp8(n, K))
        self.register_buffer("sb", torch.rand(1, n) + 0.5 if scales == "row" else torch.tensor(0.75))
        self.bias = nn.Parameter(torch.randn(n).bfloat16(), requires_grad=False) if bias else None
        self.tail, self.fast = tail, fast

    def forward(self, x, sa, r):
        y = torch._scaled_mm(x, self.w.t(), scale_a=sa, scale_b=self.sb, bias=self.bias, out_dtype=torch.bfloat16,
                             use_fast_accum=self.fast)
        return self.tail(y, self, r)


def _inputs(scales="row", n=N):
    sa = torch.rand(M, 1) + 0.5 if scales == "row" else torch.tensor(1.25)
    return _fp8(M, K), sa / K ** 0.5, torch.randn(M, n).bfloat16()


def _ref64(mod, x, sa, r, tail64):
    """The float64 meaning: the exact fp8 GEMM, scaled, the tail in float64 (no rounding anywhere)."""
    y = (x.double() @ mod.w.double().t()) * sa.double() * mod.sb.double()
    if mod.bias is not None:
        y = y + mod.bias.double()
    return tail64(y, r.double())


INV = 4.0
TAILS = {  # name -> (tail, its float64 meaning, ops in the report)
    "silu": (lambda y, m, r: F.silu(y), lambda y, r: F.silu(y), ["silu"]),
    "residual": (lambda y, m, r: F.gelu(y) + r, lambda y, r: F.gelu(y) + r, ["gelu", "add"]),
    "fp8_out_clamped": (lambda y, m, r: (F.silu(y) / (1 / INV)).clamp(-448, 448).to(FP8),
                        lambda y, r: (F.silu(y) * INV).clamp(-448, 448), ["silu", "div", "clamp", "to_fp8"]),
    "fp8_out_mul": (lambda y, m, r: (y * INV).to(FP8), lambda y, r: y * INV, ["mul", "to_fp8"]),
}


def _close(out, eager, ref):
    """Within eager's own error against the float64 meaning, plus one rounding of the output type."""
    out, eager = out.double(), eager.double()
    half_ulp = 2.0 ** -4 if out.dtype == FP8 else 2.0 ** -8
    err, err_eager = (out - ref).abs().max().item(), (eager - ref).abs().max().item()
    assert err <= 1.5 * err_eager + half_ulp * ref.abs().max().item(), (err, err_eager)


@pytest.mark.parametrize("tail", sorted(TAILS))
@pytest.mark.parametrize("scales", ["row", "tensor"])
@pytest.mark.parametrize("bias", [False, True])
def test_scaled_mm_chain_is_one_gemm_a8(tail, scales, bias, oracle):
    torch.manual_seed(0)
    fn, fn64, ops = TAILS[tail]
    mod = Scaled(fn, scales, bias).eval()
    x, sa, r = _inputs(scales)
    fused = fg.fuse(mod)
    (site,) = fused.fusion_report.sites
    assert site.fused and site.ops == ops, str(fused.fusion_report)
    assert site.program.startswith('["scaled_mm:bf16:w"')  # the weight itself, W.t() read as [N, K]
    before = _kernel_runs(site.program)
    with torch.no_grad():
        out, eager = fused(x, sa, r), mod(x, sa, r)
    assert _kernel_runs(site.program) == before + 1 and out.dtype == eager.dtype
    lw = _lowered(site.program)
    assert lw.a8.family == "scaled_mm" and lw.a8.weight == "nk" and lw.out_dtype == eager.dtype
    text = str(lw.expr)
    assert ("m_vec(t2)" if scales == "row" else "scalar(t2)") in text
    assert ("n_vec(t3)" if scales == "row" else "scalar(t3)") in text
    assert ("n_vec(t4)" in text) == bias
    _close(out, eager, _ref64(mod, x, sa, r, fn64))


def test_fp8_output_lowers_to_an_fp8_store(oracle):
    torch.manual_seed(1)
    mod = Scaled(TAILS["fp8_out_clamped"][0]).eval()
    x, sa, r = _inputs()
    fused = fg.fuse(mod)
    with torch.no_grad():
        out = fused(x, sa, r)
    lw = lowering.lower(program.loads(fused.fusion_report.sites[0].program), [x, mod.w, sa, mod.sb])
    assert lw.out_dtype == FP8 and out.dtype == FP8
    assert str(lw.expr) == "clamp(silu(acc * m_vec(t2) * n_vec(t3)) / 0.25, -448.0, 448.0)", lw.expr


def test_fast_accum_and_torch_mode(oracle):
    torch.manual_seed(2)
    mod = Scaled(TAILS["silu"][0], fast=True).eval()
    x, sa, r = _inputs()
    fused = fg.fuse(mod)
    assert fused.fusion_report.sites[0].program.startswith('["scaled_mm:bf16:w:fast_accum"')
    runtime.cpu_mode = "torch"
    with torch.no_grad():
        assert torch.equal(fused(x, sa, r), mod(x, sa, r))  # the region's own torch calls, bit for bit


@pytest.mark.parametrize("tail", ["residual", "fp8_out_mul"])
def test_backend_scaled_mm(tail, oracle):
    torch.manual_seed(3)
    fn, fn64, ops = TAILS[tail]
    mod = Scaled(fn).eval()
    torch._dynamo.reset()
    before = len(fg.fusion.REPORTS)
    compiled = torch.compile(mod, backend=fg.make_backend(inner="eager", devices="any"))
    x, sa, r = _inputs()
    with torch.no_grad():
        out, eager = compiled(x, sa, r), mod(x, sa, r)
    sites = [s for rep in fg.fusion.REPORTS[before:] for s in rep.sites]
    assert [(s.fused, s.ops) for s in sites] == [(True, ops)], sites
    assert _kernel_runs(sites[0].program) >= 1
    _close(out, eager, _ref64(mod, x, sa, r, fn64))


def test_int_mm_with_scales(oracle):
    torch.manual_seed(4)

    class IntMM(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.randint(-127, 128, (N, K), dtype=torch.int8))
            self.register_buffer("sb", torch.rand(N) / 127)

        def forward(self, x, sa):
            return F.relu(torch._int_mm(x, self.w.t()).float() * sa * self.sb).bfloat16()

    mod = IntMM()
    x, sa = torch.randint(-127, 128, (32, K), dtype=torch.int8), torch.rand(32, 1) / 127
    fused = fg.fuse(mod)
    (site,) = fused.fusion_report.sites
    assert site.fused and site.ops == ["cast", "mul", "mul", "relu", "cast"], str(fused.fusion_report)
    with torch.no_grad():
        out, eager = fused(x, sa), mod(x, sa)
    lw = _lowered(site.program)
    assert lw.a8.family == "int_mm" and str(lw.expr) == "cast(relu(acc * m_vec(t2) * n_vec(t3)), bf16)", lw.expr
    ref = F.relu(x.double() @ mod.w.double().t() * sa.double() * mod.sb.double())
    _close(out, eager, ref)


class CallsGemmA8(nn.Module):
    """fg.gemm_a8 with a preset (or an expression) epilogue, then `y * 2 + r`; under torch.compile only (fg.fuse
    cannot trace a PreshuffledWeight argument)."""

    def __init__(self, expr=False):
        super().__init__()
        self.w = _fp8(N, K)
        self.wq = fg.preshuffle(self.w)
        self.register_buffer("sb", torch.rand(N) + 0.5)
        self.register_buffer("bias", torch.randn(N))
        self.expr = expr

    def forward(self, x, sa, r):
        if self.expr:
            e = fg.epilogue.parse("relu(acc * m_vec(sa) * n_vec(sb) * scalar(k) + n_vec(b, 0.0))")
            y = fg.gemm_a8(x, self.wq, epilogue=e, operands={"sa": sa, "sb": self.sb, "k": 0.5})
        else:
            y = fg.gemm_a8(x, self.wq, self.bias, scale_a=sa, scale_b=self.sb, epilogue="bias_silu",
                           out_dtype=torch.bfloat16)
        return y * 2.0 + r

    def ref64(self, x, sa, r):
        acc = (x.double() @ self.w.double().t()) * sa.double()[:, None] * self.sb.double()
        y = F.relu(acc * 0.5) if self.expr else F.silu(acc + self.bias.double())
        return y * 2.0 + r.double()


@pytest.mark.parametrize("expr", [False, True])
def test_backend_gemm_a8_call_gets_the_chain(expr, oracle):
    torch.manual_seed(5)
    mod = CallsGemmA8(expr)
    torch._dynamo.reset()
    before = len(fg.fusion.REPORTS)
    compiled = torch.compile(mod, backend=fg.make_backend(inner="eager", devices="any"))
    x, sa, r = _fp8(M, K), (torch.rand(M) + 0.5) / K ** 0.5, torch.randn(M, N).bfloat16()
    with torch.no_grad():
        out = compiled(x, sa, r)
    sites = [s for rep in fg.fusion.REPORTS[before:] for s in rep.sites]
    assert [(s.fused, s.ops) for s in sites] == [(True, ["mul", "add"])], sites
    lw = _lowered(sites[0].program)
    assert lw.a8.family == ("gemm_a8_expr" if expr else "gemm_a8") and lw.a8.weight == "preshuffled"
    want = ("relu(acc * m_vec(t2) * n_vec(t3) * 0.5 + 0.0) * 2.0 + aux(t4)" if expr else
            "silu(acc * m_vec(t3) * n_vec(t4) + n_vec(t2)) * 2.0 + aux(t5)")
    assert str(lw.expr) == want, lw.expr
    ref = mod.ref64(x, sa, r)
    err = (out.double() - ref).abs().max().item()
    assert err <= 2.0 ** -8 * ref.abs().max().item(), err  # float64, rounded once to bf16


class WithLinear8(nn.Module):
    def __init__(self, activation="gelu", bias=True):
        super().__init__()
        self.fc = Linear8.from_linear(nn.Linear(K, N, bias=bias), "fp8", activation=activation)

    def forward(self, x, r):
        return F.silu(self.fc(x)) + r


@pytest.mark.parametrize("bias", [False, True])
def test_linear8_module_gets_the_chain(bias, oracle):
    torch.manual_seed(6)
    mod = WithLinear8(bias=bias)
    fused = fg.fuse(mod)
    (site,) = fused.fusion_report.sites
    assert site.site == "fc" and site.fused and site.ops == ["silu", "add"], str(fused.fusion_report)
    x, r = torch.randn(2, 5, K).bfloat16(), torch.randn(2, 5, N).bfloat16()
    with torch.no_grad():
        out, eager = fused(x, r), mod(x, r)
    lw = _lowered(site.program)
    assert lw.a8.family == "linear8" and lw.a8.quantize
    assert str(lw.expr) == ("silu(gelu(acc * m_vec(quant_scale) * n_vec(t2)" + (" + n_vec(t3)" if bias else "")
                            + ")) + aux(" + ("t4" if bias else "t3") + ")"), lw.expr
    # the same quantized codes: the fused float64 value is within one bf16 rounding of eager's two
    scale = eager.double().abs().max().item()
    assert (out.double() - eager.double()).abs().max().item() <= 3 * 2.0 ** -8 * scale
    runtime.cpu_mode = "torch"
    with torch.no_grad():
        assert torch.equal(fused(x, r), eager)  # unfused: Linear8's own forward


# ---- refusals --------------------------------------------------------------------------------------------------

class Odd(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.register_buffer("w", _fp8(N, K))
        self.register_buffer("w24", _fp8(24, K))
        self.register_buffer("sb", torch.rand(1, N))
        self.what = what

    def forward(self, x, sa, b=None):
        w = self.what
        if w in RUN_REFUSALS:  # torch._int_mm (torch._scaled_mm itself rejects these layouts and sizes)
            return F.silu(torch._int_mm(x, b) * sa)
        if w == "scale_result":
            return torch._scaled_mm(x, self.w.t(), scale_a=sa, scale_b=self.sb, scale_result=torch.tensor(1.0),
                                    out_dtype=FP8).float().relu()
        if w == "fp8_out_dtype":
            return torch._scaled_mm(x, self.w.t(), scale_a=sa, scale_b=self.sb).float().relu()
        raise AssertionError(w)


RUN_REFUSALS = {"column_major_a": "column-major A", "row_major_b": "is not the transpose of a contiguous [N, K]",
                "n_not_16": "N=24, K=64: gemm_a8 needs both positive multiples of 16"}
MATCH_REFUSALS = {"scale_result": "8-bit GEMM: torch._scaled_mm with scale_result",
                  "fp8_out_dtype": "8-bit GEMM: torch._scaled_mm with out_dtype=None"}


@pytest.mark.parametrize("what", sorted(RUN_REFUSALS))
def test_lowering_refusals_say_why(what):
    """Matched (the inputs decide at run time); the lowering refuses these inputs with the reason, and the region
    then runs its torch calls (which torch's CPU _scaled_mm refuses too, so only the lowering is checked here)."""
    mod = Odd(what)
    fused = fg.fuse(mod)
    (site,) = fused.fusion_report.sites
    assert site.fused and site.program.startswith('["int_mm:b"'), str(fused.fusion_report)
    x = torch.randint(-127, 128, (32, K), dtype=torch.int8)
    w = torch.randint(-127, 128, (N, K), dtype=torch.int8).t()  # b = W.t(): what gemm_a8 takes
    if what == "column_major_a":
        x = x.t().contiguous().t()  # [M, K] column-major
    if what == "row_major_b":
        w = w.contiguous()  # a row-major [K, N]: no [N, K] weight behind it
    if what == "n_not_16":
        w = w[:, :24]
    sa = torch.rand(32, 1)
    lw = runtime.lowered_for(site.program, [x, w, sa], [])
    assert isinstance(lw, program.Refused) and RUN_REFUSALS[what] in str(lw), lw
    runtime.cpu_mode = "oracle"
    try:
        with torch.no_grad():
            assert torch.equal(fused(x, sa, w), mod(x, sa, w))  # runs unfused, the reason recorded
    finally:
        runtime.cpu_mode = "torch"
    assert RUN_REFUSALS[what] in runtime.STATS[site.program]["why"]


@pytest.mark.parametrize("what", sorted(MATCH_REFUSALS))
def test_match_refusals_are_in_the_report(what):
    mod = Odd(what)
    fused = fg.fuse(mod)
    (site,) = fused.fusion_report.sites
    assert not site.fused and MATCH_REFUSALS[what] in site.reason, str(fused.fusion_report)
    x, sa = _fp8(M, K), torch.rand(M, 1)
    with torch.no_grad():
        assert torch.equal(fused(x, sa), mod(x, sa))


def test_fp8_cast_after_a_16bit_gemm_stays_outside(oracle):
    """matmul_fused has no fp8 store: the region ends before the cast (and still fuses what it can)."""
    class Lin(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(K, N)

        def forward(self, x):
            return (F.silu(self.fc(x)) * INV).to(FP8)

    mod = Lin().bfloat16()
    fused = fg.fuse(mod)
    (site,) = fused.fusion_report.sites
    assert site.fused and site.ops == ["silu", "mul"], str(fused.fusion_report)
    x = torch.randn(M, K).bfloat16()
    with torch.no_grad():
        assert fused(x).dtype == FP8


def test_fp8_cast_must_be_the_result():
    p = program.Program(program.Gemm("scaled_mm:bf16:w", (program.T(0), program.T(1), program.T(2), program.T(3),
                                                          program.NONE)),
                        (program.Step("to_fp8", (program.V(0),), ("float8_e4m3fn",)),
                         program.Step("cast", (program.V(1),), ("fp32",)),
                         program.Step("relu", (program.V(2),))), (3,))
    x, w = _fp8(M, K), _fp8(N, K)
    with pytest.raises(program.Refused, match="of the fp8 value"):
        lowering.lower(p, [x, w, torch.rand(M, 1), torch.rand(1, N)])


# ---- the preshuffled copy: made once, cached on the weight, remade when it changes -------------------------------

def _count_preshuffles(monkeypatch):
    calls = []
    real = preshuffle_mod.preshuffle

    def counting(w):
        calls.append(tuple(w.shape))
        return real(w)

    monkeypatch.setattr(preshuffle_mod, "preshuffle", counting)
    monkeypatch.setattr(program_a8, "preshuffle", counting)  # the fusion pass's own binding of it
    return calls


def test_preshuffled_copy_is_cached_and_never_stale(oracle, monkeypatch):
    torch.manual_seed(8)
    mod = Scaled(TAILS["residual"][0]).eval()
    fused = fg.fuse(mod)
    calls = _count_preshuffles(monkeypatch)
    x, sa, r = _inputs()
    fn64 = TAILS["residual"][1]
    with torch.no_grad():
        first = fused(x, sa, r)
        fused(x, sa, r)
        assert len(calls) == 1  # cached: one copy for both calls
        assert any(a.startswith("_fusedgemm_preshuffled_") for a in vars(mod.w))  # on the weight itself
        mod.w.copy_(_fp8(N, K))  # in place: the version counter moves
        updated = fused(x, sa, r)
        assert len(calls) == 2
        _close(updated, mod(x, sa, r), _ref64(mod, x, sa, r, fn64))
        mod.w = _fp8(N, K)  # a new buffer (set on the fused copy too: it shares the original's tensors)
        fused.w = mod.w
        replaced = fused(x, sa, r)
        assert len(calls) == 3
        _close(replaced, mod(x, sa, r), _ref64(mod, x, sa, r, fn64))
    assert not torch.equal(first, updated) and not torch.equal(updated, replaced)


def test_inference_tensor_weight_gets_a_fresh_copy(oracle, monkeypatch):
    torch.manual_seed(9)
    with torch.inference_mode():
        mod = Scaled(TAILS["silu"][0]).eval()
        fused = fg.fuse(mod)
        calls = _count_preshuffles(monkeypatch)
        x, sa, r = _inputs()
        first = fused(x, sa, r)
        mod.w.copy_(_fp8(N, K))
        second = fused(x, sa, r)
    assert len(calls) == 2 and not torch.equal(first, second)
