"""Random epilogue expressions and operands for the codegen tests (host-compiled functors, GPU kernels)."""
from __future__ import annotations

import random

import torch

import fusedgemm.epilogue as E
from fusedgemm.epilogue import ir

_UNARY = [*ir.UNARY, "leaky_relu", "clamp"]
_TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def random_tree(rng: random.Random, depth: int = 6, allow_save: bool = True, aux_count: int = 2,
                paired: bool = False) -> ir.Node:
    """A random expression of every leaf kind and op, at most `depth` deep, at most one save(...). paired: gate
    and up in place of acc (a paired expression)."""
    state = {"saved": not allow_save}

    def leaf() -> ir.Node:
        k = rng.random()
        if k < 0.35:
            return rng.choice((E.gate, E.up)) if paired else E.acc
        if k < 0.5:  # optional operands have names of their own (one name is one operand)
            return E.m_vec("mo", 1.5) if rng.random() < 0.3 else E.m_vec(f"m{rng.randrange(2)}")
        if k < 0.65:
            return E.n_vec("no", -0.5) if rng.random() < 0.3 else E.n_vec(f"n{rng.randrange(2)}")
        if k < 0.75:
            return E.scalar(f"s{rng.randrange(2)}")
        if k < 0.87 and aux_count:
            return E.aux(f"x{rng.randrange(aux_count)}")
        return E.const(rng.choice([0.5, 2.0, -1.25, 3.0, 0.044715, 1e-3]))

    def node(d: int) -> ir.Node:
        if d <= 1 or rng.random() < 0.2:
            return leaf()
        k = rng.random()
        if k < 0.45:
            op = rng.choice(_UNARY)
            x = node(d - 1)
            if op == "leaky_relu":
                return E.leaky_relu(x, rng.choice([0.01, 0.2]))
            if op == "clamp":
                return E.clamp(x, rng.choice([-6.0, float("-inf"), -1.0]), rng.choice([6.0, float("inf"), 2.5]))
            if op in ("sqrt", "rsqrt"):  # mostly on positive values: NaN everywhere tests little
                x = E.abs(x) + 0.25 if rng.random() < 0.8 else x
            if op == "exp":
                x = E.clamp(x, -30.0, 30.0)
            return E.unary(op, x)
        if k < 0.85:
            op = rng.choice(ir.BINARY)
            a, b = node(d - 1), node(d - 1)
            if op == "div":
                b = E.abs(b) + 0.5 if rng.random() < 0.8 else b
            return E.binary(op, a, b)
        if k < 0.93 or state["saved"]:
            return E.cast(node(d - 1), rng.choice(ir.ROUNDING_DTYPES))
        state["saved"] = True
        return E.save(node(d - 1), rng.choice(ir.ROUNDING_DTYPES))

    tree = node(depth)
    if paired and not ir.is_paired(tree):  # no accumulator leaf came up: still a paired expression
        tree = tree + E.gate * E.up
    return ir.validate(tree)


def random_operands(rng: random.Random, expr: ir.Node, m: int, n: int, device="cpu", dyn: bool = False):
    """-> (operands for evaluate / the kernel, element types for the EpilogueSpec, {name: ElemKind} of dyn ones).
    Optional vectors are sometimes left out; tensor operands get a random element type."""
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    ops, dtypes, kinds = {}, {}, {}
    for name, o in ir.operands(expr).items():
        if o.kind == "scalar":
            ops[name] = rng.choice([0.75, -1.5, 2.0]) if rng.random() < 0.5 else torch.tensor(
                [rng.choice([0.5, -2.0])], dtype=torch.float32, device=device)
            continue
        if o.kind in ("m_vec", "n_vec") and o.default is not None and rng.random() < 0.3:
            dtypes[name] = "f32"
            continue
        dt = rng.choice(["f32", "bf16", "f16"])
        shape = (m, n) if o.kind == "aux" else (m if o.kind == "m_vec" else n,)
        ops[name] = torch.randn(shape, generator=gen).to(_TORCH[dt]).to(device)
        if dyn and o.kind != "aux" and rng.random() < 0.5:
            dtypes[name] = "dyn"
            kinds[name] = {"f32": 1, "bf16": 2, "f16": 3}[dt]
        else:
            dtypes[name] = dt
    return ops, dtypes, kinds


def tolerance(expr: ir.Node, acc: torch.Tensor, ops: dict, ref: torch.Tensor, acc_noise: float = 0.0) -> torch.Tensor:
    """Per-element tolerance: a few times what torch's own fp32 arithmetic misses the float64 value by, plus
    a relative 2e-5 for the GPUs' approximate exp2 / reciprocal (and our tanh / erf formulas). acc_noise: the
    accumulator itself is off by up to acc_noise * rms(acc) (a GPU's fp32 sums): add what that moves."""
    ref32, _ = E.evaluate_outputs(expr, acc, ops, compute_dtype=torch.float32)
    tol = 8 * (ref32 - ref).abs().nan_to_num(0.0, 0.0, 0.0) + 2e-5 * ref.abs().nan_to_num(0.0, 0.0, 0.0) + 1e-6
    if acc_noise:
        delta = acc_noise * acc.to(torch.float64).pow(2).mean().sqrt().item()
        for d in (delta, -delta):
            moved, _ = E.evaluate_outputs(expr, acc + d, ops)
            tol = tol + 2 * (moved - ref).abs().nan_to_num(0.0, 0.0, 0.0)
    return tol


def check_close(out: torch.Tensor, ref: torch.Tensor, tol: torch.Tensor, what: str, allowed: float = 0.0) -> None:
    """NaN exactly where the reference is NaN, infinities equal, the rest within tol -- except a fraction
    `allowed` of the elements (random trees: a rounding point or a comparison that lands on a tie can flip in
    fp32 where the float64 value does not; a wrong op or operand is wrong on most elements)."""
    out = out.to(torch.float64)
    nan_ref, nan_out = ref.isnan(), out.isnan()
    assert torch.equal(nan_ref, nan_out), f"{what}: NaN at {(nan_ref != nan_out).nonzero()[:5].tolist()}"
    inf = ref.isinf() | out.isinf()
    assert torch.equal(ref[inf], out[inf]), f"{what}: infinities differ"
    fin = ~(nan_ref | inf)
    err = (out - ref).abs()
    bad = fin & (err > tol)
    assert bad.float().mean().item() <= allowed, (f"{what}: {int(bad.sum())} elements off, worst at {bad.nonzero()[0].tolist()}: "
                           f"got {out[bad][0].item()}, want {ref[bad][0].item()} (tol {tol[bad][0].item():.3g})")
