"""The fusion pass on SwiGLU MLPs with ONE merged gate_up weight [2I, K] (gate rows, then up rows) cut in halves --
transformers' Phi3MLP, vLLM's merged column-parallel layer: each spelling becomes one glu GEMM (fg.swiglu over the
interleaved weight) in fg.fuse and fg.backend, numerically checked on the CPU by the float64 oracle
(runtime.cpu_mode = "oracle"); the near misses are refused with their reason; weight updates are picked up.
"""
import copy
import importlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fusedgemm as fg
from fusedgemm.fusion import execute as runtime

swiglu_mod = importlib.import_module("fusedgemm.swiglu")  # the module (fg.swiglu is the function)

D, I = 32, 24  # hidden, intermediate: the merged weight is [2I, D]


@pytest.fixture
def oracle():
    runtime.cpu_mode = "oracle"
    yield
    runtime.cpu_mode = "torch"


def _gelu_tanh(t):
    return F.gelu(t, approximate="tanh")


# spelling -> (gate, up) halves of h
CUTS = {
    "chunk_method": lambda h: h.chunk(2, dim=-1),
    "torch_chunk": lambda h: torch.chunk(h, 2, -1),
    "split_method": lambda h: h.split(I, dim=-1),
    "torch_split_list": lambda h: torch.split(h, [I, I], dim=-1),
    "slices": lambda h: (h[..., :I], h[..., I:]),
    "slices_explicit": lambda h: (h[..., 0:I], h[..., I:2 * I]),
}


class MergedMLP(nn.Module):
    """down(act(gate) * up) with gate, up = cut(gate_up(x)); `gemm` "module" (nn.Linear) or "functional"
    (F.linear with the merged weight and optional bias); `order` how the mul is written."""

    def __init__(self, cut="chunk_method", act=F.silu, bias=False, gemm="module", order="up_first",
                 act_on_second=False):
        super().__init__()
        self.gate_up_proj = nn.Linear(D, 2 * I, bias=bias)
        self.down_proj = nn.Linear(I, D, bias=False)
        self.act_mod = nn.SiLU()  # registered: traced as call_module in fg.fuse
        self.cut, self.act, self.gemm, self.order, self.act_on_second = CUTS[cut], act, gemm, order, act_on_second

    def forward(self, x):
        if self.gemm == "module":
            h = self.gate_up_proj(x)
        else:
            h = F.linear(x, self.gate_up_proj.weight, self.gate_up_proj.bias)
        gate, up = self.cut(h)
        if self.act_on_second:
            gate, up = up, gate
        act = self.act_mod if self.act == "module" else self.act
        y = up * act(gate) if self.order == "up_first" else act(gate) * up
        return self.down_proj(y)


def _glu_sites(rep):
    return [s for s in rep.sites if s.fused and s.ops and s.ops[0].startswith("glu:")]


def _check_against_float64(mod, out, x):
    """The fused output within eager bf16's own error against a float64 run of the same model (as the two-linear
    gated-pair tests bound it)."""
    with torch.no_grad():
        eager = mod(x).double()
        ref = copy.deepcopy(mod).double()(x.double())  # a copy: mod's weights (and their cached copies) untouched
    err, err_eager = (out.double() - ref).abs().max().item(), (eager - ref).abs().max().item()
    assert err <= 1.5 * err_eager + 2.0 ** -8 * ref.abs().max().item(), (err, err_eager)


def _kernel_runs():
    return {text: s["kernel"] for text, s in runtime.STATS.items()}


def _ran_kernel(before, text):
    return runtime.STATS[text]["kernel"] - before.get(text, 0)


def _compiled(mod):
    torch._dynamo.reset()
    before = len(fg.fusion.REPORTS)
    compiled = torch.compile(mod, backend=fg.make_backend(inner="eager", devices="any"), dynamic=True)
    return compiled, lambda: fg.fusion.REPORTS[before:]


