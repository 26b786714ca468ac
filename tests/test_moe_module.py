"""fg.nn.FusedMoE on the CPU, against transformers' own sparse MoE blocks built from tiny configs (Mixtral,
Qwen3-MoE with and without norm_topk_prob, Qwen2-MoE with its sigmoid-gated shared expert): the fused path
(`_fused_forward`, the grouped ops' torch reference on the CPU) matches the block's forward in float32 and bf16,
forward falls back to the block bit for bit, parameters are shared (not copied) under the block's state_dict keys,
router hooks still fire, empty experts and a single token work, and unsupported modules are refused by name."""
import importlib

import pytest
import torch

import fusedgemm as fg
from fusedgemm.nn import FusedMoE

MOE = importlib.import_module("fusedgemm.nn.moe")

transformers = pytest.importorskip("transformers")

H, I, E, K = 64, 32, 8, 2  # hidden, expert intermediate, experts, top-k
SHARED_I = 48


def block(kind="mixtral", norm_topk_prob=False, dtype=torch.float32, seed=0):
    """A transformers MoE block of tiny sizes; every parameter drawn at random (the blocks' own init leaves the
    experts torch.empty and the Qwen routers zero, which would tie every top-k)."""
    mod, cfg_cls, cls, kw = {
        "mixtral": ("mixtral", "MixtralConfig", "MixtralSparseMoeBlock",
                    dict(intermediate_size=I, num_local_experts=E)),
        "qwen2": ("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeSparseMoeBlock",
                  dict(moe_intermediate_size=I, num_experts=E, shared_expert_intermediate_size=SHARED_I,
                       norm_topk_prob=norm_topk_prob)),
        "qwen3": ("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeSparseMoeBlock",
                  dict(moe_intermediate_size=I, num_experts=E, norm_topk_prob=norm_topk_prob)),
        "deepseek": ("deepseek_v3", "DeepseekV3Config", "DeepseekV3MoE",
                     dict(moe_intermediate_size=I, n_routed_experts=E, n_group=4, topk_group=2, n_shared_experts=1,
                          norm_topk_prob=norm_topk_prob, routed_scaling_factor=2.5)),
    }[kind]
    cfg = getattr(transformers, cfg_cls)(hidden_size=H, num_experts_per_tok=K, experts_implementation="eager", **kw)
    b = getattr(importlib.import_module(f"transformers.models.{mod}.modeling_{mod}"), cls)(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in b.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if p.dim() == 2 else 0.1))
    return b.to(dtype).eval()


CASES = [("mixtral", False), ("qwen3", True), ("qwen3", False), ("qwen2", False), ("qwen2", True), ("deepseek", True),
         ("deepseek", False)]


def inputs(shape=(2, 5), dtype=torch.float32, seed=1):
    return torch.randn(*shape, H, generator=torch.Generator().manual_seed(seed)).to(dtype)


def close(got, want, rel):
    """max |got - want| within rel times the output's scale (a bound for outputs of any size)."""
    err = (got.double() - want.double()).abs().max().item()
    scale = want.double().abs().max().item()
    assert err <= rel * scale, f"max error {err:.3g} > {rel} * {scale:.3g}"


@pytest.mark.parametrize("kind,norm", CASES)
def test_fused_path_matches_block_float32(kind, norm):
    b = block(kind, norm)
    m = FusedMoE.from_module(b)
    x = inputs()
    with torch.no_grad():
        want, got = b(x), m._fused_forward(x)
    assert got.dtype == x.dtype and got.shape == x.shape
    close(got, want, 1e-5)


