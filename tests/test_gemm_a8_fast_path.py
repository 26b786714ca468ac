"""The eager fast path of gemm_a8 (checked once per call signature, then addresses only), on CPU tensors.

The full check and the launch plan are replaced by recorders, so these tests see exactly which calls took the
checked path and what the fast path would have launched with. The GPU tests run the real thing."""
import contextlib
import importlib

import pytest
import torch

import fusedgemm as fg
import fusedgemm.epilogue as E

G = importlib.import_module("fusedgemm.gemm_a8")
FP8 = torch.float8_e4m3fn
M, N, K = 8, 32, 64


class Recorder:
    def __init__(self, monkeypatch):
        self.checks = 0
        self.runs = []
        self.plans = []
        real_check = G.check_gemm_a8_args
        rec = self

        def check(*args, **kwargs):
            rec.checks += 1
            return real_check(*args, **kwargs, arch="sm_90a")

        class Plan:
            def __init__(self, dev, arch, in_kind, m, n, k, out_dtype, epi, values, pointers, bias_align=1):
                assert dev is None  # a CPU tensor's device index; current_device_index() is patched to match
                self.pointers, self.values = pointers, values
                self.dev, self.m, self.n, self.alpha = -1, m, n, values.get("op_alpha")
                self.n_out = n // 2 if epi.pairs else n  # as CallPlan: a paired epilogue writes N / 2
                self.bias_align = bias_align
                rec.plans.append(self)

            def run(self, *ptrs):
                rec.runs.append((self, ptrs))

        monkeypatch.setattr(G, "check_gemm_a8_args", check)
        monkeypatch.setattr(G, "_CallPlan", Plan)
        monkeypatch.setattr(G, "current_device_index", lambda: -1)  # a CPU tensor's get_device()
        monkeypatch.setattr(G, "device_guard", lambda device: contextlib.nullcontext())

    @property
    def last_plan(self):
        return self.runs[-1][0]


@pytest.fixture
def rec(monkeypatch):
    return Recorder(monkeypatch)


def make(m=M):
    a = torch.randn(m, K).to(FP8)
    b = fg.preshuffle(torch.randn(N, K).to(FP8))
    return a, b, torch.randn(N, dtype=torch.bfloat16), torch.rand(m), torch.rand(N)


def call(a, b, bias, sa, sb, **kw):
    return G.gemm_a8(a, b, bias, scale_a=sa, scale_b=sb, epilogue=kw.pop("epilogue", "bias_silu"), **kw)


def test_second_call_of_a_signature_skips_the_checks(rec):
    a, b, bias, sa, sb = make()
    y1 = call(a, b, bias, sa, sb)
    y2 = call(a, b, bias, sa, sb)
    assert rec.checks == 1 and len(rec.runs) == 2 and rec.runs[0][0] is rec.runs[1][0]
    assert y1.shape == y2.shape == (M, N) and y2.dtype == torch.bfloat16
    _, ptrs = rec.runs[1]
    assert ptrs == (a.data_ptr(), b.data.data_ptr(), y2.data_ptr(), bias.data_ptr(), sa.data_ptr(), sb.data_ptr())
    # New tensors of the same signature: still the fast path, with their addresses.
    a2, _, bias2, sa2, sb2 = make()
    out = torch.empty(M, N, dtype=torch.bfloat16)
    call(a2, b, bias2, sa2, sb2, out=out)  # a new signature (out given): checked once
    call(a2, b, bias2, sa2, sb2, out=out)
    assert rec.checks == 2
    assert rec.runs[-1][1] == (a2.data_ptr(), b.data.data_ptr(), out.data_ptr(), bias2.data_ptr(), sa2.data_ptr(),
                               sb2.data_ptr())


@pytest.mark.parametrize("change", ["m", "epilogue", "out_dtype", "bias_dtype", "strided_bias", "float_scale",
                                    "no_scale", "scale_shape"])
