"""Epilogue expressions through gemm_a8 on a GPU (just-in-time kernels) against the float64 evaluator.

Random trees (depth up to 6, every leaf and op, every output type, ragged M and N, poisoned outputs), every
tile config of the arch, the save(...) output, graph capture of a JIT-built epilogue."""
import math
import random

import pytest
import torch

import fusedgemm as fg
import fusedgemm.epilogue as E
from fusedgemm.epilogue import ir
from fusedgemm.gemm_a8 import forced_config, plans
from fusedgemm.runtime import kernels

from epilogue_trees import check_close, random_operands, random_tree, tolerance

pytestmark = pytest.mark.gpu


def arch():
    from fusedgemm.runtime.arch import device_arch

    return device_arch(torch.cuda.current_device())


def out_dtypes():
    return [torch.bfloat16, torch.float16, torch.float32, fg.FP8_DTYPE_FOR_ARCH[arch()]]


def problem(kind, m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if kind == "int8":
        a = torch.randint(-8, 8, (m, k), dtype=torch.int8, device="cuda", generator=g)
        w = torch.randint(-8, 8, (n, k), dtype=torch.int8, device="cuda", generator=g)
    else:
        dt = fg.FP8_DTYPE_FOR_ARCH[arch()]
        a = (torch.randn(m, k, device="cuda", generator=g) / math.sqrt(math.sqrt(k))).to(dt)
        w = (torch.randn(n, k, device="cuda", generator=g) / math.sqrt(math.sqrt(k))).to(dt)
    # The accumulator as the kernel sees it (exact products, summed in float64; fp8 sums are exact enough).
    acc = a.double().cpu() @ w.double().cpu().T if kind == "int8" else a.float().double().cpu() @ w.float().double().cpu().T
    return a, fg.preshuffle(w), acc


def poisoned(m, n, dtype):
    if dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        return torch.full((m, n), 0x55, dtype=torch.uint8, device="cuda").view(dtype)  # a finite code: checked below
    return torch.full((m, n), float("nan"), dtype=dtype, device="cuda")


def check_output(got, acc, expr, ops_cpu, out_dtype, what, allowed, acc_noise):
    ref, ref_saved = E.evaluate_outputs(expr, acc, ops_cpu)
    tol = tolerance(expr, acc, ops_cpu, ref, acc_noise)
    # One rounding to the output type on top of the fp32 computation (fp8 saturates like round_to).
    ulp = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -11, torch.float32: 0.0}.get(out_dtype, 2 ** -3)
    want = E.round_to(ref, out_dtype) if out_dtype != torch.float32 else ref
    # Half-ulp rounding of a value within tol of the reference: within tol (scaled) + one ulp of the result.
    tol = tol * (1 + ulp) + ulp * want.abs().nan_to_num(0.0, 0.0, 0.0) + (2 ** -9 if ulp == 2 ** -3 else 0.0)
    check_close(got.cpu(), want, tol, what, allowed=allowed)
    return ref_saved


def run_tree(kind, m, n, k, expr, out_dtype, seed, allowed=0.02):
    rng = random.Random(seed)
    a, wq, acc = problem(kind, m, n, k, seed)
    ops, _dtypes, _kinds = random_operands(rng, expr, m, n, device="cuda")
    out = poisoned(m, n, out_dtype)
    res = fg.gemm_a8(a, wq, epilogue=expr, operands=ops, out_dtype=out_dtype, out=out)
    torch.cuda.synchronize()
    got, saved = (res if isinstance(res, tuple) else (res, None))
    assert got is out
    ops_cpu = {k_: (v.cpu() if isinstance(v, torch.Tensor) else v) for k_, v in ops.items()}
    # fp8: the tensor core sums each 128-deep block in reduced precision (promoted to fp32 per block; observed
    # ~1e-4 of the rms on an H100); int8 sums are exact.
    acc_noise = 1e-3 if kind == "fp8" else 0.0
    ref_saved = check_output(got, acc, expr, ops_cpu, out_dtype, f"{kind} {m}x{n}x{k} {out_dtype}: {expr}", allowed,
                             acc_noise)
    if ref_saved is not None:
        assert saved is not None and saved.shape == (m, n)
        tol = ref_saved.abs().nan_to_num(0.0, 0.0, 0.0) * 2 ** -7 + 1e-5
        check_close(saved.cpu(), ref_saved, tol, f"saved: {expr}", allowed=0.05)


@pytest.mark.parametrize("i", range(24))
def test_random_trees_every_output_type(i):
    """Random trees on ragged shapes, fp8 and int8, each output type (the heuristic's plan for the shape)."""
    rng = random.Random(1000 + i)
    expr = random_tree(rng)
    kind = ("fp8", "int8")[i % 2]
    m, n, k = rng.choice([(1, 272, 256), (37, 208, 384), (130, 400, 512), (300, 144, 640)])
    run_tree(kind, m, n, k, expr, out_dtypes()[i % 4], seed=i)


@pytest.mark.parametrize("plan", plans("sm_90a") if torch.cuda.is_available() else [], ids=str)
def test_every_plan_runs_a_generated_epilogue(plan):
    """Each tile config (and split-K factor) with an expression: aux inputs, vectors, scalars, save."""
    if arch() != "sm_90a":
        pytest.skip("sm_90a plans")
    expr = E.parse("save(acc * scalar(alpha) + n_vec(bias), bf16) * m_vec(sa) + aux(res) * 0.5")
    if kernels.GEMM_CONFIGS[plan[0]].persistent:  # the persistent configs stage at most 3 hoisted values
        expr = E.parse("gelu(acc * m_vec(sa) + n_vec(bias)) + aux(res)")
    with forced_config(*plan):
        for kind, (m, n, k) in (("fp8", (37, 272, 512)), ("int8", (200, 144, 1024))):
            run_tree(kind, m, n, k, expr, torch.float32, seed=hash(plan) % 1000, allowed=0.0)