@pytest.mark.parametrize("kind,norm", CASES)
def test_fused_path_matches_block_bf16(kind, norm):
    b = block(kind, norm, dtype=torch.bfloat16)
    m = FusedMoE.from_module(b)
    x = inputs(dtype=torch.bfloat16)
    with torch.no_grad():
        want, got = b(x), m._fused_forward(x)
        # the float64 truth, routed as the bf16 block routed (its router ran in bf16)
        b64 = block(kind, norm, dtype=torch.bfloat16).double()
        _, scores, idx = b.gate(x.reshape(-1, H))
    assert got.dtype == torch.bfloat16 and got.shape == x.shape
    close(got, want, 3e-2)
    # one rounding of a float32 sum: no further from the truth than the block's per-expert bf16 adds
    truth = _reference(b64, x.double().reshape(-1, H), scores.double(), idx).reshape(x.shape)
    err_fused = (got.double() - truth).abs().max()
    err_block = (want.double() - truth).abs().max()
    assert err_fused <= err_block * 1.5 + 1e-6, (err_fused, err_block)


def _reference(b, x, scores, idx):
    """The MoE sum with the given routing, in b's dtype, as a loop over tokens (an independent formulation)."""
    gu, down, act = b.experts.gate_up_proj, b.experts.down_proj, b.experts.act_fn
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            e = idx[t, j]
            g, u = (gu[e] @ x[t]).chunk(2)
            out[t] += scores[t, j] * (down[e] @ (act(g) * u))
    return out + _shared(b, x)


def _shared(b, x):
    """The block's shared expert on x (0 without one): Qwen2-MoE's gated one, DeepSeek-V3's plain one."""
    if hasattr(b, "shared_expert"):
        return torch.sigmoid(b.shared_expert_gate(x)) * b.shared_expert(x)
    if hasattr(b, "shared_experts"):
        return b.shared_experts(x)
    return torch.zeros_like(x)


@pytest.mark.parametrize("kind,norm", CASES)
def test_forward_on_cpu_is_the_block_bit_for_bit(kind, norm):
    b = block(kind, norm)
    m = FusedMoE.from_module(b)
    x = inputs()
    with torch.no_grad():
        assert torch.equal(m(x), b(x))
    y = m(x)  # grad mode on and the parameters require grad: the block's forward, differentiable
    assert torch.equal(y, b(x)) and y.requires_grad
    y.sum().backward()
    assert b.experts.gate_up_proj.grad is not None


@pytest.mark.parametrize("kind", ["mixtral", "qwen2", "qwen3"])
def test_state_dict_keys_and_parameters_are_the_blocks(kind):
    b = block(kind)
    m = FusedMoE.from_module(b)
    assert list(m.state_dict()) == list(b.state_dict())
    for (n1, p1), (n2, p2) in zip(m.named_parameters(), b.named_parameters()):
        assert n1 == n2 and p1 is p2  # the same Parameter objects: nothing copied
    m.load_state_dict(block(kind, seed=5).state_dict())  # in place: the block sees it
    assert torch.equal(b.experts.down_proj, block(kind, seed=5).experts.down_proj)


