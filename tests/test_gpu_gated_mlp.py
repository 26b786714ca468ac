"""fg.nn.GatedMLP on a GPU, built from transformers' MLP modules (LlamaMLP, Qwen2MLP, Phi3MLP; silu, gelu, tanh
gelu; with and without biases), bf16 / fp16 against float64: the swiglu output (down's input, caught by a hook)
within test_gpu_swiglu's derived bound, and the module's output within that bound carried through the down
GEMM. Also: reloads, in-place updates and a CPU round trip seen by the cached interleaved weight, the autograd
path's gradients against eager's, exact=True against eager's rounding, a module made under inference_mode.

Down's bound: the h the module computed is within dh = bound_h (1 + ulp) + ulp |h64| of the float64 h64 (what
test_gpu_swiglu.check accepts); the down GEMM (fp32 sums of exact products: eps = 2^-16, as
test_gpu_swiglu.reference) then moves y by at most |Wd| dh + eps |Wd| (|h64| + dh), and check adds y's own
rounding."""
import importlib
import math

import pytest
import torch

from fusedgemm.nn import GatedMLP

import test_gpu_swiglu as sw  # its float64 reference, bound and check; module access, so pytest collects none

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers")

H, I = 512, 736  # hidden (K of gate/up) and intermediate (K of down): 736 leaves partial tiles
EPS = 2.0 ** -16
DTYPES = [torch.bfloat16, torch.float16]
VARIANTS = [("llama", "silu", False), ("llama", "silu", True), ("phi3", "silu", False),
            ("qwen2", "gelu_pytorch_tanh", False), ("llama", "gelu", True)]


def source(kind, act, bias, dtype, seed):
    """A transformers MLP (random nn.Linear initialisation, made on the CPU from the seed) on the GPU."""
    cfg_name, mod, cls = {"llama": ("LlamaConfig", "llama", "LlamaMLP"), "qwen2": ("Qwen2Config", "qwen2", "Qwen2MLP"),
                          "phi3": ("Phi3Config", "phi3", "Phi3MLP")}[kind]
    kw = {"mlp_bias": bias} if kind == "llama" else {}
    cfg = getattr(transformers, cfg_name)(hidden_size=H, intermediate_size=I, hidden_act=act, **kw)
    mlp_cls = getattr(importlib.import_module(f"transformers.models.{mod}.modeling_{mod}"), cls)
    torch.manual_seed(seed)
    return mlp_cls(cfg).to("cuda", dtype)


def caught(mlp):
    """The list that down's input (the swiglu output h) is appended to at each call."""
    seen = []
    mlp.down.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    return seen


def poison_allocator(*shapes, dtype):
    """fg.swiglu and GatedMLP take no out=, so their outputs cannot be NaN-filled: instead blocks of the outputs'
    sizes are NaN-filled and freed just before the call, for the caching allocator to hand back (most likely:
    it reuses freed blocks of the size asked) -- an element the kernel never writes then reads NaN, which
    check refuses."""
    blocks = [torch.full(s, float("nan"), dtype=dtype, device="cuda") for s in shapes]
    del blocks


def check_module(params, x, h, y, what):
    """h (down's input) and y against float64 from params = (w_gate_up merged, bias or None, down weight, down
    bias or None, activation), within the derived bounds."""
    w, b, wd, bd, act = params
    h64, bound_h = sw.reference(x, w, b, act)
    sw.check(h.reshape(h64.shape), h64, bound_h, f"{what}: h")
    ulp = sw.ULP[h.dtype]
    dh = bound_h * (1 + ulp) + ulp * h64.abs()
    y64 = h64 @ wd.double().T
    if bd is not None:
        y64 = y64 + bd.double()
    bound_y = dh @ wd.double().abs().T + EPS * ((h64.abs() + dh) @ wd.double().abs().T) + 1e-6
    sw.check(y.reshape(y64.shape), y64, bound_y, f"{what}: y")


def of_module(mlp):
    """The parameters a GatedMLP holds now, for check_module."""
    b, bd = mlp.gate_up_bias, mlp.down.bias
    return (mlp.gate_up_weight.detach(), None if b is None else b.detach(), mlp.down.weight.detach(),
            None if bd is None else bd.detach(), mlp.activation)


ACT_NAMES = {"silu": "silu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_erf"}  # hidden_act -> fg.swiglu's name


def of_source(src, hidden_act):
    """The source module's parameters, merged here (not by from_module), for check_module."""
    if hasattr(src, "gate_up_proj"):
        w, b = src.gate_up_proj.weight, src.gate_up_proj.bias
    else:
        w = torch.cat((src.gate_proj.weight, src.up_proj.weight))
        b = None if src.gate_proj.bias is None else torch.cat((src.gate_proj.bias, src.up_proj.bias))
    bd = src.down_proj.bias
    return (w.detach(), None if b is None else b.detach(), src.down_proj.weight.detach(),
            None if bd is None else bd.detach(), ACT_NAMES[hidden_act])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind,act,bias", VARIANTS)