def test_preset_name_with_fp32_output_matches_the_expression():
    """A preset name with an fp32 output compiles the preset's expression just in time."""
    a, wq, acc = problem("fp8", 64, 256, 256, 3)
    sa = torch.rand(64, device="cuda") + 0.5
    bias = torch.randn(256, device="cuda")
    got = fg.gemm_a8(a, wq, bias, scale_a=sa, epilogue="bias_gelu", out_dtype=torch.float32)
    expr = E.preset("bias_gelu")
    ref = E.evaluate(expr, acc, {"alpha": 1.0, "scale_a": sa.cpu(), "bias": bias.cpu()})
    check_close(got.cpu(), ref, tolerance(expr, acc, {"alpha": 1.0, "scale_a": sa.cpu(), "bias": bias.cpu()}, ref,
                                          acc_noise=1e-3), "bias_gelu fp32")


def test_graph_capture_of_a_jit_epilogue():
    expr = E.parse("silu(acc * scalar(s)) + aux(res)")
    a, wq, acc = problem("fp8", 48, 256, 512, 7)
    res = torch.randn(48, 256, device="cuda", dtype=torch.bfloat16)
    s = torch.tensor([0.5], device="cuda")
    fg.gemm_a8(a, wq, epilogue=expr, operands={"s": s, "res": res})  # compile and warm up outside the capture
    out = poisoned(48, 256, torch.bfloat16)
    stream = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(g, stream=stream):
        fg.gemm_a8(a, wq, epilogue=expr, operands={"s": s, "res": res}, out=out)
    for value in (0.5, -2.0):  # a device scalar changes between replays without re-capture
        s.fill_(value)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ops = {"s": value, "res": res.cpu()}
        ref = E.evaluate(expr, acc, ops)
        check_close(out.cpu(), E.round_to(ref, torch.bfloat16),
                    tolerance(expr, acc, ops, ref, acc_noise=1e-3) + 2 ** -7 * ref.abs(), f"replay s={value}")


def test_bad_operands_are_named_before_any_compile():
    a, wq, _ = problem("fp8", 16, 64, 64, 1)
    expr = E.parse("acc * m_vec(sa) + aux(res)")
    with pytest.raises(ValueError, match=r"m_vec\(sa\) must be \[M=16\]"):
        fg.gemm_a8(a, wq, epilogue=expr, operands={"sa": torch.rand(64, device="cuda"),
                                                    "res": torch.rand(16, 64, device="cuda")})
    with pytest.raises(ValueError, match=r"aux\(res\) has no value"):
        fg.gemm_a8(a, wq, epilogue=expr, operands={"sa": torch.rand(16, device="cuda")})
    with pytest.raises(ValueError, match=r"operands \['zz'\] are not used"):
        fg.gemm_a8(a, wq, epilogue=expr, operands={"sa": torch.rand(16, device="cuda"), "zz": 1.0,
                                                    "res": torch.rand(16, 64, device="cuda")})
    with pytest.raises(TypeError, match=r"aux\(res\) must be float32, bfloat16 or float16"):
        fg.gemm_a8(a, wq, epilogue=expr, operands={"sa": torch.rand(16, device="cuda"),
                                                    "res": torch.rand(16, 64, device="cuda").double()})
    assert isinstance(ir.validate(expr), ir.Node)


def test_repeat_calls_take_the_fast_path_with_each_calls_tensors():
    """The second call of a signature skips the checks and launches with the new call's addresses: every
    operand must land in its own slot (a swapped pair would be wrong here, not just slow)."""
    expr = E.parse("acc * n_vec(s) + aux(res) * m_vec(t) - scalar(q)")
    a, wq, acc = problem("int8", 40, 272, 256, 11)
    for i in range(3):
        ops = {"s": torch.rand(272, device="cuda"), "res": torch.randn(40, 272, device="cuda", dtype=torch.float16),
               "t": torch.rand(40, device="cuda"), "q": torch.tensor([float(i)], device="cuda")}
        out = fg.gemm_a8(a, wq, epilogue=expr, operands=ops, out_dtype=torch.float32)
        torch.cuda.synchronize()
        cpu = {k: v.cpu() for k, v in ops.items()}
        ref = E.evaluate(expr, acc, cpu)
        check_close(out.cpu(), ref, tolerance(expr, acc, cpu, ref), f"call {i}")
    assert len(wq.call_plans) == 1  # one signature, one plan


def test_torch_compile_runs_an_expression_epilogue():
    expr = E.parse("gelu(save(acc * n_vec(s), bf16)) + aux(res) * scalar(q)")
    a, wq, acc = problem("fp8", 64, 256, 512, 5)
    ops = {"s": torch.rand(256, device="cuda"), "res": torch.randn(64, 256, device="cuda", dtype=torch.bfloat16),
           "q": 0.25}

    def fn(a, s, res):
        y, pre = fg.gemm_a8(a, wq, epilogue=expr, operands={"s": s, "res": res, "q": 0.25}, out_dtype=torch.float32)
        return y * 2, pre

    torch._dynamo.reset()
    y2, pre = torch.compile(fn, fullgraph=True)(a, ops["s"], ops["res"])
    torch.cuda.synchronize()
    cpu = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in ops.items()}
    ref, ref_pre = E.evaluate_outputs(expr, acc, cpu)
    check_close(y2.cpu() / 2, ref, tolerance(expr, acc, cpu, ref, acc_noise=1e-3), "compiled")
    check_close(pre.cpu(), ref_pre, ref_pre.abs() * 2 ** -7 + 1e-4, "compiled saved", allowed=0.01)