def test_to_and_deepcopy_keep_the_block_in_step():
    import copy
    b = block("qwen2", True)
    m = FusedMoE.from_module(b).to(torch.bfloat16)  # the shared submodules move: the block runs in bf16 too
    assert b.experts.gate_up_proj.dtype == torch.bfloat16 and b.shared_expert.up_proj.weight.dtype == torch.bfloat16
    c = copy.deepcopy(m)
    assert c.experts is c._block.experts and c.experts is not m.experts
    x = inputs(dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(c(x), b(x))
        close(c._fused_forward(x), b(x), 3e-2)


def test_reference_loop_agrees_with_block():
    """The independent token loop used above agrees with the block (so the bf16 truth check means something)."""
    b = block("qwen2", True, dtype=torch.float64)
    x = inputs(dtype=torch.float64).reshape(-1, H)
    with torch.no_grad():
        _, s, idx = b.gate(x)
        close(_reference(b, x, s, idx), b(x[None]).reshape(-1, H), 1e-12)


def test_router_hook_fires_on_the_fused_path():
    b = block("qwen3", True)
    m = FusedMoE.from_module(b)
    seen = []
    m.gate.register_forward_hook(lambda mod, args, out: seen.append(out[0]))
    with torch.no_grad():
        m._fused_forward(inputs())
    assert len(seen) == 1 and seen[0].shape == (10, E)  # what transformers records as router_logits


@pytest.mark.parametrize("kind", ["mixtral", "qwen2"])
def test_empty_experts(kind, monkeypatch):
    """Every token routed to experts 0 and 1: experts 2..7 get no rows (empty groups)."""
    seen = []
    real = MOE.grouped_matmul
    monkeypatch.setattr(MOE, "grouped_matmul", lambda *a, **kw: seen.append(kw["offs"]) or real(*a, **kw))
    b = block(kind, True)
    with torch.no_grad():
        b.gate.weight.zero_()
        b.gate.weight[0, 0], b.gate.weight[1, 0] = 4.0, 3.0
    x = inputs((3, 4))
    x[..., 0] = 5.0 + x[..., 0].abs()  # logit 0 > logit 1 > 0 = the others, for every token
    m = FusedMoE.from_module(b)
    with torch.no_grad():
        _, _, idx = b.gate(x.reshape(-1, H))
        assert set(idx.unique().tolist()) == {0, 1}
        close(m._fused_forward(x), b(x), 1e-5)
    assert seen[0].dtype == torch.int32 and seen[0].tolist() == [12, 24] + [24] * (E - 2)


@pytest.mark.parametrize("kind,norm", CASES)
def test_single_token(kind, norm):
    b = block(kind, norm)
    m = FusedMoE.from_module(b)
    x = inputs((1, 1))
    with torch.no_grad():
        close(m._fused_forward(x), b(x), 1e-5)
        assert torch.equal(m(x), b(x))


def test_whole_model_swap_keeps_keys_outputs_and_router_logits():
    cfg = transformers.Qwen2MoeConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=K,
                                      shared_expert_intermediate_size=SHARED_I, intermediate_size=96,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=128, experts_implementation="eager")
    torch.manual_seed(0)
    model = transformers.Qwen2MoeForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (2, 6))
    keys = list(model.state_dict())
    with torch.no_grad():
        want = model(ids, output_router_logits=True)
        for layer in model.model.layers:
            layer.mlp = FusedMoE.from_module(layer.mlp)
        got = model(ids, output_router_logits=True)
    assert list(model.state_dict()) == keys
    assert torch.equal(got.logits, want.logits)
    assert len(got.router_logits) == 2 and all(torch.equal(a, b) for a, b in zip(got.router_logits,
                                                                                 want.router_logits))


def test_train_flag_and_jitter_fall_back():
    b = block("mixtral")
    b.jitter_noise = 0.1
    m = FusedMoE.from_module(b)
    assert not m.training and not b.training
    m.train()
    assert b.training and b.gate.training and m._use_module(inputs())
    m.eval()
    assert not b.training


def test_forward_takes_the_fused_path_where_allowed(monkeypatch):
    b = block("qwen2", True)
    m = FusedMoE.from_module(b)
    monkeypatch.setattr(FusedMoE, "_use_module", lambda self, x: False)  # as on a GPU
    x = inputs()
    with torch.no_grad():
        assert torch.equal(m(x), m._fused_forward(x))
        close(m(x), b(x), 1e-5)


def test_fallback_conditions():
    m = FusedMoE.from_module(block("qwen3"))
    assert m._use_module(inputs())                        # CPU
    assert m._use_module(inputs(dtype=torch.float64))     # dtype the kernels do not take
    with pytest.raises(ValueError, match="Qwen3MoeSparseMoeBlock.*batch, seq, hidden=64"):
        m(inputs().reshape(-1, H))


