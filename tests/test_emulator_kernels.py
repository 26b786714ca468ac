"""The other AMD kernel families in the emulator: quantize_rows (bit-exact to its reference), bmm_tiny,
generated epilogues (expression kernels compiled just in time: aux / row / column operands, fp8 and fp32 outputs,
the paired SwiGLU store, random trees), matmul_fused -- and the opcode coverage of every shipped kernel."""
from __future__ import annotations

import math
import random

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
import fusedgemm.epilogue as E  # noqa: E402
from epilogue_trees import check_close, random_operands, random_tree, tolerance  # noqa: E402
from fusedgemm.reference import quantize_rows_reference  # noqa: E402
from fusedgemm.runtime.codeobject import hsaco_kernels  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from fusedgemm.testing.emulator.machine import coverage, unsupported  # noqa: E402
from fusedgemm.testing.emulator.runner import CodeObject, run_quantize_rows  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

ARCHES = ("gfx942", "gfx950")
FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}


EXECUTED: dict[str, int] = {}  # mnemonic -> dynamic count over this module's emulated launches


def _record(dev):
    for mn, c in dev.stats.opcodes.items():
        EXECUTED[mn] = EXECUTED.get(mn, 0) + c


def rel(y, ref):
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_rows_bit_exact(arch, x_dtype, seed):
    for q_dtype in (FP8[arch], torch.int8):
        for m, k in ((5, 64), (3, 37)):  # the 16-byte-vector kernel and the element kernel
            x = (torch.randn(m, k) * 3).to(x_dtype)
            x[1] = 0  # an all-zero row: scale 1
            x[0, 3] = 1e4  # saturation of the others in row 0
            q, scale, _stats = run_quantize_rows(arch, x, q_dtype)
            rq, rs = quantize_rows_reference(x, q_dtype)
            assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)), f"{arch} {x_dtype} -> {q_dtype} {m}x{k}"
            assert torch.equal(scale, rs)


@pytest.mark.parametrize("arch", ARCHES)
def test_bmm_tiny(arch, seed):
    from fusedgemm import tiny_bmm

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for batch, m, n, k in ((3, 5, 6, 7), (1, 64, 64, 64)):
            a, b = torch.randn(batch, m, k).to(dtype), torch.randn(batch, k, n).to(dtype)
            out = torch.full((batch, m, n), float("nan"), dtype=dtype)
            with emulate(arch) as dev:
                tiny_bmm.launch_bmm_tiny(a, b, out)
            _record(dev)
            assert len(dev.launches) == 1 and dev.launches[0][0].startswith("fg_bmm_tiny")
            tol = 1e-6 if dtype == torch.float32 else 8e-3
            assert not out.isnan().any() and rel(out, a.double() @ b.double()) < tol


def _problem(arch, m, n, k, g):
    a = (torch.randn(m, k, generator=g) / math.sqrt(math.sqrt(k))).to(FP8[arch])
    w = (torch.randn(n, k, generator=g) / math.sqrt(math.sqrt(k))).to(FP8[arch])
    return a, w, a.double() @ w.double().T


def _check_expression(arch, expr, ops, out_dtype, m, n, k, seed, allowed=0.02):
    g = torch.Generator().manual_seed(seed)
    a, w, acc = _problem(arch, m, n, k, g)
    with emulate(arch) as dev:
        res = fg.gemm_a8(a, fg.preshuffle(w), epilogue=expr, operands=ops, out_dtype=out_dtype)
    _record(dev)
    assert len(dev.launches) == 1
    got, saved = res if isinstance(res, tuple) else (res, None)
    ref, ref_saved = E.evaluate_outputs(expr, acc, ops)
    tol = tolerance(expr, acc, ops, ref)
    ulp = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -11, torch.float32: 0.0}.get(out_dtype, 2 ** -3)
    want = E.round_to(ref, out_dtype) if out_dtype != torch.float32 else ref
    tol = tol * (1 + ulp) + ulp * want.abs().nan_to_num(0.0, 0.0, 0.0) + (2 ** -9 if ulp == 2 ** -3 else 0.0)
    check_close(got.to(torch.float64), want, tol, f"{arch} {out_dtype}: {expr}", allowed=allowed)
    if ref_saved is not None:
        check_close(saved.to(torch.float64), ref_saved, ref_saved.abs().nan_to_num(0.0, 0.0, 0.0) * 2 ** -7 + 1e-5,
                    f"saved: {expr}", allowed=0.05)