@pytest.mark.parametrize("m", [1, 16, 1000])
def test_against_float64(kind, act, bias, dtype, m):
    src = source(kind, act, bias, dtype, seed=m)
    mlp = GatedMLP.from_module(src)
    seen = caught(mlp)
    lead = (m,) if m < 1000 else (4, m // 4)  # leading dims kept
    x = sw.rand((*lead, H), dtype, seed=m + 1)
    with torch.no_grad():
        mlp(x)  # builds the interleaved copy (and any kernel) first, so the poisoned blocks are the outputs'
        seen.clear()
        poison_allocator((m, I), (m, H), dtype=dtype)
        y = mlp(x)
    torch.cuda.synchronize()
    assert y.shape == x.shape and y.dtype == dtype
    check_module(of_source(src, act), x, seen[0], y, f"{kind} {act} bias={bias} M={m}")


def test_reloads_updates_and_a_cpu_round_trip_are_seen():
    """The interleaved copy cached on gate_up_weight is remade after load_state_dict, copy_, a CPU round trip
    with a reload on the CPU, and load_state_dict(assign=True): each output within the bound of the weights
    the module then holds, and different from the one before."""
    dtype = torch.bfloat16
    mlp = GatedMLP.from_module(source("llama", "silu", True, dtype, seed=1))
    other = GatedMLP.from_module(source("llama", "silu", True, dtype, seed=2))
    seen = caught(mlp)
    x = sw.rand((64, H), dtype, seed=3)
    outs = []

    def run(what):
        seen.clear()
        with torch.no_grad():
            y = mlp(x)
        torch.cuda.synchronize()
        check_module(of_module(mlp), x, seen[0], y, what)
        assert not outs or not torch.equal(y, outs[-1]), f"{what}: the output did not change"
        outs.append(y)

    run("first")
    mlp.load_state_dict(other.state_dict())
    run("after load_state_dict")
    with torch.no_grad():
        mlp.gate_up_weight.copy_(sw.rand((2 * I, H), dtype, seed=4, scale=1 / math.sqrt(H)))
    run("after copy_")
    mlp.cpu()
    mlp.load_state_dict(GatedMLP.from_module(source("qwen2", "silu", False, dtype, seed=5)).state_dict(),
                        strict=False)  # the gate/up weight and down weight; the biases stay
    mlp.cuda()
    run("after a reload on the CPU")
    mlp.load_state_dict(other.state_dict(), assign=True)
    run("after assign=True")


@pytest.mark.parametrize("kind,bias", [("llama", True), ("phi3", False)])
def test_gradients_against_eager(kind, bias):
    """Gradient mode: GatedMLP's torch-ops path. Its gradients (x, gate_up_weight, down.weight, biases) are no
    further from float64's than twice eager bf16's (norm-wise, plus one ulp of the norm)."""
    dtype = torch.bfloat16
    src = source(kind, "silu", bias, dtype, seed=11)
    mlp = GatedMLP.from_module(src)
    src64 = source(kind, "silu", bias, torch.float64, seed=11)
    src64.load_state_dict(src.state_dict())
    x = sw.rand((100, H), dtype, seed=12).requires_grad_(True)
    dy = sw.rand((100, H), dtype, seed=13)
    x64 = x.detach().double().requires_grad_(True)

    def grads(module, inp):
        (module(inp) * dy.to(inp.dtype)).sum().backward()
        if isinstance(module, GatedMLP):
            w, b, down = module.gate_up_weight.grad, module.gate_up_bias, module.down
            b = None if b is None else b.grad
        elif kind == "phi3":
            w, b, down = module.gate_up_proj.weight.grad, None, module.down_proj
        else:
            w = torch.cat((module.gate_proj.weight.grad, module.up_proj.weight.grad))
            b = torch.cat((module.gate_proj.bias.grad, module.up_proj.bias.grad))
            down = module.down_proj
        return {"x": inp.grad, "w": w, "b": b, "dw": down.weight.grad,
                "db": None if down.bias is None else down.bias.grad}

    ours = grads(mlp, x)
    x.grad = None
    theirs, exact = grads(src, x), grads(src64, x64)
    for name, g64 in exact.items():
        if g64 is None:
            continue
        err_ours = (ours[name].double() - g64).norm().item()
        err_eager = (theirs[name].double() - g64).norm().item()
        assert err_ours <= 2 * err_eager + sw.ULP[dtype] * g64.norm().item(), (name, err_ours, err_eager)


@pytest.mark.parametrize("m", [1, 1000])
def test_exact_matches_eager(m):
    """exact=True: h rounds where eager LlamaMLP does, bf16(bf16(silu(bf16(g))) * bf16(u)); bit-equal to eager's
    act_fn(gate_proj(x)) * up_proj(x) but where the GEMMs' fp32 sums (other orders) straddle a rounding point:
    test_gpu_swiglu.test_exact_matches_eager's criterion."""
    dtype = torch.bfloat16
    src = source("llama", "silu", False, dtype, seed=21)
    mlp = GatedMLP.from_module(src, exact=True)
    seen = caught(mlp)
    x = sw.rand((m, H), dtype, seed=22)
    with torch.no_grad():
        mlp(x)
        g, u = src.gate_proj(x), src.up_proj(x)
        eager = src.act_fn(g) * u
    h = seen[0]
    same = (h == eager).float().mean().item()
    assert same >= 0.99, f"only {same:.4f} of the elements bit-equal to eager"
    scale = src.act_fn(g).double().abs() * u.double().abs() + sw.LIPSCHITZ["silu"] * (g.double() * u.double()).abs()
    assert ((h.double() - eager.double()).abs() <= 3 * sw.ULP[dtype] * scale + 1e-6).all()


def test_module_made_under_inference_mode():
    """Inference tensors have no version counter: fg.swiglu interleaves them at each call (no cache), so an
    in-place update under inference_mode is still seen."""
    dtype = torch.bfloat16
    src = source("llama", "silu", False, dtype, seed=31)
    with torch.inference_mode():
        mlp = GatedMLP.from_module(src)
        assert mlp.gate_up_weight.is_inference()
        seen = caught(mlp)
        x = sw.rand((16, H), dtype, seed=32)
        y1 = mlp(x)
        check_module(of_module(mlp), x, seen[-1], y1, "inference_mode")
        mlp.gate_up_weight.mul_(-1)
        y2 = mlp(x)
        check_module(of_module(mlp), x, seen[-1], y2, "inference_mode, after mul_")
    assert not torch.equal(y1, y2)
