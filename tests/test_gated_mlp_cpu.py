"""fg.nn.GatedMLP on the CPU, against transformers' own MLP modules built from tiny configs (LlamaMLP, Qwen2MLP,
MistralMLP: gate_proj / up_proj / down_proj; Phi3MLP: a merged gate_up_proj): float64 and float32 outputs within a
bound derived from the summation lengths, each activation transformers and torch spell, biases, gradients,
state_dict round trips, reloads and in-place updates seen through the interleaved-weight cache (the GPU path run
with the kernel replaced by the float64 evaluator), nothing shared with the source, and every refusal's message."""
import importlib
import io

import pytest
import torch

import fusedgemm as fg
import fusedgemm.epilogue as E
from fusedgemm.epilogue.evaluate import _UNARY
from fusedgemm.nn import FusedLinear, GatedMLP
from fusedgemm.nn.gated_mlp import activation_name

transformers = pytest.importorskip("transformers")

S = importlib.import_module("fusedgemm.swiglu")
MATMUL = importlib.import_module("fusedgemm.matmul")
GM = importlib.import_module("fusedgemm.nn.gated_mlp")

H, I = 64, 96  # hidden (K), intermediate
UNIT = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24}  # unit roundoff
LIPSCHITZ = {"silu": 1.1, "gelu": 1.13, "gelu_erf": 1.13, "relu": 1.0}


def source(kind="llama", act="silu", bias=False, dtype=torch.float64):
    """A transformers MLP module of tiny sizes (random nn.Linear initialisation, nothing downloaded)."""
    cfg_cls, mod, cls = {"llama": ("LlamaConfig", "llama", "LlamaMLP"), "qwen2": ("Qwen2Config", "qwen2", "Qwen2MLP"),
                         "mistral": ("MistralConfig", "mistral", "MistralMLP"),
                         "phi3": ("Phi3Config", "phi3", "Phi3MLP")}[kind]
    kw = {"mlp_bias": bias} if kind == "llama" else {}
    cfg = getattr(transformers, cfg_cls)(hidden_size=H, intermediate_size=I, hidden_act=act, **kw)
    mlp_cls = getattr(importlib.import_module(f"transformers.models.{mod}.modeling_{mod}"), cls)
    return mlp_cls(cfg).to(dtype)


def reference(mlp: GatedMLP, x: torch.Tensor):
    """float64 y from the module's parameters, and a bound on |y_computed - y_exact| for any evaluation in x's
    dtype (unit roundoff u) that sums recursively (error <= n u sum |terms| for n terms), rounds each sum, act(g),
    the product and the output once, and evaluates act within 4 u: the GEMM errors dg, du move act(g) * u by at
    most L |u| dg + |act(g)| du + L dg du; the down GEMM adds its own sum error and carries dp through |Wd|."""
    u = UNIT[x.dtype]
    x64 = x.double().reshape(-1, H)
    w, wd = mlp.gate_up_weight.detach().double(), mlp.down.weight.detach().double()
    h, mag = x64 @ w.T, x64.abs() @ w.abs().T
    if mlp.gate_up_bias is not None:
        b = mlp.gate_up_bias.detach().double()
        h, mag = h + b, mag + b.abs()
    (g, up), (mg, mu) = h.chunk(2, dim=-1), mag.chunk(2, dim=-1)
    dg, du = (H + 1) * u * mg, (H + 1) * u * mu
    ag = _UNARY[mlp.activation](g)
    p = ag * up
    lip = LIPSCHITZ[mlp.activation]
    dp = lip * dg * up.abs() + ag.abs() * du + lip * dg * du + 6 * u * (ag.abs() + lip * g.abs()) * up.abs()
    y, my = p @ wd.T, p.abs() @ wd.abs().T
    if mlp.down.bias is not None:
        bd = mlp.down.bias.detach().double()
        y, my = y + bd, my + bd.abs()
    dy = dp @ wd.abs().T + (I + 2) * u * (my + dp @ wd.abs().T)
    return y.reshape(*x.shape[:-1], H), dy.reshape(*x.shape[:-1], H)


def within(got, y, bound, what, factor=1.0):
    err = (got.double() - y).abs()
    bad = err > factor * bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} off; worst err {err.max().item():.3g}, "
                           f"bound there {bound.flatten()[err.argmax()].item():.3g}")