@pytest.mark.parametrize("arch", ARCHES)
def test_expression_epilogues(arch, seed):
    m, n = 21, 48
    ops = {"s": torch.rand(n) + 0.5, "res": torch.randn(m, n).to(torch.bfloat16), "r": torch.randn(m)}
    _check_expression(arch, E.parse("silu(acc * n_vec(s)) + aux(res) * m_vec(r)"), ops, torch.bfloat16, m, n, 128, 1)
    _check_expression(arch, E.parse("acc * 0.5"), {}, FP8[arch], m, n, 64, 2)
    _check_expression(arch, E.parse("save(acc * n_vec(s), bf16) + 1.0"), {"s": ops["s"]}, torch.float32, m, n, 64, 3)


@pytest.mark.parametrize("arch", ARCHES)
def test_paired_swiglu_store(arch, seed):
    _check_expression(arch, E.parse("silu(gate) * up"), {}, torch.bfloat16, 19, 64, 96, 4)


@pytest.mark.parametrize("i", range(20))
def test_random_epilogue_trees(i):
    """20 random IR epilogues (every leaf kind and op: aux, row, column, scalar operands, casts, save), each its
    own just-in-time kernel, alternating the arch; every output type."""
    arch = ARCHES[i % 2]
    rng = random.Random(4000 + i)
    expr = random_tree(rng, depth=4)
    m, n = 19, 48
    ops, _dtypes, _kinds = random_operands(rng, expr, m, n)
    out = (torch.bfloat16, torch.float16, torch.float32, FP8[arch])[(i // 2) % 4]
    _check_expression(arch, expr, ops, out, m, n, 64, 5000 + i)


def test_matmul_fused_fp16(seed):
    m, n, k = 21, 32, 48
    x, w = torch.randn(m, k).half(), torch.randn(n, k).half()
    with emulate("gfx950") as dev:
        y = fg.matmul_fused(x, w, activation="relu")
    assert len(dev.launches) == 1
    assert rel(y, torch.relu(x.double() @ w.double().T)) < 1e-3


@pytest.mark.parametrize("arch", ARCHES)
def test_every_shipped_kernel_is_modelled(arch, capsys):
    """Every kernel of every AMD unit decodes (listing proven to be the object) and has no instruction the
    emulator does not model; prints the opcode coverage into the test output, with the mnemonics the generated
    (just-in-time) kernels of this module executed."""
    from fusedgemm.runtime.build import units_for

    seen: dict[str, int] = {}
    missing: dict[str, str] = {}
    count = 0
    for unit in units_for(arch):
        obj = CodeObject.build(unit, arch)
        for name in sorted(hsaco_kernels(obj.data)):
            kernel = obj.kernel(name)
            count += 1
            for mn, c in coverage(kernel).items():
                seen[mn] = seen.get(mn, 0) + c
            missing.update(unsupported(kernel))
    with capsys.disabled():
        print(f"\n[emulator coverage] {arch}: {count} shipped kernels, {len(seen)} mnemonics: {' '.join(sorted(seen))}")
        if EXECUTED:
            print(f"[emulator coverage] executed by this module's launches (shipped and generated kernels, both "
                  f"arches): {len(EXECUTED)} mnemonics, {sum(EXECUTED.values())} instructions")
    assert not missing, f"instructions the emulator does not model: {missing}"


def test_matmul_fused_xf32_alpha_beta_c(seed):
    """fp32 inputs at precision='tf32' run gfx942's xf32 MFMA kernel; alpha * A.B^T + beta * C."""
    m, n, k = 21, 48, 64
    x, w, c = torch.randn(m, k), torch.randn(n, k), torch.randn(m, n)
    with emulate("gfx942") as dev:
        y = fg.matmul_fused(x, w, precision="tf32", alpha=0.5, beta=2.0, c=c)
    assert len(dev.launches) == 1 and dev.launches[0][0].startswith("fg_matmul_tf32")
    assert rel(y, 0.5 * (x.double() @ w.double().T) + 2 * c.double()) < 3e-3
