"""The eager fast path of matmul_fused (checked once per call signature, then addresses only), on CPU tensors.

The full check and the launch plan are replaced by recorders, so these tests see which calls took the checked
path and what the fast path would have launched with. The GPU tests run the real thing."""
import contextlib
import importlib

import pytest
import torch

from fusedgemm.util import PlanCache

M = importlib.import_module("fusedgemm.matmul")
BF = torch.bfloat16


class Recorder:
    def __init__(self, monkeypatch):
        self.checks, self.runs, self.plans = 0, [], []
        real_check = M.check_matmul_fused_args
        rec = self

        def check(*args, **kwargs):
            rec.checks += 1
            return real_check(*args, **kwargs, arch="sm_90a")

        class Plan:
            def __init__(self, dev, arch, in_kind, m, n, k, out_dtype, epi, values, pointers, **kw):
                self.dev, self.pointers, self.values, self.kw = -1, pointers, values, kw
                rec.plans.append(self)

            def run(self, *ptrs):
                rec.runs.append((self, ptrs))

        monkeypatch.setattr(M, "check_matmul_fused_args", check)
        monkeypatch.setattr(M, "CallPlan", Plan)
        monkeypatch.setattr(M, "current_device_index", lambda: -1)  # a CPU tensor's get_device()
        monkeypatch.setattr(M, "device_guard", lambda device: contextlib.nullcontext())
        monkeypatch.setattr(M, "_PLANS", PlanCache(256))


@pytest.fixture
def rec(monkeypatch):
    return Recorder(monkeypatch)


def t(*shape, dtype=BF):
    return torch.randn(*shape).to(dtype)


def test_second_call_skips_the_checks_and_passes_the_addresses(rec):
    a, w, b = t(2, 5, 64), t(32, 64), t(32)
    y1 = M.matmul_fused(a, w, b, activation="silu")
    y2 = M.matmul_fused(a, w, b, activation="silu")
    assert rec.checks == 1 and len(rec.runs) == 2 and rec.runs[0][0] is rec.runs[1][0]
    assert y1.shape == y2.shape == (2, 5, 32) and y2.dtype == BF
    assert rec.runs[1][1] == (a.data_ptr(), w.data_ptr(), y2.data_ptr(), b.data_ptr())
    a2, b2 = t(2, 5, 64), t(32)  # new tensors of the same signature: still the fast path, their addresses
    y3 = M.matmul_fused(a2, w, b2, activation="silu")
    assert rec.checks == 1 and rec.runs[2][1] == (a2.data_ptr(), w.data_ptr(), y3.data_ptr(), b2.data_ptr())


def test_operand_addresses_follow_the_expression_order(rec):
    a, w, b, c = t(6, 64), t(32, 64), t(32), t(6, 32)
    alpha, beta = torch.tensor([2.0]), torch.tensor([0.5])
    for _ in range(2):
        y = M.matmul_fused(a, w, b, alpha=alpha, beta=beta, c=c)
    assert rec.checks == 1
    plan, ptrs = rec.runs[1]
    # expression order: alpha, c, beta, bias (the Params fields the plan fills per call)
    assert plan.pointers == ("out", "op_alpha_ptr", "op_c", "op_beta_ptr", "op_bias")
    assert ptrs == (a.data_ptr(), w.data_ptr(), y.data_ptr(), alpha.data_ptr(), c.data_ptr(), beta.data_ptr(),
                    b.data_ptr())


@pytest.mark.parametrize("change", ["alpha", "activation", "w_dtype", "bias_dtype", "a_strides", "layout", "beta0"])
def test_any_change_of_signature_takes_the_checked_path(rec, change):
    a, w, b = t(6, 64), t(32, 64), t(32)
    M.matmul_fused(a, w, b, alpha=1.5)
    kw = dict(alpha=1.5)
    if change == "alpha":
        kw["alpha"] = 2.5
    elif change == "activation":
        kw["activation"] = "relu"
    elif change == "bias_dtype":
        b = b.float()
    elif change == "a_strides":
        a = t(6, 80)[:, :64]
    elif change == "layout":
        w, kw["layout"] = t(64, 32), "kn"
    elif change == "beta0":
        kw.update(c=t(6, 32), beta=0.0)
    if change == "w_dtype":
        with pytest.raises(TypeError, match="same dtype"):
            M.matmul_fused(a, w.float(), b, **kw)
    else:
        M.matmul_fused(a, w, b, **kw)
    assert rec.checks == 2
    if change == "alpha":
        assert rec.runs[-1][0].values["op_alpha"] == 2.5


