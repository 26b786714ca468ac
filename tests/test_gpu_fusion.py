"""The fusion pass on the GPU: fused regions run the kernel and agree with a float64 run of the same model within
eager's own error; decisions persist; torch.compile(backend=fg.backend) with Inductor; CUDA-graph replay."""
import json
import math

import pytest
import torch
import torch.nn as nn

import fusedgemm as fg
from fusedgemm.fusion import execute as runtime

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a GPU", allow_module_level=True)


class Block(nn.Module):
    """Linear -> the GPT-2 GELU formula, then Linear + residual: two regions."""

    def __init__(self, d=512, h=1536):
        super().__init__()
        self.fc, self.proj = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        y = self.fc(x)
        y = 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0))))
        return x + self.proj(y)


@pytest.fixture
def mode(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEDGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "_DECISIONS", None)

    def set_mode(m):
        monkeypatch.setenv("FUSEDGEMM_FUSION", m)
    return set_mode


def _errors(model, fused, x):
    with torch.no_grad():
        eager = model(x).double()
        out = fused(x).double()
        ref = model.double()(x.double())
    model.to(x.dtype)
    return (out - ref).abs().max().item(), (eager - ref).abs().max().item(), ref.abs().max().item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 37, 512])
def test_fused_block_runs_the_kernel_within_eager_error(dtype, rows, mode):
    mode("always")
    torch.manual_seed(rows)
    model = Block().cuda().to(dtype).eval()
    fused = fg.fuse(model)
    assert len(fused.fusion_report.fused) == 2, str(fused.fusion_report)
    x = torch.randn(rows, 512, device="cuda", dtype=dtype)
    err, err_eager, scale = _errors(model, fused, x)
    for site in fused.fusion_report.fused:
        assert runtime.STATS[site.program]["kernel"] >= 1, str(fused.fusion_report)
    eps = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    assert err <= err_eager + eps * scale, (err, err_eager)


def test_auto_measures_once_and_persists(mode, tmp_path):
    mode("auto")
    torch.manual_seed(0)
    model = Block().cuda().bfloat16().eval()
    fused = fg.fuse(model)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        fused(x)
        fused(x)
    saved = json.loads((tmp_path / runtime.DECISIONS_FILE).read_text())
    assert len(saved) == 2 and all(set(v) == {"fused", "us"} for v in saved.values()), saved
    for key, v in saved.items():  # the kernel only where measured clearly faster (runtime.FUSED_MARGIN)
        assert v["fused"] == (v["us"][0] <= runtime.FUSED_MARGIN * v["us"][1]), (key, v)


def test_graph_capture_replays(mode):
    mode("always")
    torch.manual_seed(1)
    model = Block().cuda().bfloat16().eval()
    fused = fg.fuse(model)
    x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = fused(x).clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fused(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = fused(x)
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
    assert torch.equal(y, want)


def test_backend_with_inductor(mode):
    mode("always")
    torch._dynamo.reset()
    torch.manual_seed(2)
    model = Block().cuda().bfloat16().eval()
    compiled = torch.compile(model, backend=fg.backend, dynamic=True)
    for rows in (16, 300):
        x = torch.randn(rows, 512, device="cuda", dtype=torch.bfloat16)
        err, err_eager, scale = _errors(model, compiled, x)
        assert err <= err_eager + 2.0 ** -8 * scale, (err, err_eager)
    assert len(fg.fusion.REPORTS[-1].fused) == 2, str(fg.fusion.REPORTS[-1])


def test_llama_backend_sites_and_logits(mode):
    transformers = pytest.importorskip("transformers")
    mode("always")
    torch._dynamo.reset()
    torch.manual_seed(3)
    cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=2, num_attention_heads=8,
                                   num_key_value_heads=4, vocab_size=1024)
    model = transformers.LlamaForCausalLM(cfg).cuda().bfloat16().eval()
    before = len(fg.fusion.REPORTS)
    compiled = torch.compile(model, backend=fg.backend, dynamic=True)
    ids = torch.randint(0, 1024, (2, 64), device="cuda")
    with torch.no_grad():
        out = compiled(ids).logits.double()
        eager = model(ids).logits.double()
        ref = model.double()(ids).logits
    # 3 per layer: o_proj + residual, gate/up as one gated GEMM, down_proj + residual (a recompile repeats names)
    assert len({s.site for r in fg.fusion.REPORTS[before:] for s in r.fused}) == 6
    err, err_eager = (out - ref).abs().max().item(), (eager - ref).abs().max().item()
    assert err <= 1.5 * err_eager + 2.0 ** -8 * ref.abs().max().item(), (err, err_eager)


@pytest.mark.parametrize("backend", [False, True])
def test_phi3_merged_gate_up_runs_one_glu_kernel_per_layer(mode, backend):
    """Phi-3's MLP (gate_up_proj, then chunk(2, -1), up * act(gate)): fg.fuse and fg.backend each turn every layer's
    gate_up_proj into one glu GEMM that runs the kernel; logits within eager's own error against float64 (plus one
    bf16 ulp of their scale)."""
    transformers = pytest.importorskip("transformers")
    mode("always")
    torch._dynamo.reset()
    torch.manual_seed(4)
    cfg = transformers.Phi3Config(hidden_size=512, intermediate_size=1408, num_hidden_layers=2, num_attention_heads=8,
                                  num_key_value_heads=8, vocab_size=1024, pad_token_id=0)
    model = transformers.Phi3ForCausalLM(cfg).cuda().bfloat16().eval()
    before = len(fg.fusion.REPORTS)
    if backend:
        run = torch.compile(model, backend=fg.backend, dynamic=True)
    else:
        run = fg.fuse(model)
    ids = torch.randint(0, 1024, (2, 48), device="cuda")
    with torch.no_grad():
        out = run(ids).logits.double()
        eager = model(ids).logits.double()
        ref = model.double()(ids).logits
    reports = fg.fusion.REPORTS[before:] if backend else [run.fusion_report]
    glu = [s for r in reports for s in r.fused if any(str(op).startswith("glu") for op in s.ops)]
    assert len({(s.module, s.site) for s in glu}) == 2, [str(r) for r in reports]  # a recompile repeats names
    assert all(runtime.STATS[s.program]["kernel"] >= 1 for s in glu), [str(r) for r in reports]
    err, err_eager = (out - ref).abs().max().item(), (eager - ref).abs().max().item()
    assert err <= 1.5 * err_eager + 2.0 ** -8 * ref.abs().max().item(), (err, err_eager)
