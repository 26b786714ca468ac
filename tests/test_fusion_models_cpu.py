"""The fusion pass on transformers models (random init from small configs, nothing downloaded), on the CPU:
the fused-site counts per model and path, and logits / hidden states of the lowered regions (float64 oracle) within
the error of eager fp32 against a float64 run of the same model.
"""
import copy

import pytest
import torch

import fusedgemm as fg
from fusedgemm.fusion import execute as runtime

transformers = pytest.importorskip("transformers")

LAYERS = 2


def _llama():
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
    return transformers.LlamaForCausalLM(cfg), lambda: torch.randint(0, 128, (2, 9))


def _phi3():
    cfg = transformers.Phi3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                  max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return transformers.Phi3ForCausalLM(cfg), lambda: torch.randint(0, 128, (2, 9))


def _gpt2():
    cfg = transformers.GPT2Config(n_embd=64, n_layer=LAYERS, n_head=4, vocab_size=128, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg), lambda: torch.randint(0, 128, (2, 9))


def _vit():
    cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                                 intermediate_size=128, image_size=32, patch_size=8)
    return transformers.ViTModel(cfg), lambda: torch.randn(2, 3, 32, 32)


# model -> (fg.fuse fused sites, backend fused sites): which GEMMs take their epilogue
#   llama: fuse traces each MLP (gate: silu(gate) * up); the backend sees the decoder layers too (o_proj + residual,
#          gate, down_proj + residual)
#   phi3:  fuse traces each MLP (one merged gate_up GEMM, chunked: glu); the backend adds o_proj + residual and
#          down_proj + residual, as for llama
#   gpt2:  fuse traces each MLP (c_fc + gelu_new); the backend adds attn c_proj and mlp c_proj + residual
#   vit:   fuse traces each MLP (fc1 + GELU) and the pooler (dense + tanh); the backend adds both residual adds
MODELS = {"llama": (_llama, LAYERS, 3 * LAYERS), "phi3": (_phi3, LAYERS, 3 * LAYERS),
          "gpt2": (_gpt2, LAYERS, 3 * LAYERS), "vit": (_vit, LAYERS + 1, 3 * LAYERS + 1)}


def _main(out):
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits


@pytest.fixture(autouse=True)
def _oracle():
    runtime.cpu_mode = "oracle"
    yield
    runtime.cpu_mode = "torch"


def _check_close(model, fused_out, x):
    with torch.no_grad():
        eager = _main(model(x)).double()
        ref = _main(model.double()(x.double() if x.is_floating_point() else x))
    model.float()
    err_eager = (eager - ref).abs().max().item()
    err_fused = (fused_out.double() - ref).abs().max().item()
    # bound: eager fp32's own error against float64, twice, plus a few fp32 ulps of the output scale
    assert err_fused <= 2 * err_eager + 8 * 2.0 ** -24 * ref.abs().max().item(), (err_fused, err_eager)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fuse_on_model(name):
    make, n_fuse, _ = MODELS[name]
    torch.manual_seed(0)
    model, inp = make()
    model.eval()
    fused = fg.fuse(model)
    rep = fused.fusion_report
    assert len(rep.fused) == n_fuse, str(rep)
    x = inp()
    with torch.no_grad():
        out = _main(fused(x))
    for site in rep.fused:  # fp32 here: gated pairs (fg.swiglu is 16-bit) run unfused, with that reason
        s = runtime.STATS[site.program]
        assert s["kernel"] >= 1 or (site.ops[0].startswith("glu:") and "bf16 / fp16" in s["why"]), str(rep)
    _check_close(model, out, x)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_backend_on_model(name):
    make, _, n_backend = MODELS[name]
    torch._dynamo.reset()
    torch.manual_seed(1)
    model, inp = make()
    model.eval()
    before = len(fg.fusion.REPORTS)
    compiled = torch.compile(model, backend=fg.make_backend(inner="eager", devices="any"), dynamic=True)
    x = inp()
    with torch.no_grad():
        out = _main(compiled(x))
    reports = fg.fusion.REPORTS[before:]
    assert sum(len(r.fused) for r in reports) == n_backend, "\n".join(map(str, reports))
    _check_close(model, out, x)


def _glu_sites(reports):
    return [s for r in reports for s in r.fused if s.ops[0].startswith("glu:")]


@pytest.mark.parametrize("path", ["fuse", "backend"])
def test_phi3_mlp_is_one_glu_gemm_per_layer(path):
    """Phi3MLP: gate_up_proj -> chunk(2, -1) -> up * silu(gate) -> down_proj. In bf16 every layer's MLP runs as
    one glu GEMM over the merged weight (the float64 oracle of fg.swiglu's kernel), within eager bf16's error."""
    torch._dynamo.reset()
    torch.manual_seed(2)
    model, inp = _phi3()
    model = model.bfloat16().eval()
    x = inp()
    before = {text: s["kernel"] for text, s in runtime.STATS.items()}
    if path == "fuse":
        fused = fg.fuse(model)
        reports = [fused.fusion_report]
        glu = _glu_sites(reports)
        assert sorted((s.module, s.site) for s in glu) == [(f"model.layers.{i}.mlp", "gate_up_proj")
                                                           for i in range(LAYERS)], str(fused.fusion_report)
    else:
        n = len(fg.fusion.REPORTS)
        fused = torch.compile(model, backend=fg.make_backend(inner="eager", devices="any"), dynamic=True)
    with torch.no_grad():
        out = fused(x).logits.double()
        eager = model(x).logits.double()
        ref = copy.deepcopy(model).double()(x).logits
    if path == "backend":
        reports = fg.fusion.REPORTS[n:]
        glu = _glu_sites(reports)
    assert len(glu) == LAYERS and all(s.ops == ["glu:silu"] for s in glu), "\n".join(map(str, reports))
    assert all("glu_gate_up:silu" in s.program for s in glu)
    ran = sum(runtime.STATS[t]["kernel"] - before.get(t, 0) for t in {s.program for s in glu})
    assert ran == LAYERS, ran  # each layer's MLP ran lowered (not its torch calls)
    err, err_eager = (out - ref).abs().max().item(), (eager - ref).abs().max().item()
    assert err <= 1.5 * err_eager + 2.0 ** -8 * ref.abs().max().item(), (err, err_eager)