def test_misaligned_address_takes_the_checked_path_and_copies(rec):
    a, w = t(6, 72), t(32, 64)
    aligned = a[:, :64]
    M.matmul_fused(aligned, w)
    shifted = a[:, 8:]  # same shape and strides, address 16 bytes on: still aligned, fast path
    M.matmul_fused(shifted, w)
    assert rec.checks == 1
    odd = t(6 * 72 + 8)[1:1 + 6 * 72].view(6, 72)[:, :64]  # 2-byte offset: the checked path copies it (warned)
    M._WARNED.discard("copy-A")
    with pytest.warns(UserWarning, match="copied"):
        M.matmul_fused(odd, w)
    assert rec.checks == 2 and rec.runs[-1][1][0] != odd.data_ptr()


def test_expressions_take_the_fast_path_keyed_by_expression_and_operands(rec):
    """An epilogue expression's call is checked once per signature too: the expression (equal expressions are one
    key), each operand's dtype, shape and strides or, for a number, its value; the operands' addresses are passed
    per call. A forced config is always checked."""
    import fusedgemm.epilogue as E
    from fusedgemm.plan import forced_config

    a, w, r = t(6, 64), t(32, 64), t(6, 32)
    e = E.parse("relu(acc) + aux(r)")
    M.matmul_fused(a, w, epilogue=e, operands={"r": r})
    y2 = M.matmul_fused(a, w, epilogue=E.parse("relu(acc) + aux(r)"), operands={"r": r})
    assert rec.checks == 1 and rec.runs[1][1] == (a.data_ptr(), w.data_ptr(), y2.data_ptr(), r.data_ptr())
    r2 = t(6, 32)
    y3 = M.matmul_fused(a, w, epilogue=e, operands={"r": r2})  # another tensor of the same signature
    assert rec.checks == 1 and rec.runs[2][1] == (a.data_ptr(), w.data_ptr(), y3.data_ptr(), r2.data_ptr())
    M.matmul_fused(a, w, epilogue=E.parse("relu(acc) - aux(r)"), operands={"r": r})  # another expression
    M.matmul_fused(a, w, epilogue=e, operands={"r": t(6, 32, dtype=torch.float32)})  # another operand dtype
    M.matmul_fused(a, w, epilogue=e, operands={"r": t(6, 64)[:, :32]})  # other strides
    assert rec.checks == 4
    s = E.parse("acc * scalar(s)")
    for value in (2.0, 3.0, 2.0):  # a number operand is baked into the plan: its value is part of the signature
        M.matmul_fused(a, w, epilogue=s, operands={"s": value})
    assert rec.checks == 6 and rec.runs[-1][0] is rec.plans[-2]
    with pytest.raises(TypeError, match="got bool"):  # equal to 1 but refused: the value's type is in the signature
        M.matmul_fused(a, w, epilogue=s, operands={"s": True})
    M.matmul_fused(a, w, epilogue=s, operands={"s": 1.0})
    with pytest.raises(TypeError, match="got bool"):
        M.matmul_fused(a, w, epilogue=s, operands={"s": True})
    assert rec.checks == 9
    alpha = torch.tensor([0.5])  # an operand named like a built-in one, as a device-style tensor: a pointer per call
    ea = E.parse("acc * scalar(alpha)")
    M.matmul_fused(a, w, epilogue=ea, operands={"alpha": alpha})
    y = M.matmul_fused(a, w, epilogue=ea, operands={"alpha": alpha})
    assert rec.checks == 10 and rec.runs[-1][1] == (a.data_ptr(), w.data_ptr(), y.data_ptr(), alpha.data_ptr())
    M.matmul_fused(a, w)
    with forced_config("tile_128x192"):
        M.matmul_fused(a, w)
    assert rec.checks == 12