def test_a_different_signature_is_checked_again(rec, change):
    a, b, bias, sa, sb = make()
    call(a, b, bias, sa, sb)
    kw = {}
    if change == "m":
        a, _, _, sa, _ = make(m=M + 8)
    elif change == "epilogue":
        kw["epilogue"] = "bias_gelu"
    elif change == "out_dtype":
        kw["out_dtype"] = torch.float16
        bias = bias.float()
    elif change == "bias_dtype":
        bias = bias.float()
    elif change == "strided_bias":
        bias = torch.randn(2 * N, dtype=torch.bfloat16)[::2]  # same shape and dtype, not contiguous
    elif change == "float_scale":
        sa = 0.5
    elif change == "no_scale":
        sb = None
    elif change == "scale_shape":
        sb = torch.rand(1)
    if change == "strided_bias":
        with pytest.raises(ValueError, match="bias must be contiguous"):
            call(a, b, bias, sa, sb, **kw)
    else:
        call(a, b, bias, sa, sb, **kw)
    assert rec.checks == 2


def test_python_scale_values_are_part_of_the_signature(rec):
    a, b, bias, _, _ = make()
    call(a, b, bias, 0.5, 2.0)
    call(a, b, bias, 0.5, 2.0)
    assert rec.checks == 1 and rec.last_plan.alpha == 1.0
    call(a, b, bias, 0.25, 2.0)
    assert rec.checks == 2 and rec.last_plan.alpha == 0.5
    assert rec.runs[-1][1][4:] == (0, 0)  # folded into alpha: no scale tensors


def test_non_float_python_scales_always_take_the_checked_path(rec):
    a, b, bias, _, sb = make()
    call(a, b, bias, 2, sb)
    call(a, b, bias, 2, sb)
    assert rec.checks == 2 and rec.last_plan.alpha == 2.0
    for _ in range(2):
        with pytest.raises(TypeError, match="scale_a must be a float32 tensor, a real number or None"):
            call(a, b, bias, True, sb)


def test_misaligned_addresses_are_checked_every_call(rec):
    a, b, bias, sa, sb = make()
    call(a, b, bias, sa, sb)
    raw = torch.empty(M * K + 1, dtype=torch.uint8)
    a_off = raw[1:].view(FP8).view(M, K)  # same dtype, shape, strides; address 1 byte off
    a_off.copy_(a)
    with pytest.raises(ValueError, match="A must be 16-byte aligned"):
        call(a_off, b, bias, sa, sb)
    out_raw = torch.empty(M * N + 2, dtype=torch.bfloat16)
    out_ok, out_off = out_raw[2:].view(M, N), out_raw[1:-1].view(M, N)  # same signature, 4 and 2 bytes in
    call(a, b, bias, sa, sb, out=out_ok)  # a new signature: checked, recorded
    with pytest.raises(ValueError, match="out must be 4-byte aligned"):
        call(a, b, bias, sa, sb, out=out_off)
    assert rec.checks == 4 and len(rec.runs) == 2


def test_device_of_each_tensor_is_part_of_the_signature(rec, monkeypatch):
    a, b, bias, sa, sb = make()
    call(a, b, bias, sa, sb)
    monkeypatch.setattr(torch.Tensor, "get_device", lambda t: 3 if t is bias else -1)
    with pytest.raises(ValueError, match="bias is on"):  # the full check compares devices
        monkeypatch.setattr(torch.Tensor, "device", property(lambda t: torch.device("meta") if t is bias
                                                                else torch.device("cpu")))
        call(a, b, bias, sa, sb)
    assert rec.checks == 2


def test_replacing_the_weight_data_forgets_its_plans(rec):
    a, b, bias, sa, sb = make()
    call(a, b, bias, sa, sb)
    assert len(b.call_plans) == 1
    b.data = fg.preshuffle(torch.randn(N + 16, K).to(FP8)).data
    assert b.call_plans == {}
    with pytest.raises(ValueError, match=r"bias must have shape \[N=48\]"):
        call(a, b, bias, sa, sb)
    b.layout = fg.preshuffle(torch.randn(N, K).to(FP8)).layout
    assert b.call_plans == {}


def test_forced_config_bypasses_and_does_not_record(rec):
    a, b, bias, sa, sb = make()
    call(a, b, bias, sa, sb)
    with G.forced_config("tile_128x128", 2):
        call(a, b, bias, sa, sb)
        call(a, b, bias, sa, sb)
    assert rec.checks == 3 and len(b.call_plans) == 1


def test_bad_arguments_still_get_the_checked_message(rec):
    a, b, bias, sa, sb = make()
    call(a, b, bias, sa, sb)
    with pytest.raises(TypeError, match="B must be preshuffled"):
        call(a, b.data, bias, sa, sb)
    with pytest.raises(TypeError, match="A must be a torch.Tensor"):
        call([[1]], b, bias, sa, sb)
    with pytest.raises(TypeError, match="bias must be a tensor or None"):
        call(a, b, [1.0] * N, sa, sb)