CASES = [  # (cut, act, bias, gemm, order, act_on_second, expected glu op)
    *[(cut, F.silu, False, "module", "up_first", False, "glu:silu") for cut in CUTS],
    ("chunk_method", F.silu, False, "module", "act_first", False, "glu:silu"),
    ("chunk_method", "module", False, "module", "up_first", False, "glu:silu"),
    ("chunk_method", _gelu_tanh, False, "module", "up_first", False, "glu:gelu"),
    ("slices", F.gelu, False, "module", "act_first", False, "glu:gelu_erf"),
    ("chunk_method", torch.relu, False, "module", "up_first", False, "glu:relu"),
    ("chunk_method", F.silu, True, "module", "up_first", False, "glu:silu"),
    ("torch_chunk", F.silu, False, "functional", "up_first", False, "glu:silu"),
    ("split_method", F.silu, True, "functional", "act_first", False, "glu:silu"),
    ("chunk_method", F.silu, False, "module", "up_first", True, "glu:silu"),     # act(second half) * first
    ("slices", F.silu, True, "functional", "act_first", True, "glu:silu"),
]
IDS = [f"{c[0]}-{getattr(c[1], '__name__', c[1])}-{'bias' if c[2] else 'nobias'}-{c[3]}-{c[4]}"
       + ("-act_on_second" if c[5] else "") for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fuse_makes_one_glu_gemm(case, oracle):
    cut, act, bias, gemm, order, second, op = case
    torch.manual_seed(0)
    mod = MergedMLP(cut, act, bias, gemm, order, second).bfloat16().eval()
    fused = fg.fuse(mod)
    rep = fused.fusion_report
    glu = _glu_sites(rep)
    assert len(glu) == 1 and glu[0].ops == [op], str(rep)
    assert ("glu_up_gate:" if second else "glu_gate_up:") in glu[0].program
    x = torch.randn(2, 7, D, dtype=torch.bfloat16)
    before = _kernel_runs()
    with torch.no_grad():
        out = fused(x)
    assert _ran_kernel(before, glu[0].program) == 1, runtime.STATS[glu[0].program]  # the lowering ran (oracle)
    _check_against_float64(mod, out, x)


BACKEND = (0, 1, 2, 3, 4, 5, 7, 11, 13, 14, 15)  # every cut, nn.SiLU, biases, F.linear, act on the second half


@pytest.mark.parametrize("case", [CASES[i] for i in BACKEND], ids=[IDS[i] for i in BACKEND])
def test_backend_makes_one_glu_gemm(case, oracle):
    cut, act, bias, gemm, order, second, op = case
    torch.manual_seed(1)
    mod = MergedMLP(cut, act, bias, gemm, order, second).bfloat16().eval()
    compiled, reports = _compiled(mod)
    before = _kernel_runs()
    with torch.no_grad():
        outs = [(x, compiled(x)) for x in (torch.randn(rows, D, dtype=torch.bfloat16) for rows in (3, 9))]
    sites = [s for r in reports() for s in r.sites]
    glu = [s for s in sites if s.fused and s.ops[0].startswith("glu:")]
    assert len(glu) == 1 and glu[0].ops == [op], "\n".join(map(str, reports()))
    assert _ran_kernel(before, glu[0].program) == 2  # dynamic: both sizes through the one compiled graph
    for x, out in outs:
        _check_against_float64(mod, out, x)


def test_torch_mode_is_the_model_bit_for_bit():
    torch.manual_seed(2)
    for second in (False, True):
        mod = MergedMLP("slices", bias=True, act_on_second=second).eval()
        x = torch.randn(4, D)
        with torch.no_grad():
            assert torch.equal(fg.fuse(mod)(x), mod(x))  # CPU, torch mode: the program's own torch calls


def test_fp32_runs_unfused_with_the_reason(oracle):
    torch.manual_seed(3)
    mod = MergedMLP().eval()
    fused = fg.fuse(mod)
    (site,) = _glu_sites(fused.fusion_report)
    x = torch.randn(3, D)
    with torch.no_grad():
        assert torch.equal(fused(x), mod(x))
    assert "bf16 / fp16" in runtime.STATS[site.program]["why"]


class Leaky(MergedMLP):
    """A near miss of the merged form: `what` says which."""

    def __init__(self, what):
        super().__init__()
        self.what = what

    def forward(self, x):
        h = self.gate_up_proj(x)
        w = self.what
        if w == "h_escapes":
            gate, up = h.chunk(2, dim=-1)
            return self.down_proj(up * F.silu(gate)), h
        if w == "h_escapes_slices":
            return self.down_proj(h[..., I:] * F.silu(h[..., :I])), h
        if w == "half_escapes":
            gate, up = h.chunk(2, dim=-1)
            return self.down_proj(up * F.silu(gate)), gate
        if w == "act_escapes":
            gate, up = h.chunk(2, dim=-1)
            a = F.silu(gate)
            return self.down_proj(up * a), a
        if w == "chunk_dim0":
            gate, up = h.chunk(2, dim=0)
            return F.silu(gate) * up
        if w == "chunk_dim2_of_3d":  # the last dim of a 3-D h, but fg.fuse cannot know the rank
            gate, up = h.chunk(2, dim=2)
            return F.silu(gate) * up
        if w == "unequal_split":
            gate, up = h.split([I - 4, I + 4], dim=-1)
            return F.silu(gate)[..., :1] * up
        if w == "unequal_slices":
            return F.silu(h[..., :I - 4]) * h[..., I - 4:][..., :1]
        if w == "three_chunks":
            a, b, c = h.chunk(3, dim=-1)
            return F.silu(a) * b + c
        if w == "not_a_product":
            gate, up = h.chunk(2, dim=-1)
            return F.silu(gate) + up
        raise AssertionError(w)


REFUSALS = {
    "h_escapes": "h has another user",
    "h_escapes_slices": "h has another user",
    "half_escapes": "has another user",
    "act_escapes": "the activation silu has another user",
    "chunk_dim0": "chunk on dim 0",
    "chunk_dim2_of_3d": "chunk on dim 2 (only dim=-1 is known to be the last",
    "unequal_split": "split([20, 28]) of 48 columns is not two equal halves",
    "unequal_slices": "is not one half",
    "three_chunks": "chunk(3) of 48 columns is not two equal halves",
    "not_a_product": "not combined as act(gate) * up",
}


@pytest.mark.parametrize("what", sorted(REFUSALS))
def test_fuse_refuses_near_misses_with_the_reason(what):
    torch.manual_seed(4)
    mod = Leaky(what).bfloat16().eval()
    fused = fg.fuse(mod)
    rep = fused.fusion_report
    assert not _glu_sites(rep), str(rep)
    (site,) = [s for s in rep.sites if s.site == "gate_up_proj"]
    assert not site.fused and "merged gate_up" in site.reason and REFUSALS[what] in site.reason, str(rep)
    x = torch.randn(2, 3, D, dtype=torch.bfloat16)
    with torch.no_grad():
        for a, b in zip(*(o if isinstance(o, tuple) else (o,) for o in (fused(x), mod(x)))):
            assert torch.equal(a, b)


@pytest.mark.parametrize("what", ["h_escapes", "chunk_dim0", "unequal_split"])
def test_backend_refuses_near_misses_with_the_reason(what):
    torch.manual_seed(5)
    mod = Leaky(what).bfloat16().eval()
    compiled, reports = _compiled(mod)
    x = torch.randn(2, 3, D, dtype=torch.bfloat16)
    with torch.no_grad():
        compiled(x)
    sites = [s for r in reports() for s in r.sites]
    assert not any(s.fused and s.ops[0].startswith("glu:") for s in sites), "\n".join(map(str, reports()))
    assert any(not s.fused and REFUSALS[what] in s.reason for s in sites), "\n".join(map(str, reports()))


def test_backend_knows_the_last_dim_by_rank(oracle):
    """Dynamo's example values give h's rank: chunk(2, dim=2) of a 3-D h is the last dim and is taken."""
    torch.manual_seed(6)

    class Dim2(MergedMLP):
        def forward(self, x):
            gate, up = self.gate_up_proj(x).chunk(2, dim=2)
            return self.down_proj(F.silu(gate) * up)

    mod = Dim2().bfloat16().eval()
    compiled, reports = _compiled(mod)
    x = torch.randn(2, 5, D, dtype=torch.bfloat16)
    with torch.no_grad():
        out = compiled(x)
    assert sum(s.fused and s.ops == ["glu:silu"] for r in reports() for s in r.sites) == 1
    _check_against_float64(mod, out, x)


def test_qkv_slices_are_not_reported_as_a_gated_near_miss():
    class QKV(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(D, 3 * D)

        def forward(self, x):
            h = self.qkv(x)
            return h[..., :D] + h[..., D:2 * D] * h[..., 2 * D:]

    (site,) = fg.fuse(QKV()).fusion_report.sites
    assert not site.fused and "merged gate_up" not in site.reason, site.reason


def _count_interleaves(monkeypatch):
    calls = []
    real = swiglu_mod.interleave_rows

    def counting(gate, up):
        calls.append(gate.shape)
        return real(gate, up)

    monkeypatch.setattr(swiglu_mod, "interleave_rows", counting)
    monkeypatch.setattr(runtime, "interleave_rows", counting)  # fusion/execute.py's own binding of it
    return calls


@pytest.mark.parametrize("second", [False, True])
def test_interleaved_copy_cached_on_the_merged_weight_and_remade_on_update(second, oracle, monkeypatch):
    torch.manual_seed(7)
    mod = MergedMLP("slices", bias=True, act_on_second=second).bfloat16().eval()
    fused = fg.fuse(mod)
    calls = _count_interleaves(monkeypatch)
    x = torch.randn(3, D, dtype=torch.bfloat16)
    with torch.no_grad():
        first = fused(x)
        fused(x)
        assert len(calls) == 1  # cached: not remade per call (a slice view of the weight would be)
        assert hasattr(mod.gate_up_proj.weight, "_fusedgemm_merged_glu")  # on the merged parameter itself
        mod.load_state_dict({k: torch.randn_like(v) for k, v in mod.state_dict().items()})  # copy_: _version moves
        updated = fused(x)
        assert len(calls) == 2
        _check_against_float64(mod, updated, x)
        mod.gate_up_proj.bias.add_(1.0)  # the bias alone, in place
        biased = fused(x)
        assert len(calls) == 3
        _check_against_float64(mod, biased, x)
        # a new parameter object (the fused copy shares the module's parameters: set it on both)
        new_w = nn.Parameter(torch.randn_like(mod.gate_up_proj.weight))
        mod.gate_up_proj.weight = new_w
        fused.gate_up_proj.weight = new_w
        replaced = fused(x)
        assert len(calls) == 4
        _check_against_float64(mod, replaced, x)
    assert not torch.equal(first, updated) and not torch.equal(updated, biased)


def test_backend_picks_up_in_place_weight_updates(oracle, monkeypatch):
    torch.manual_seed(8)
    mod = MergedMLP().bfloat16().eval()
    compiled, _ = _compiled(mod)
    calls = _count_interleaves(monkeypatch)
    x = torch.randn(4, D, dtype=torch.bfloat16)
    with torch.no_grad():
        first = compiled(x)
        compiled(x)
        assert len(calls) == 1  # the op gets the parameter itself: its cached copy serves both calls
        mod.gate_up_proj.weight.mul_(-1.0)
        second = compiled(x)
    assert len(calls) == 2 and not torch.equal(first, second)
    _check_against_float64(mod, second, x)


def test_inference_tensor_weights_are_never_stale(oracle, monkeypatch):
    """Weights made under inference_mode have no version counter: the copy is remade per call, not cached."""
    torch.manual_seed(9)
    with torch.inference_mode():
        mod = MergedMLP(bias=True).bfloat16().eval()
        fused = fg.fuse(mod)
        calls = _count_interleaves(monkeypatch)
        x = torch.randn(3, D, dtype=torch.bfloat16)
        first = fused(x)
        mod.gate_up_proj.weight.mul_(-1.0)
        second = fused(x)
        assert len(calls) == 2 and not torch.equal(first, second)
        _check_against_float64(mod, second, x)