def count_swiglu(monkeypatch):
    calls = []
    real = GM.swiglu
    monkeypatch.setattr(GM, "swiglu", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    return calls


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral", "phi3"])
def test_matches_source(kind, dtype, seed, monkeypatch):
    src = source(kind, dtype=dtype)
    mlp = GatedMLP.from_module(src)
    assert (mlp.hidden, mlp.intermediate, mlp.activation, mlp.gate_up_bias) == (H, I, "silu", None)
    x = torch.randn(3, 5, H, dtype=dtype)
    calls = count_swiglu(monkeypatch)
    with torch.no_grad():
        got, want = mlp(x), src(x)
    assert calls == ([1] if dtype == torch.float32 else [])  # float64: torch ops (fg.swiglu would compute in fp32)
    assert got.shape == x.shape and got.dtype == dtype
    y, bound = reference(mlp, x)
    within(want, y, bound, f"{kind} itself")  # the bound holds for the source: it is not too tight
    within(got, y, bound, kind, factor=2.0)   # float64: y has an error of its own, at most the bound


ACT_NAMES = {"silu": "silu", "swish": "silu", "gelu": "gelu_erf", "gelu_python": "gelu_erf", "gelu_new": "gelu",
             "gelu_pytorch_tanh": "gelu", "gelu_python_tanh": "gelu", "gelu_accurate": "gelu", "gelu_fast": "gelu",
             "relu": "relu"}


@pytest.mark.parametrize("hidden_act", ACT_NAMES)
def test_transformers_activations(hidden_act, seed):
    src = source("llama", hidden_act, dtype=torch.float32)  # gelu_fast rounds sqrt(2/pi) to 1e-10: not float64
    mlp = GatedMLP.from_module(src)
    assert mlp.activation == ACT_NAMES[hidden_act]
    x = torch.randn(7, H)
    with torch.no_grad():
        y, bound = reference(mlp, x)
        within(src(x), y, bound, f"{hidden_act} itself")
        within(mlp(x), y, bound, hidden_act)


def test_torch_activations():
    F = torch.nn.functional
    assert [activation_name(a) for a in (torch.nn.SiLU(), torch.nn.GELU(), torch.nn.GELU(approximate="tanh"),
                                         torch.nn.ReLU(), F.silu, F.gelu, F.relu, torch.relu)] == \
        ["silu", "gelu_erf", "gelu", "relu", "silu", "gelu_erf", "relu", "relu"]
    src = source("qwen2")
    src.act_fn = torch.nn.GELU(approximate="tanh")
    mlp = GatedMLP.from_module(src)
    x = torch.randn(4, H, dtype=torch.float64)
    with torch.no_grad():
        y, bound = reference(mlp, x)
        within(src(x), y, bound, "GELU(tanh) itself")
        within(mlp(x), y, bound, "GELU(tanh)", factor=2.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_biases_carried(dtype, seed):
    src = source("llama", bias=True, dtype=dtype)
    mlp = GatedMLP.from_module(src)
    assert torch.equal(mlp.gate_up_bias, torch.cat((src.gate_proj.bias, src.up_proj.bias)))
    assert torch.equal(mlp.down.bias, src.down_proj.bias)
    x = torch.randn(2, 3, H, dtype=dtype)
    with torch.no_grad():
        y, bound = reference(mlp, x)
        within(src(x), y, bound, "llama mlp_bias itself")
        within(mlp(x), y, bound, "llama mlp_bias", factor=2.0)
    phi3 = source("phi3", dtype=dtype)  # a merged projection with biases
    phi3.gate_up_proj = torch.nn.Linear(H, 2 * I, dtype=dtype)
    phi3.down_proj = torch.nn.Linear(I, H, dtype=dtype)
    mlp = GatedMLP.from_module(phi3)
    assert torch.equal(mlp.gate_up_bias, phi3.gate_up_proj.bias) and torch.equal(mlp.down.bias, phi3.down_proj.bias)
    with torch.no_grad():
        y, bound = reference(mlp, x)
        within(phi3(x), y, bound, "phi3 with biases itself")
        within(mlp(x), y, bound, "phi3 with biases", factor=2.0)
    src.up_proj.bias = None  # a bias on the gate only: the up half of the merged bias is zeros
    src.down_proj.bias = None
    mlp = GatedMLP.from_module(src)
    assert torch.equal(mlp.gate_up_bias[I:], torch.zeros(I, dtype=dtype)) and mlp.down.bias is None
    with torch.no_grad():
        y, bound = reference(mlp, x)
        within(src(x), y, bound, "gate bias only itself")
        within(mlp(x), y, bound, "gate bias only", factor=2.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("kind,bias", [("llama", True), ("llama", False), ("phi3", False)])
def test_gradients_match_the_source(kind, bias, dtype, seed, monkeypatch):
    src = source(kind, "gelu_pytorch_tanh", bias=bias, dtype=dtype)
    mlp = GatedMLP.from_module(src)
    calls = count_swiglu(monkeypatch)
    x = torch.randn(3, 4, H, dtype=dtype, requires_grad=True)
    dy = torch.randn(3, 4, H, dtype=dtype)
    (mlp(x) * dy).sum().backward()
    assert calls == []  # the torch-ops path: fg.swiglu is not differentiable
    dx, x.grad = x.grad, None
    (src(x) * dy).sum().backward()

    def close(got, want, what):  # sums of <= 2I terms in other orders: 4 I u of the magnitude
        tol = 4 * I * UNIT[dtype] * want.abs().max().item()
        assert (got - want).abs().max().item() <= tol, what

    close(dx, x.grad, "dx")
    w_grad = src.gate_up_proj.weight.grad if kind == "phi3" else torch.cat((src.gate_proj.weight.grad,
                                                                          src.up_proj.weight.grad))
    close(mlp.gate_up_weight.grad, w_grad, "d gate_up_weight")
    close(mlp.down.weight.grad, src.down_proj.weight.grad, "d down.weight")
    if bias:
        close(mlp.gate_up_bias.grad, torch.cat((src.gate_proj.bias.grad, src.up_proj.bias.grad)), "d bias")
        close(mlp.down.bias.grad, src.down_proj.bias.grad, "d down.bias")
    x2 = torch.randn(2, H, dtype=dtype)  # only the parameters need a gradient: still torch ops
    mlp(x2).sum().backward()
    assert calls == []
    with torch.no_grad():  # no gradient needed: fg.swiglu where it takes the dtype
        mlp(x2)
    assert calls == ([1] if dtype == torch.float32 else [])


def test_state_dict_round_trip(seed):
    mlp = GatedMLP.from_module(source("llama", "gelu", bias=True, dtype=torch.float32))
    sd = mlp.state_dict()
    assert set(sd) == {"gate_up_weight", "gate_up_bias", "down.weight", "down.bias"}
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    fresh = GatedMLP(H, I, bias=True, activation="gelu_erf")
    fresh.load_state_dict(torch.load(buf))
    x = torch.randn(5, H)
    with torch.no_grad():
        assert torch.equal(fresh(x), mlp(x))
    with pytest.raises(RuntimeError, match="gate_up_bias"):  # a biasless module refuses the biases
        GatedMLP(H, I, activation="gelu_erf").load_state_dict(sd)


def _fake_matmul_fused(x, w, epilogue=None, operands=None, out_dtype=None):
    """matmul_fused stand-in: acc = x @ w^T in float64, then the epilogue's float64 evaluator."""
    acc = x.double().reshape(-1, x.shape[-1]) @ w.double().T
    y = E.evaluate(epilogue, acc, operands, out_dtype=out_dtype or x.dtype)
    return y.to(out_dtype or x.dtype).reshape(*x.shape[:-1], -1)


@pytest.fixture
def gpu_path(monkeypatch):
    """GatedMLP's fg.swiglu call runs the GPU path (the interleaved copy cached on the weight, the paired
    epilogue) with the kernel replaced by the float64 evaluator; returns the list of interleavings made."""
    made = []
    real_interleave = S._interleave
    monkeypatch.setattr(S, "_interleave", lambda w: made.append(1) or real_interleave(w))
    monkeypatch.setattr(MATMUL, "matmul_fused", _fake_matmul_fused)
    monkeypatch.setattr(GM, "swiglu", lambda x, w, b, activation, exact: S._swiglu_16(x, w, b, activation, exact,
                                                                                       None))
    return made


def _glu64(x, w, b, act):
    g, u = (x.double() @ w.double().T + (0 if b is None else b.double())).chunk(2, dim=-1)
    return _UNARY[act](g) * u


def test_reloads_and_in_place_updates_are_seen(gpu_path, seed):
    """The cached interleaved copy is remade after load_state_dict, copy_ / mul_ in place, load_state_dict
    (assign=True) and a replaced parameter; it is reused while nothing changes. Each output equals a fresh
    module's with the same state, and the swiglu output is the float64 formula rounded once to bf16."""
    mlp = GatedMLP.from_module(source("llama", bias=True, dtype=torch.bfloat16))
    seen = []
    mlp.down.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    x = torch.randn(6, H, dtype=torch.bfloat16)

    def run(what):
        with torch.no_grad():
            y = mlp(x)
            h = seen[-1]
            h64 = _glu64(x, mlp.gate_up_weight, mlp.gate_up_bias, "silu")
            assert ((h.double() - h64).abs() <= 2.0 ** -8 * h64.abs()).all(), what  # one rounding to bf16 (u = 2^-8)
            fresh = GatedMLP(H, I, bias=True, dtype=torch.bfloat16)
            fresh.load_state_dict(mlp.state_dict())
            assert torch.equal(fresh(x), y), what
        return y

    y1 = run("first")
    assert len(gpu_path) == 2  # mlp's copy, fresh's
    assert torch.equal(run("again"), y1) and len(gpu_path) == 3  # mlp's cached copy reused: only fresh's made
    other = GatedMLP.from_module(source("llama", bias=True, dtype=torch.bfloat16))
    mlp.load_state_dict(other.state_dict())
    y2 = run("after load_state_dict")
    assert not torch.equal(y2, y1)
    with torch.no_grad():
        mlp.gate_up_weight.copy_(torch.randn(2 * I, H) / 8)
    y3 = run("after copy_")
    assert not torch.equal(y3, y2)
    with torch.no_grad():
        mlp.gate_up_weight[:I].mul_(-1)  # the gate half only, through a view
    y4 = run("after mul_ of a view")
    assert not torch.equal(y4, y3)
    mlp.load_state_dict(other.state_dict(), assign=True)
    assert torch.equal(run("after assign=True"), y2)
    mlp.gate_up_weight = torch.nn.Parameter(torch.randn(2 * I, H, dtype=torch.bfloat16) / 8)
    assert not torch.equal(run("after a new parameter"), y2)


def test_inference_tensors_are_not_cached(gpu_path):
    """A module made under inference_mode holds inference tensors, which have no version counter: fg.swiglu
    interleaves them per call instead of caching a copy it could not invalidate."""
    with torch.inference_mode():
        mlp = GatedMLP(H, I, dtype=torch.bfloat16)
        x = torch.randn(3, H, dtype=torch.bfloat16)
        y1 = mlp(x)
        mlp.gate_up_weight.mul_(2)
        y2 = mlp(x)
    assert len(gpu_path) == 2 and not torch.equal(y1, y2)


def test_autocast_and_exact_float32_use_torch_ops(monkeypatch, seed):
    src = source("phi3", dtype=torch.float32)
    mlp = GatedMLP.from_module(src, exact=True)
    calls = count_swiglu(monkeypatch)
    x = torch.randn(4, H)
    with torch.no_grad():
        assert torch.equal(mlp(x), src(x))  # exact=True on float32: eager's float32 ops, the same ones as Phi3MLP
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = mlp(x), src(x)
    assert calls == [] and got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_nothing_shared_with_the_source(seed):
    src = source("llama", bias=True).train()
    src.down_proj.bias.requires_grad_(False)
    mlp = GatedMLP.from_module(src)
    assert mlp.training and not mlp.down.bias.requires_grad and mlp.gate_up_weight.requires_grad
    assert isinstance(mlp.down, FusedLinear)
    x = torch.randn(2, H, dtype=torch.float64)
    with torch.no_grad():
        y = mlp(x)
        for p in src.parameters():
            p.add_(1.0)
        assert torch.equal(mlp(x), y)
        before = src(x)
        for p in mlp.parameters():
            p.mul_(3.0)
        assert torch.equal(src(x), before)


def test_extra_repr():
    mlp = GatedMLP(H, I, bias=True, activation="gelu", exact=True)
    assert "hidden=64, intermediate=96, bias=True, activation='gelu', exact=True" in repr(mlp)
    assert fg.nn.GatedMLP is GatedMLP and "GatedMLP" in fg.nn.__all__


class _Merged(torch.nn.Module):  # Phi-3's attribute names, parts swapped in by the tests
    def __init__(self, rows=2 * I, down=(H, I)):
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(H, rows, bias=False)
        self.down_proj = torch.nn.Linear(down[1], down[0], bias=False)
        self.activation_fn = torch.nn.SiLU()


class _MyLinear(torch.nn.Linear):
    pass


def test_refusals_name_what_was_found():
    bad = source("llama", "quick_gelu")
    with pytest.raises(ValueError, match=r"activation QuickGELUActivation\(\).*QuickGELUActivation\) has no swiglu"):
        GatedMLP.from_module(bad)
    bad.act_fn = torch.nn.Tanh()
    with pytest.raises(ValueError, match=r"torch\.nn\.modules\.activation\.Tanh\) has no swiglu equivalent"):
        GatedMLP.from_module(bad)
    look_alike = _Merged()  # transformers' class name, but not transformers' class: not taken
    look_alike.activation_fn = type("GELUTanh", (torch.nn.Module,), {})()
    with pytest.raises(ValueError, match=r"test_gated_mlp_cpu\.GELUTanh\) has no swiglu equivalent"):
        GatedMLP.from_module(look_alike)
    with pytest.raises(ValueError, match="either gate_proj \\+ up_proj or gate_up_proj .*found neither"):
        GatedMLP.from_module(torch.nn.Module())
    both = _Merged()
    both.gate_proj = torch.nn.Linear(H, I)
    with pytest.raises(ValueError, match="found both"):
        GatedMLP.from_module(both)
    no_act = _Merged()
    del no_act.activation_fn
    with pytest.raises(ValueError, match="_Merged has no act_fn or activation_fn attribute"):
        GatedMLP.from_module(no_act)
    no_up = source("llama")
    del no_up.up_proj
    with pytest.raises(ValueError, match=r"LlamaMLP\.up_proj must be an nn\.Linear .*got nothing"):
        GatedMLP.from_module(no_up)
    no_down = _Merged()
    del no_down.down_proj
    with pytest.raises(ValueError, match=r"_Merged\.down_proj must be an nn\.Linear .*got nothing"):
        GatedMLP.from_module(no_down)
    sub = source("qwen2")
    sub.gate_proj = _MyLinear(H, I, bias=False, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"Qwen2MLP\.gate_proj must be an nn\.Linear .*got _MyLinear"):
        GatedMLP.from_module(sub)
    act_lin = _Merged()
    act_lin.gate_up_proj = FusedLinear(H, 2 * I, bias=False, activation="relu")
    with pytest.raises(ValueError, match=r"got FusedLinear \(activation='relu', alpha=1\.0\)"):
        GatedMLP.from_module(act_lin)
    conv = _Merged()
    conv.down_proj = torch.nn.Conv1d(I, H, 1)
    with pytest.raises(ValueError, match="down_proj must be an nn.Linear .*got Conv1d"):
        GatedMLP.from_module(conv)
    uneven = source("llama", dtype=torch.float32)
    uneven.up_proj = torch.nn.Linear(H, I + 2, bias=False)
    with pytest.raises(ValueError, match=r"gate_proj\.weight \[96, 64\] and up_proj\.weight \[98, 64\]"):
        GatedMLP.from_module(uneven)
    with pytest.raises(ValueError, match=r"down_proj\.weight must be \[K=64, I=96\] .*got \[64, 48\]"):
        GatedMLP.from_module(_Merged(down=(H, I // 2)))
    with pytest.raises(ValueError, match=r"odd row count: \[191, 64\]"):
        GatedMLP.from_module(_Merged(rows=2 * I - 1))
    mixed = _Merged()
    mixed.down_proj.half()
    with pytest.raises(ValueError, match="down_proj.weight is torch.float16 on cpu, gate_up_proj.weight "
                                         "torch.float32 on cpu"):
        GatedMLP.from_module(mixed)
    with pytest.raises(ValueError, match="expected an nn.Module, got dict"):
        GatedMLP.from_module({})
    with pytest.raises(ValueError, match="activation must be one of silu, gelu, gelu_erf, relu, got 'swish'"):
        GatedMLP(H, I, activation="swish")
    with pytest.raises(ValueError, match=r"x must be \[\.\.\., hidden=64\], got \(3, 32\)"):
        GatedMLP(H, I)(torch.randn(3, 32))