def test_plans_per_weight_are_bounded(rec):
    _, b, bias, _, sb = make()
    b.call_plans.limit = 4  # a util.PlanCache, the one cache implementation of gemm_a8 and matmul_fused
    for m in range(16, 16 * 8, 16):
        a, _, _, sa, _ = make(m)
        call(a, b, bias, sa, sb)
    assert len(b.call_plans) == 4


# ---- epilogue expressions -------------------------------------------------------------------------------------
EXPR = E.parse("silu(acc * n_vec(s) + aux(res)) * scalar(q)")


def expr_operands(m=M):
    return {"s": torch.rand(N), "res": torch.randn(m, N, dtype=torch.bfloat16), "q": 0.5}


def test_expression_repeat_call_skips_the_checks(rec):
    a, b, *_ = make()
    ops = expr_operands()
    G.gemm_a8(a, b, epilogue=EXPR, operands=ops)
    y = G.gemm_a8(a, b, epilogue=EXPR, operands=ops)
    assert rec.checks == 1 and len(rec.runs) == 2 and rec.runs[0][0] is rec.runs[1][0]
    plan, ptrs = rec.runs[1]
    assert plan.pointers == ("out", "op_s", "op_res")  # tensor operands in the order of `operands`
    assert ptrs == (a.data_ptr(), b.data.data_ptr(), y.data_ptr(), ops["s"].data_ptr(), ops["res"].data_ptr())
    ops2 = dict(expr_operands(), q=0.25)  # a Python scalar's value is part of the signature
    G.gemm_a8(a, b, epilogue=EXPR, operands=ops2)
    assert rec.checks == 2 and rec.last_plan.values["op_q"] == 0.25
    G.gemm_a8(a, b, epilogue=E.parse(str(EXPR)), operands=ops2)  # an equal tree is the same signature
    assert rec.checks == 2


def test_expression_with_save_returns_both_outputs(rec):
    a, b, *_ = make()
    e = E.parse("relu(save(acc * scalar(q), fp16))")
    for _ in range(2):
        y, saved = G.gemm_a8(a, b, epilogue=e, operands={"q": torch.tensor([2.0])})
        assert y.dtype == torch.bfloat16 and saved.dtype == torch.float16 and saved.shape == (M, N)
    assert rec.checks == 1 and rec.last_plan.pointers == ("out", "saved", "op_q_ptr")
    assert rec.runs[-1][1][2:4] == (y.data_ptr(), saved.data_ptr())


def test_expression_misaligned_operand_takes_the_checked_path(rec):
    a, b, *_ = make()
    ops = expr_operands()
    G.gemm_a8(a, b, epilogue=EXPR, operands=ops)
    base = torch.randn(M * N + 1, dtype=torch.bfloat16)
    ops["res"] = base[1:].view(M, N)  # same signature, 2-byte aligned: aux needs two elements (4 bytes)
    with pytest.raises(ValueError, match=r"aux\(res\) must be aligned to two elements"):
        G.gemm_a8(a, b, epilogue=EXPR, operands=ops)
    assert rec.checks == 2


def test_expression_operands_that_are_parameters_pass_their_addresses(rec):
    """Operands held as nn.Parameter (a module's scale or bias) are tensors to the fast path too: their addresses
    are passed per call, as the checked path passes them."""
    a, b, _, _, _ = make()
    e = E.parse("acc * n_vec(s) + n_vec(bias)")
    s = torch.nn.Parameter(torch.rand(N), requires_grad=False)
    bias = torch.nn.Parameter(torch.randn(N, dtype=torch.bfloat16), requires_grad=False)
    y1 = G.gemm_a8(a, b, epilogue=e, operands={"s": s, "bias": bias})
    y2 = G.gemm_a8(a, b, epilogue=e, operands={"s": s, "bias": bias})
    assert rec.runs[0][1] == (a.data_ptr(), b.data.data_ptr(), y1.data_ptr(), s.data_ptr(), bias.data_ptr())
    assert rec.runs[1][1] == (a.data_ptr(), b.data.data_ptr(), y2.data_ptr(), s.data_ptr(), bias.data_ptr())
    assert rec.checks == 1