def test_unsupported_modules_are_refused_by_name():
    with pytest.raises(TypeError, match="Linear is not supported.*MixtralSparseMoeBlock"):
        FusedMoE.from_module(torch.nn.Linear(H, H))
    with pytest.raises(TypeError, match="expected an nn.Module"):
        FusedMoE.from_module("mlp")
    b = block("qwen3")
    b.experts = torch.nn.ModuleList([torch.nn.Linear(H, H) for _ in range(E)])
    with pytest.raises(TypeError, match="Qwen3MoeSparseMoeBlock.*4.x layout"):
        FusedMoE.from_module(b)
    b = block("mixtral")
    b.experts.is_transposed = True
    with pytest.raises(TypeError, match="MixtralSparseMoeBlock.*is_transposed=True"):
        FusedMoE.from_module(b)
    b = block("mixtral")
    b.experts._is_expert_parallel = True
    with pytest.raises(TypeError, match="MixtralSparseMoeBlock.*expert parallelism"):
        FusedMoE.from_module(b)
    b = block("mixtral")
    b.experts.act_fn = torch.nn.Tanh()
    with pytest.raises(TypeError, match="MixtralSparseMoeBlock.*activation"):
        FusedMoE.from_module(b)
    sub = type("MixtralSparseMoeBlock", (torch.nn.Module,), {})()  # a look-alike outside transformers
    with pytest.raises(TypeError, match="not a known mixture-of-experts block"):
        FusedMoE.from_module(sub)


def test_exported():
    assert fg.nn.FusedMoE is FusedMoE and "FusedMoE" in fg.nn.__all__


@pytest.mark.parametrize("dtype", ["fp8", "int8"])
@pytest.mark.parametrize("kind,norm", CASES)
def test_8bit_experts(kind, norm, dtype):
    """dtype='fp8' / 'int8': the experts' weights quantized per output channel at from_module (non-persistent
    buffers: state_dict keeps the block's keys); per call the rows and the SwiGLU output quantized per row. The
    fused path equals the same quantized pipeline written with torch ops (float64 GEMMs), and stays within 8-bit
    rounding of the block; a dtype cast of the module moves but never converts the codes and scales."""
    from fusedgemm.quant import quantize_rows_torch, resolve_dtype

    b = block(kind, norm)
    moe = FusedMoE.from_module(b, dtype=dtype)
    assert sorted(moe.state_dict()) == sorted(b.state_dict())
    x = inputs((2, 5))
    with torch.no_grad():
        got = moe._fused_forward(x)
        want = b(x)
        scores_idx = b.gate(x.reshape(-1, H))
    want = want[0] if isinstance(want, tuple) else want
    close(got, want, 0.12 if dtype == "fp8" else 0.05)
    # the pipeline by hand
    q = resolve_dtype(dtype, x.device, "test")
    _, scores, idx = scores_idx
    xs = x.reshape(-1, H)
    gu, dn = b.experts.gate_up_proj.detach(), b.experts.down_proj.detach()
    gq, gs = quantize_rows_torch(gu.reshape(E * 2 * I, H), q)
    dq, ds = quantize_rows_torch(dn.reshape(E * H, I), q)
    gq, gs, dq, ds = gq.reshape(E, 2 * I, H), gs.reshape(E, 2 * I), dq.reshape(E, H, I), ds.reshape(E, H)
    out = torch.zeros(xs.shape[0], H, dtype=torch.float64)
    for t in range(xs.shape[0]):
        x8, sx = quantize_rows_torch(xs[t:t + 1], q)
        for j in range(K):
            e = int(idx[t, j])
            a = (x8.double() @ gq[e].double().T) * sx.double()[:, None] * gs[e].double()
            h = (torch.nn.functional.silu(a[:, :I]) * a[:, I:]).to(torch.bfloat16)
            h8, sh = quantize_rows_torch(h, q)
            out[t] += ((h8.double() @ dq[e].double().T) * sh.double()[:, None] * ds[e].double() * scores[t, j])[0]
    with torch.no_grad():
        out += _shared(b, xs).double()
    close(got.reshape(-1, H), out, 1e-5)
    moe.half()
    assert moe.gate_up_q.dtype == q and moe.down_scale.dtype == torch.float32 and b.experts.down_proj.dtype == \
        torch.float16
