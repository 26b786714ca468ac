"""The fusion pass on the CPU: what it matches in each spelling, what it refuses and why, and that a lowered region
means what the model's torch calls mean (runtime.cpu_mode = "oracle" runs the lowered epilogue in float64).

GPU numerics and speed: tests/test_gpu_fusion.py and `python -m fusedgemm.bench models`.
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fusedgemm as fg
from fusedgemm.fusion import execute as runtime, match, program


@pytest.fixture
def oracle():
    runtime.cpu_mode = "oracle"
    yield
    runtime.cpu_mode = "torch"


class Chain(nn.Module):
    """One Linear (or addmm / mm) followed by `tail(y, extra)`."""

    def __init__(self, tail, k=24, n=40, bias=True, gemm="linear"):
        super().__init__()
        self.fc = nn.Linear(k, n, bias=bias)
        self.extra = nn.Parameter(torch.randn(n))
        self.tail, self.gemm = tail, gemm
        self.silu_mod, self.gelu_mod = nn.SiLU(), nn.GELU()  # registered: traced as call_module

    def forward(self, x, r):
        if self.gemm == "linear":
            y = self.fc(x)
        elif self.gemm == "addmm":
            y = torch.addmm(self.fc.bias, x.view(-1, x.shape[-1]), self.fc.weight.t()).view(x.shape[0], -1)
        elif self.gemm == "mm":
            y = torch.matmul(x, self.fc.weight.t())
        else:
            y = x @ self.fc.weight.t()
        return self.tail(y, self, r)


GELU_TANH = lambda y, m, r: 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0))))  # noqa: E731
SPELLINGS = {
    "F.silu": lambda y, m, r: F.silu(y),
    "x*sigmoid(x)": lambda y, m, r: y * torch.sigmoid(y),
    "nn.SiLU": lambda y, m, r: m.silu_mod(y),
    "gelu_tanh": lambda y, m, r: F.gelu(y, approximate="tanh"),
    "gelu_erf": lambda y, m, r: F.gelu(y),
    "nn.GELU": lambda y, m, r: m.gelu_mod(y),
    "gelu_formula": GELU_TANH,
    "relu_method": lambda y, m, r: y.relu(),
    "leaky_relu": lambda y, m, r: F.leaky_relu(y, 0.2),
    "clamp": lambda y, m, r: torch.clamp(y, -0.5, 0.25),
    "clamp_min": lambda y, m, r: y.clamp(min=0.1),
    "scalars": lambda y, m, r: (y * 0.5 + 1.0) / 3.0 - 2.0,
    "bias_param": lambda y, m, r: torch.tanh(y + m.extra),
    "residual": lambda y, m, r: F.silu(y) + r,
    "residual_scaled": lambda y, m, r: r + 0.5 * y,
    "cast": lambda y, m, r: F.silu(y.float()),
    "square_sqrt": lambda y, m, r: torch.sqrt(torch.square(y) + 1.0),
    "exp_neg": lambda y, m, r: torch.exp(-y.abs()),
    "div_tensor": lambda y, m, r: y / (m.extra.abs() + 1.0),
}


def _eager_and_fused(mod, *args):
    fused = fg.fuse(mod)
    with torch.no_grad():
        return mod(*args), fused(*args), fused


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_each_spelling_is_one_fused_site(name, oracle):
    torch.manual_seed(0)
    mod = Chain(SPELLINGS[name]).eval()
    x, r = torch.randn(3, 5, 24), torch.randn(3, 5, 40)
    eager, fused_out, fused = _eager_and_fused(mod, x, r)
    rep = fused.fusion_report
    assert len(rep.sites) == 1 and rep.sites[0].fused, str(rep)
    s = runtime.STATS[rep.sites[0].program]
    assert s["kernel"] >= 1, s  # the lowered epilogue ran (float64 oracle), not the torch calls
    with torch.no_grad():
        ref64 = mod.double()(x.double(), r.double())
    mod.float()
    err_eager = (eager.double() - ref64).abs().max().item()
    err_fused = (fused_out.double() - ref64).abs().max().item()
    scale = ref64.abs().max().item()
    # the oracle computes in float64 and rounds once to fp32: within eager fp32's own error (plus one rounding)
    assert err_fused <= 2 * err_eager + 2 * 2.0 ** -24 * scale, (err_fused, err_eager)


@pytest.mark.parametrize("gemm", ["addmm", "mm", "matmul_op"])
def test_gemm_spellings(gemm, oracle):
    torch.manual_seed(1)
    mod = Chain(lambda y, m, r: F.gelu(y) * 2.0, gemm=gemm).eval()
    x, r = torch.randn(4, 24), torch.randn(4, 40)
    eager, out, fused = _eager_and_fused(mod, x, r)
    assert [s.fused for s in fused.fusion_report.sites] == [True], str(fused.fusion_report)
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    text = fused.fusion_report.sites[0].program
    (lw,) = [v for k, v in runtime._LOWERED.items() if k[0][0] == text]
    assert isinstance(lw, program.Lowered)
    assert lw.layout == "nk" and lw.transpose_b  # w.t() of an [N, K] weight is read in place, not copied


def test_torch_mode_runs_the_same_calls():
    torch.manual_seed(2)
    mod = Chain(SPELLINGS["residual"]).eval()
    x, r = torch.randn(2, 24), torch.randn(2, 40)
    eager, out, _ = _eager_and_fused(mod, x, r)
    assert torch.equal(eager, out)  # CPU tensors: the region's own torch calls, bit for bit


def test_intermediate_with_another_user_becomes_the_second_output(oracle):
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 32)

        def forward(self, x):
            h = self.fc(x)
            return F.silu(h) * 2.0, h  # h also leaves: the IR's second output

    torch.manual_seed(3)
    mod, x = Two().eval(), torch.randn(5, 16)
    eager, out, fused = _eager_and_fused(mod, x)
    assert fused.fusion_report.sites[0].fused
    assert runtime.STATS[fused.fusion_report.sites[0].program]["kernel"] >= 1
    for a, b in zip(eager, out):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_two_intermediates_used_outside_cut_the_region():
    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 32)

        def forward(self, x):
            h = self.fc(x)
            a = torch.sigmoid(h)
            b = a * 3.0
            return torch.tanh(b), h, a

    mod, x = Three().eval(), torch.randn(4, 16)
    eager, out, fused = _eager_and_fused(mod, x)
    site = fused.fusion_report.sites[0]
    assert site.fused and site.ops == ["sigmoid"], str(fused.fusion_report)  # h and a leave: the cut is at a
    for p, q in zip(eager, out):
        assert torch.equal(p, q)


def test_refusals_say_why():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 32)
            self.drop = nn.Dropout(0.1)
            self.fc2 = nn.Linear(16, 32)

        def forward(self, x):
            return self.drop(self.fc(x)), torch.softmax(self.fc2(x), -1)

    fused = fg.fuse(Odd())
    reasons = [s.reason for s in fused.fusion_report.sites]
    assert not any(s.fused for s in fused.fusion_report.sites)
    assert "Dropout(p=0.1)" in reasons[0] and "softmax" in reasons[1], reasons


def test_runtime_refusals_run_unfused_with_a_reason(oracle):
    torch.manual_seed(4)
    mod = Chain(lambda y, m, r: F.silu(y) + r).eval()
    x = torch.randn(2, 3, 24)
    fused = fg.fuse(mod)
    text = fused.fusion_report.sites[0].program
    r_bad = torch.randn(2, 1, 40)  # broadcasts over the middle dim: not [N], [M, 1] or [M, N]
    with torch.no_grad():
        assert torch.equal(fused(x, r_bad), mod(x, r_bad))
    assert "broadcasts" in runtime.STATS[text]["why"]
    mod64 = Chain(lambda y, m, r: F.silu(y)).double().eval()
    fused64 = fg.fuse(mod64)
    with torch.no_grad():
        assert torch.equal(fused64(x.double(), None), mod64(x.double(), None))
    assert "float64" in runtime.STATS[fused64.fusion_report.sites[0].program]["why"]


def test_grad_runs_unfused_and_is_correct():
    torch.manual_seed(5)
    mod = Chain(SPELLINGS["gelu_formula"])
    fused = fg.fuse(mod)
    x = torch.randn(3, 24, requires_grad=True)
    fused(x, None).sum().backward()
    g_fused = (x.grad.clone(), mod.fc.weight.grad.clone())
    x.grad = None
    mod.zero_grad()
    mod(x, None).sum().backward()
    assert torch.equal(g_fused[0], x.grad) and torch.equal(g_fused[1], mod.fc.weight.grad)


def test_original_untouched_and_weights_shared(oracle):
    torch.manual_seed(6)
    mod = Chain(SPELLINGS["F.silu"]).eval()
    fused = fg.fuse(mod)
    assert type(mod.tail) is not torch.fx.GraphModule and not isinstance(mod, torch.fx.GraphModule)
    assert fused.fc.weight is mod.fc.weight
    x = torch.randn(2, 24)
    new = {k: torch.randn_like(v) for k, v in mod.state_dict().items()}
    mod.load_state_dict(new)  # in place: the fused copy reads the new weights
    with torch.no_grad():
        torch.testing.assert_close(fused(x, None), mod(x, None), rtol=1e-5, atol=1e-5)


def test_report_text_and_bad_arguments(capsys):
    fg.fuse(Chain(SPELLINGS["F.silu"]), report=True)
    out = capsys.readouterr().out
    assert "1 of 1 GEMM sites fused" in out and "GEMM -> silu" in out
    with pytest.raises(TypeError, match="nn.Module"):
        fg.fuse(lambda x: x)
    with pytest.raises(ValueError, match="rounding"):
        fg.fuse(Chain(SPELLINGS["F.silu"]), rounding="bf16")


def test_eager_rounding_mode_inserts_rounding_points():
    torch.manual_seed(7)
    mod = Chain(SPELLINGS["residual"]).bfloat16().eval()
    x, r = torch.randn(2, 24, dtype=torch.bfloat16), torch.randn(2, 40, dtype=torch.bfloat16)
    text = fg.fuse(mod).fusion_report.sites[0].program
    inputs = [x, mod.fc.weight, mod.fc.bias, r]
    plain = runtime.lowered_for(text, inputs, [], "fp32")
    eager = runtime.lowered_for(text, inputs, [], "eager")
    assert "cast" not in str(plain.expr) and str(eager.expr).count("bf16") >= 3, (plain.expr, eager.expr)
    assert plain.out_dtype == torch.bfloat16


def test_program_text_round_trips():
    p = program.Program(program.Gemm("addmm", (program.T(0), program.T(1), program.T(2)), 0.5, 2.0),
                        (program.Step("clamp", (program.V(0),), (None, 1.0)),
                         program.Step("reshape", (program.V(1), program.I(0), program.C(-1)))), (2,))
    assert program.loads(p.dumps()) == p


def test_untraceable_model_is_reported_not_fatal():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: symbolic tracing fails
                return F.relu(self.fc(x))
            return self.fc(x)

    fused = fg.fuse(Branchy())
    assert fused.fusion_report.sites == [] and fused.fusion_report.untraced
    x = torch.randn(2, 8)
    assert torch.equal(fused(x), Branchy.forward(fused, x))


# ---- torch.compile backend (CPU: Inductor left out, regions rewritten on CPU tensors too) ----------------------

def test_backend_rewrites_and_compiles_once_for_dynamic_sizes(oracle):
    torch._dynamo.reset()
    torch.manual_seed(8)
    mod = Chain(SPELLINGS["gelu_formula"]).eval()
    graphs = []
    inner = fg.make_backend(inner="eager", devices="any")

    def counting(gm, ex):
        graphs.append(gm)
        return inner(gm, ex)

    compiled = torch.compile(mod, backend=counting, dynamic=True)
    with torch.no_grad():
        for rows in (3, 7, 12):
            x = torch.randn(rows, 24)
            torch.testing.assert_close(compiled(x, None), mod(x, None), rtol=1e-5, atol=1e-5)
    assert len(graphs) == 1
    rep = fg.fusion.REPORTS[-1]
    assert [s.fused for s in rep.sites] == [True], str(rep)
    assert any(n.target is torch.ops.fusedgemm.fused_region.default for n in graphs[0].graph.nodes)


def test_backend_leaves_cpu_regions_by_default():
    torch._dynamo.reset()
    mod = Chain(SPELLINGS["F.silu"]).eval()
    compiled = torch.compile(mod, backend=fg.make_backend(inner="eager"))
    with torch.no_grad():
        compiled(torch.randn(2, 24), None)
    rep = fg.fusion.REPORTS[-1]
    assert not rep.sites[0].fused and "cpu" in rep.sites[0].reason


class GatedMLP(nn.Module):
    """transformers' Llama MLP: down(act(gate(x)) * up(x))."""

    def __init__(self, d=32, i=48, bias=False, act=F.silu):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, i, bias=bias), nn.Linear(d, i, bias=bias)
        self.down_proj = nn.Linear(i, d, bias=False)
        self.act = act

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("act", ["silu", "gelu_tanh", "gelu_erf"])
def test_gated_mlp_becomes_one_gated_gemm(bias, act, oracle):
    fn = {"silu": F.silu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu_erf": F.gelu}[act]
    torch.manual_seed(9)
    mod = GatedMLP(bias=bias, act=fn).bfloat16().eval()
    fused = fg.fuse(mod)
    rep = fused.fusion_report
    glu = [s for s in rep.fused if s.ops[0].startswith("glu:")]
    assert len(glu) == 1 and glu[0].ops == [{"silu": "glu:silu", "gelu_tanh": "glu:gelu",
                                             "gelu_erf": "glu:gelu_erf"}[act]], str(rep)
    x = torch.randn(2, 7, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        out = fused(x).double()
        eager = mod(x).double()
        ref = mod.double()(x.double())
    assert runtime.STATS[glu[0].program]["kernel"] >= 1
    err, err_eager = (out - ref).abs().max().item(), (eager - ref).abs().max().item()
    assert err <= 1.5 * err_eager + 2.0 ** -8 * ref.abs().max().item(), (err, err_eager)


def test_gated_pair_picks_up_new_weights(oracle):
    torch.manual_seed(10)
    mod = GatedMLP().bfloat16().eval()
    fused = fg.fuse(mod)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        first = fused(x)
        mod.load_state_dict({k: torch.randn_like(v) for k, v in mod.state_dict().items()})  # copy_: _version moves
        second = fused(x).double()
        eager = mod(x).double()
        ref = mod.double()(x.double())
    assert not torch.equal(first.double(), second)
    err, err_eager = (second - ref).abs().max().item(), (eager - ref).abs().max().item()
    assert err <= 1.5 * err_eager + 2.0 ** -8 * ref.abs().max().item(), (err, err_eager)  # the new weights


def test_gated_pair_needs_private_intermediates():
    class Leaky(GatedMLP):
        def forward(self, x):
            g = self.gate_proj(x)
            return self.down_proj(F.silu(g) * self.up_proj(x)), g  # the gate GEMM's output also leaves

    rep = fg.fuse(Leaky()).fusion_report
    assert not any(s.ops and s.ops[0].startswith("glu:") for s in rep.sites), str(rep)


def test_the_measured_decision_needs_a_clear_win(monkeypatch):
    """FUSEDGEMM_FUSION=auto keeps the kernel only when it is at least 5% faster than the unfused ops (measured
    alternately from a flushed L2, runtime._time_pair): a near tie stays unfused, so noise cannot make a region
    slower. The decision is stored with both times."""
    from fusedgemm.fusion import execute as rt

    store = {}
    monkeypatch.setattr(rt, "_load_decisions", lambda: store)
    monkeypatch.setattr(rt, "_save_decisions", lambda: None)
    monkeypatch.setattr(rt, "decision_key", lambda text, lw, tensors: text)
    monkeypatch.setattr(rt, "loads", lambda text: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    for (t_fused, t_unfused), want in (((96.0, 100.0), False), ((94.0, 100.0), True), ((101.0, 100.0), False)):
        monkeypatch.setattr(rt, "_time_pair", lambda f, g, tf=t_fused, tu=t_unfused: (tf, tu))
        key = f"program {t_fused}"
        assert rt._decide(key, None, (), ()) is want
        assert store[key] == {"fused": want, "us": [t_fused, t_unfused]}
        assert rt._decide(key, None, (), ()) is want  # the stored decision, not measured again
