"""bmm_tiny / bmm on the CPU: planning, validation, dispatch, and the backward formulas (gradcheck, float64)."""
import pytest
import torch

import fusedgemm as fg
from fusedgemm.tiny_bmm import _BmmTinyFn, _check, plan_bmm_tiny


@pytest.mark.parametrize("b,m,n,k", [(1024, 12, 12, 64), (1024, 12, 64, 12), (16384, 64, 64, 64), (7, 3, 7, 5),
                                     (5, 1, 1, 1), (3, 64, 1, 64), (2, 1, 64, 64)])
def test_plan_fits_the_kernel(b, m, n, k):
    from fusedgemm.runtime.kernels import BMM_TINY_QUADS

    for dt in ("float32", "bfloat16", "float16"):
        for bcast in (False, True):
            p = plan_bmm_tiny(b, m, n, k, dt, bcast)
            assert p["tx"] * p["r"] >= n and p["ty"] * p["r"] >= m
            assert p["tx"] * p["ty"] <= p["threads"] <= 256 and p["threads"] % 64 == 0
            assert p["smem"] <= 48 * 1024 and p["grid"][0] <= -(-b // p["elems"])
            qa = max(-(-k // 4) * m, -(-m // 4) * k)  # quads of one element's A in either orientation
            assert p["elems"] * qa <= BMM_TINY_QUADS * p["threads"]
            assert p["name"].startswith("fg_bmm_tiny_")


def test_validation_messages():
    a = torch.randn(4, 12, 64)
    with pytest.raises(ValueError, match=r"a must be \[B, m, k\]"):
        _check(a[0], torch.randn(64, 12), None)
    with pytest.raises(ValueError, match=r"b must be \[4 or 1, 64, n\]"):
        _check(a, torch.randn(4, 32, 12), None)
    with pytest.raises(ValueError, match=r"b must be \[4 or 1, 64, n\]"):
        _check(a, torch.randn(2, 64, 12), None)
    with pytest.raises(TypeError, match="must share one dtype"):
        _check(a, torch.randn(4, 64, 12).double(), None)
    with pytest.raises(TypeError, match="must share one dtype"):
        _check(a.double(), torch.randn(4, 64, 12).double(), None)
    with pytest.raises(ValueError, match="m, n, k must be <= 64"):
        _check(torch.randn(4, 12, 65), torch.randn(65, 12), None)
    assert _check(a, torch.randn(64, 12), None)[:4] == (4, 12, 12, 64)  # CPU tensors: the torch reference
    with pytest.raises(ValueError, match="a and b must be on one device"):
        _check(a, torch.randn(64, 12, device="meta"), None)
    with pytest.raises(ValueError, match="must be on a GPU .* or the CPU, a is on meta"):
        _check(a.to("meta"), torch.randn(64, 12, device="meta"), None)
    with pytest.raises(TypeError, match="b: expected a torch.Tensor, got list"):
        _check(a, [[1.0]], None)
    with pytest.raises(TypeError, match="a: expected a torch.Tensor, got tuple"):
        _check((1.0,), a, None)


# Calls bmm_tiny refuses, each (a, b) without requires_grad, and the error it gives.
_REFUSED = {
    "two devices": (lambda: (torch.randn(4, 12, 64), torch.randn(4, 64, 12, device="meta")), ValueError,
                    r"bmm_tiny: a and b must be on one device"),
    "m = 65": (lambda: (torch.randn(4, 65, 8), torch.randn(4, 8, 8)), ValueError, "m, n, k must be <= 64"),
    "k = 65": (lambda: (torch.randn(4, 8, 65), torch.randn(65, 8)), ValueError, "m, n, k must be <= 64"),
    "float64": (lambda: (torch.randn(4, 3, 5).double(), torch.randn(4, 5, 7).double()), TypeError,
                "must share one dtype of float32, bfloat16, float16; got torch.float64"),
    "mixed dtypes": (lambda: (torch.randn(4, 3, 5), torch.randn(4, 5, 7).half()), TypeError, "must share one dtype"),
    "b too short": (lambda: (torch.randn(4, 3, 5), torch.randn(4, 4, 7)), ValueError, r"b must be \[4 or 1, 5, n\]"),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
@pytest.mark.parametrize("grad", ["a", "b", "both"])
def test_grad_and_no_grad_calls_raise_the_same(case, grad, monkeypatch):
    """requires_grad does not turn a refused call into a silent torch.bmm: the same check, the same error."""
    import fusedgemm.tiny_bmm as tg

    make, exc, match = _REFUSED[case]
    a, b = make()
    with pytest.raises(exc, match=match) as plain:
        fg.bmm_tiny(a, b)
    monkeypatch.setattr(tg, "_torch_bmm", lambda *args: pytest.fail("bmm_tiny ran torch.bmm"))
    a.requires_grad_(grad in ("a", "both"))
    b.requires_grad_(grad in ("b", "both"))
    with pytest.raises(exc) as with_grad:
        fg.bmm_tiny(a, b)
    assert str(with_grad.value) == str(plain.value)
    with torch.no_grad(), pytest.raises(exc) as no_grad:
        fg.bmm_tiny(a, b)
    assert str(no_grad.value) == str(plain.value)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_non_tensor_inputs_are_type_errors(requires_grad):
    t = torch.randn(4, 3, 5, requires_grad=requires_grad)
    with pytest.raises(TypeError, match=r"^bmm_tiny: a: expected a torch.Tensor, got list$"):
        fg.bmm_tiny([[1.0]], torch.randn(5, 7))
    with pytest.raises(TypeError, match=r"^bmm_tiny: b: expected a torch.Tensor, got list$"):
        fg.bmm_tiny(t, [[1.0]])
    with pytest.raises(TypeError, match=r"^bmm_tiny: b: expected a torch.Tensor, got NoneType$"):
        fg.bmm_tiny(t, None)
    with pytest.raises(TypeError, match=r"^fusedgemm.bmm: b: expected a torch.Tensor, got list$"):
        fg.bmm(t, [[1.0]])
    with pytest.raises(TypeError, match=r"^fusedgemm.bmm: a: expected a torch.Tensor, got list$"):
        fg.bmm([[1.0]], torch.randn(5, 7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b_shape", [(4, 5, 7), (1, 5, 7), (5, 7)])
def test_cpu_tensors_run_the_torch_reference(dtype, b_shape, seed):
    """CPU policy: bmm_tiny on CPU tensors takes the same checks and gives the kernel's output dtype and shape,
    computed by the torch reference (float64 inside, rounded once); out= is written (poisoned first), any strides."""
    a = torch.randn(4, 3, 5).to(dtype)
    b = torch.randn(*b_shape).to(dtype)
    b3 = (b if b.dim() == 3 else b.unsqueeze(0)).double()
    want = (a.double() @ b3).to(dtype)
    got = fg.bmm_tiny(a, b)
    assert got.dtype == dtype and got.shape == (4, 3, 7) and torch.equal(got, want)
    out = torch.full((4, 3, 7), float("nan"), dtype=dtype)
    assert fg.bmm_tiny(a, b, out=out) is out and torch.equal(out, want)
    at = a.transpose(1, 2).contiguous().transpose(1, 2)  # a transposed view: no copy needed, same values
    assert torch.equal(fg.bmm_tiny(at, b), want)
    with pytest.raises(ValueError, match=r"out must be \[4, 3, 7\]"):
        fg.bmm_tiny(a, b, out=torch.empty(4, 3, 8, dtype=dtype))


def test_cpu_reference_is_differentiable(seed):
    a = torch.randn(4, 3, 5, requires_grad=True)
    b = torch.randn(5, 7, requires_grad=True)
    y = fg.bmm_tiny(a, b)
    ga, gb = torch.autograd.grad(y.sum(), (a, b))
    wa, wb = torch.autograd.grad((a @ b).sum(), (a, b))
    # float32 sums of 4..12 terms in another order: a gradient near 0 differs by ~1e-7 absolute, not relative
    torch.testing.assert_close(ga, wa, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb, wb, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape,dtype", [((4, 3, 5), (4, 5, 7), torch.float32),
                                                   ((4, 65, 8), (8, 8), torch.float32),
                                                   ((4, 3, 5), (1, 5, 7), torch.float64)])
def test_bmm_falls_back_to_torch_bmm_with_grad_on_cpu(a_shape, b_shape, dtype, seed):
    """fusedgemm.bmm keeps its fallback: where bmm_tiny refuses (CPU, m > 64, float64) it is torch.bmm, forward
    and gradients, with or without requires_grad."""
    a = torch.randn(*a_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(*b_shape, dtype=dtype, requires_grad=True)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    want = torch.bmm(a, b3.expand(a.shape[0], *b3.shape[1:]))
    got = fg.bmm(a, b)
    assert torch.equal(got, want) and got.requires_grad
    g = torch.randn_like(want)
    assert all(torch.equal(x, y) for x, y in zip(torch.autograd.grad(got, (a, b), g),
                                                   torch.autograd.grad(want, (a, b), g)))
    with torch.no_grad():
        assert torch.equal(fg.bmm(a, b), want)


def test_bmm_on_cpu_is_torch_bmm(seed):
    a, b = torch.randn(8, 12, 64), torch.randn(8, 64, 12)
    assert torch.equal(fg.bmm(a, b), torch.bmm(a, b))
    b2 = torch.randn(64, 12)  # broadcast B
    assert torch.equal(fg.bmm(a, b2), torch.bmm(a, b2.expand(8, 64, 12)))


@pytest.mark.parametrize("b_shape", [(6, 5, 7), (5, 7), (1, 5, 7)])
def test_backward_formulas_gradcheck_float64(b_shape, seed):
    a = torch.randn(6, 3, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(*b_shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_BmmTinyFn.apply, (a, b))
    assert torch.autograd.gradcheck(fg.bmm, (a, b))


def test_fake_implementation_for_compile():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y = torch.ops.fusedgemm.bmm_tiny(torch.empty(9, 3, 5), torch.empty(5, 7))
        assert y.shape == (9, 3, 7)


# ---- a model of the kernel's staging and tiling (hip_src/include/fusedgemm/bmm_tiny.hpp), run on the CPU ----
# It follows the kernel's index arithmetic quad by quad and checks every access against the plan's layout, so a
# plan/kernel mismatch (shared memory out of bounds, a misaligned vector access, an unzeroed pad that a tile
# reads, a quad that is never staged) fails here rather than on a GPU.
def _div_small(q, d):  # the kernel's float-reciprocal division, bit for bit in fp32
    import numpy as np

    inv = np.float32(1.0) / np.float32(d)
    return int((np.float32(q) + np.float32(0.5)) * inv)


class _Staged:
    def __init__(self, flat, offset, s_batch, s_i, s_j, rows, cols, ld, elem, mode):
        from fusedgemm.runtime import kernels as K

        self.flat, self.offset, self.s_batch, self.s_i, self.s_j = flat, offset, s_batch, s_i, s_j
        self.rows, self.cols, self.ld, self.elem, self.mode = rows, cols, ld, elem, mode
        self.along_j, self.vec, self.dense = mode & K.BMM_TINY_ALONG_J, mode & K.BMM_TINY_VECTOR, mode & K.BMM_TINY_DENSE
        self.fast_quads = -(-(cols if self.along_j else rows) // 4)
        self.quads = self.fast_quads * (rows if self.along_j else cols)

    def locate(self, q):
        e = _div_small(q, self.quads)
        assert e == q // self.quads
        r = q - e * self.quads
        slow = _div_small(r, self.fast_quads)
        fast = (r - slow * self.fast_quads) * 4
        return (e, slow, fast) if self.along_j else (e, fast, slow)

    def load(self, q, first):
        e, i, j = self.locate(q)
        base = self.offset + first * self.s_batch
        if self.vec:
            x = base + 4 * q if self.dense else base + e * self.s_batch + i * self.s_i + j * self.s_j
            assert x % 4 == 0 and x + 4 <= self.flat.numel(), "misaligned or out-of-bounds vector load"
            if self.dense:  # the dense shortcut must address what the general formula does
                assert x == base + e * self.s_batch + i * self.s_i + j * self.s_j
            return [self.flat[x + w].item() for w in range(4)]
        x = base + e * self.s_batch + i * self.s_i + j * self.s_j
        step, left = (self.s_j, self.cols - j) if self.along_j else (self.s_i, self.rows - i)
        return [self.flat[x + w * step].item() if w < left else 0.0 for w in range(4)]

    def store(self, q, vals, smem, base, written):
        e, i, j = self.locate(q)
        d = base + e * self.elem + i * self.ld + j
        idx = [d + w for w in range(4)] if self.along_j else [d + w * self.ld for w in range(4)]
        if self.along_j:
            assert d % 4 == 0, "misaligned 16-byte shared-memory store"
        for x, v in zip(idx, vals):
            assert 0 <= x < smem.numel(), "shared memory out of bounds"
            smem[x] = v
            written.add(x)


def _model_bmm_tiny(a, b3, **knobs):
    """C = a @ b3 as the kernel computes it (fp32 CPU tensors of any strides), through the kernel's plan."""
    from fusedgemm.runtime import kernels as K
    from fusedgemm.tiny_bmm import _H100_LIMITS, _operand_mode

    batch, m, k = a.shape
    n = b3.shape[2]
    sab = a.stride(0) if batch > 1 else m * k
    sbb = 0 if b3.shape[0] == 1 or batch == 1 else b3.stride(0)
    bcast = sbb == 0
    p = plan_bmm_tiny(batch, m, n, k, "float32", bcast, _H100_LIMITS, **knobs)
    r, tx, ty, elems, nthreads = p["r"], p["tx"], p["ty"], p["elems"], p["threads"]
    lda, ldb, a_elem, b_elem = p["lda"], p["ldb"], p["a_elem"], p["b_elem"]
    assert lda % 4 == 0 and ldb % 4 == 0 and a_elem % 4 == 0 and b_elem % 4 == 0 and p["smem"] % 16 == 0
    flat_a = torch.as_strided(a, (a.untyped_storage().nbytes() // 4,), (1,), 0)
    flat_b = torch.as_strided(b3, (b3.untyped_storage().nbytes() // 4,), (1,), 0)
    a_mode = _operand_mode(4 * a.storage_offset(), 4, sab, a.stride(1), a.stride(2), m, k)
    b_mode = _operand_mode(4 * b3.storage_offset(), 4, sbb, b3.stride(1), b3.stride(2), k, n, bcast)
    A = _Staged(flat_a, a.storage_offset(), sab, a.stride(1), a.stride(2), m, k, lda, a_elem, a_mode)
    B = _Staged(flat_b, b3.storage_offset(), sbb, b3.stride(1), b3.stride(2), k, n, ldb, b_elem, b_mode)
    smem_floats = p["smem"] // 4
    assert smem_floats == elems * a_elem + (1 if bcast else elems) * b_elem
    k4, a_rows = -(-k // 4) * 4, a_elem // lda
    c = torch.full((batch, m, n), float("nan"))
    groups = -(-batch // elems)
    grid = p["grid"][0]
    quads = K.BMM_TINY_QUADS
    for block in range(grid):
        smem = torch.zeros(smem_floats)  # the kernel zeroes it once per block
        if bcast:
            written = set()
            lines = k if B.along_j else n
            per_slice = min(lines, quads * nthreads // B.fast_quads)
            for l0 in range(0, lines, per_slice):
                ll = min(per_slice, lines - l0)
                sl = _Staged(flat_b, b3.storage_offset() + l0 * (b3.stride(1) if B.along_j else b3.stride(2)), 0,
                             b3.stride(1), b3.stride(2), ll if B.along_j else k, n if B.along_j else ll, ldb, 0, b_mode)
                assert sl.quads <= quads * nthreads
                for q in range(sl.quads):
                    sl.store(q, sl.load(q, 0), smem, elems * a_elem + l0 * (ldb if B.along_j else 1), written)
        for g in range(block, groups, grid):
            first, count = g * elems, min(elems, batch - g * elems)
            written = set()
            assert count * A.quads <= quads * nthreads and (bcast or count * B.quads <= quads * nthreads)
            for q in range(count * A.quads):
                A.store(q, A.load(q, first), smem, 0, written)
            if not bcast:
                for q in range(count * B.quads):
                    B.store(q, B.load(q, first), smem, elems * a_elem, written)
            for e in range(count):  # the tiles of all threads of element e: rows ty * r, columns tx * r
                As = smem[e * a_elem:(e + 1) * a_elem].view(a_rows, lda)[:ty * r, :k4]
                boff = elems * a_elem + (0 if bcast else e * b_elem)
                Bs = smem[boff:boff + b_elem].view(k4, ldb)[:, :tx * r]
                c[first + e] = (As.double() @ Bs.double())[:m, :n].float()
    return c


MODEL_CASES = [
    ((7, 3, 5), (7, 5, 7)),                  # odd shapes: scalar quads, k padding
    ((9, 12, 64), (9, 64, 12)),              # attention shape, dense vector quads
    ((5, 12, 12), (5, 12, 64)),
    ((3, 64, 64), (3, 64, 64)),              # 64^3: one element fills a group
    ((33, 16, 16), (33, 16, 16)),
    ((5, 1, 33), (5, 33, 64)),
    ((6, 64, 1), (6, 1, 64)),
    ((4, 1, 1), (4, 1, 1)),
    ((1, 12, 64), (1, 64, 12)),             # batch 1
]


@pytest.mark.parametrize("a_shape,b_shape", MODEL_CASES)
@pytest.mark.parametrize("layout", ["contiguous", "a_t", "b_t", "b_broadcast", "b_broadcast_t", "offset"])
@pytest.mark.parametrize("r", [2, 4])
def test_kernel_model_matches_matmul(a_shape, b_shape, layout, r, seed):
    batch, m, k = a_shape
    n = b_shape[2]
    if _ceil(n, r) * _ceil(m, r) > 256:
        pytest.skip("r=2 does not fit m, n > 32")
    a = torch.randn(a_shape)
    b = torch.randn(b_shape)
    if layout == "a_t":
        a = torch.randn(batch, k, m).transpose(1, 2)
    elif layout == "b_t":
        b = torch.randn(batch, n, k).transpose(1, 2)
    elif layout == "b_broadcast":
        b = torch.randn(1, k, n)
    elif layout == "b_broadcast_t":
        b = torch.randn(1, n, k).transpose(1, 2)
    elif layout == "offset":  # storage offset 1: no quad is 16-byte aligned, scalar loads everywhere
        a = torch.randn(batch * m * k + 1)[1:].view(batch, m, k)
        b = torch.randn(batch * k * n + 1)[1:].view(batch, k, n)
    for knobs in ({}, {"elems": 2}, {"elems": 1, "persistent": False}):
        try:
            got = _model_bmm_tiny(a, b, r=r, **knobs)
        except ValueError:
            continue  # this knob does not fit the shape
        ref = torch.matmul(a.double(), b.double())
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def _ceil(x, y):
    return -(-x // y)


# ---- the same for the f32 cp.async kernels (bmm_tiny_async_block): copies, ring slots, k-chunks, tiles ----
def _model_bmm_tiny_async(a, b3, **knobs):
    """C = a @ b3 as the cp.async kernel computes it. Shared memory starts as NaN (the kernel zeroes nothing), so
    a tile that reads a value no copy wrote, and that reaches a stored output, shows up as NaN in C."""
    from fusedgemm.runtime import kernels as K
    from fusedgemm.tiny_bmm import _H100_LIMITS, _operand_mode

    batch, m, k = a.shape
    n = b3.shape[2]
    sab = a.stride(0) if batch > 1 else m * k
    sbb = 0 if b3.shape[0] == 1 or batch == 1 else b3.stride(0)
    bcast = sbb == 0
    a_mode = _operand_mode(4 * a.storage_offset(), 4, sab, a.stride(1), a.stride(2), m, k)
    b_mode = _operand_mode(4 * b3.storage_offset(), 4, sbb, b3.stride(1), b3.stride(2), k, n, bcast)
    rows_mode = K.BMM_TINY_ALONG_J | K.BMM_TINY_VECTOR
    assert a_mode & rows_mode == rows_mode and (bcast or b_mode & rows_mode == rows_mode)
    p = plan_bmm_tiny(batch, m, n, k, "float32", bcast, _H100_LIMITS, async_copy=True, **knobs)
    assert p["name"] in K.bmm_tiny_kernel_names()
    rm, rn, tx, ty, elems, nthreads = p["rm"], p["rn"], p["tx"], p["ty"], p["elems"], p["threads"]
    lda, ldb, a_elem, b_elem, stages, kc = p["lda"], p["ldb"], p["a_elem"], p["b_elem"], p["stages"], p["kc"]
    tpe, chunks = tx * ty, k // kc
    assert k % kc == 0 and kc % 4 == 0 and lda % 4 == 0 and lda >= kc and ldb % 4 == 0 and ldb >= tx * rn >= n
    assert a_elem == ty * rm * lda >= m * lda and b_elem == kc * ldb and tpe <= nthreads
    if ("_tx" in p["name"]):
        assert p["name"].endswith(f"_tx{tx}") and ldb == tx * rn
    if chunks > 1:
        assert elems * tpe <= nthreads, "a chunked plan keeps each element's accumulators in its own threads"
    slot = elems * (a_elem + (0 if bcast else b_elem))
    assert p["smem"] == 4 * (stages * slot + (k * ldb if bcast else 0))
    flat_a = torch.as_strided(a, (a.untyped_storage().nbytes() // 4,), (1,), 0)
    flat_b = torch.as_strided(b3, (b3.untyped_storage().nbytes() // 4,), (1,), 0)

    def copy_async(flat, off, s_batch, s_i, rows, cols, mode, ld, elem, first, count, smem, dst0, offset):
        """StagedOperand::copy_async of every thread, its position advanced as the kernel advances it."""
        dense = mode & K.BMM_TINY_DENSE
        fast_quads = -(-cols // 4)
        quads = fast_quads * rows
        total = count * quads
        step_i = _div_small(nthreads, fast_quads)
        step_jq = nthreads - step_i * fast_quads
        base = off + first * s_batch + offset
        for tid in range(min(nthreads, total)):
            e = _div_small(tid, quads)
            r = tid - e * quads
            i = _div_small(r, fast_quads)
            jq = r - i * fast_quads
            for q in range(tid, total, nthreads):
                assert (e, i, jq) == (q // quads, q % quads // fast_quads, q % fast_quads)
                x = base + e * s_batch + i * s_i + 4 * jq
                if dense:
                    assert base + 4 * q == x, "the dense shortcut must address what the general formula does"
                assert x % 4 == 0 and x + 4 <= flat.numel(), "misaligned or out-of-bounds 16-byte copy"
                d = dst0 + e * elem + i * ld + 4 * jq
                assert d % 4 == 0 and dst0 <= d and d + 4 <= dst0 + elems * elem, "copy outside its slot"
                smem[d:d + 4] = flat[x:x + 4]
                jq, i = jq + step_jq, i + step_i
                if jq >= fast_quads:
                    jq, i = jq - fast_quads, i + 1
                if i >= rows:
                    de = _div_small(i, rows)
                    e, i = e + de, i - de * rows

    a_mode_c = a_mode & ~K.BMM_TINY_DENSE if chunks > 1 else a_mode
    b_mode_c = b_mode & ~K.BMM_TINY_DENSE if chunks > 1 else b_mode
    c = torch.full((batch, m, n), float("nan"))
    groups = -(-batch // elems)
    grid = p["grid"][0]
    for block in range(grid):
        smem = torch.full((p["smem"] // 4,), float("nan"))
        bc0 = stages * slot
        if bcast:  # staged through registers as in the register-staged kernel
            B = _Staged(flat_b, b3.storage_offset(), 0, b3.stride(1), b3.stride(2), k, n, ldb, k * ldb, b_mode)
            lines = k if B.along_j else n
            per_slice = min(lines, K.BMM_TINY_QUADS * nthreads // B.fast_quads)
            for l0 in range(0, lines, per_slice):
                ll = min(per_slice, lines - l0)
                sl = _Staged(flat_b, b3.storage_offset() + l0 * (b3.stride(1) if B.along_j else b3.stride(2)), 0,
                             b3.stride(1), b3.stride(2), ll if B.along_j else k, n if B.along_j else ll, ldb, 0,
                             b_mode)
                for q in range(sl.quads):
                    sl.store(q, sl.load(q, 0), smem, bc0 + l0 * (ldb if B.along_j else 1), set())
        w = 0
        for g in range(block, groups, grid):
            first, count = g * elems, min(elems, batch - g * elems)
            acc = torch.zeros(count, ty * rm, tx * rn, dtype=torch.float64)
            for ch in range(chunks):
                st = (w % stages) * slot
                copy_async(flat_a, a.storage_offset(), sab, a.stride(1), m, kc, a_mode_c, lda, a_elem, first, count,
                           smem, st, ch * kc)
                if not bcast:
                    copy_async(flat_b, b3.storage_offset(), sbb, b3.stride(1), kc, n, b_mode_c, ldb, b_elem, first,
                               count, smem, st + elems * a_elem, ch * kc * b3.stride(1))
                for e in range(count):
                    As = smem[st + e * a_elem:st + (e + 1) * a_elem].view(ty * rm, lda)[:, :kc]
                    b0 = bc0 + ch * kc * ldb if bcast else st + elems * a_elem + e * b_elem
                    Bs = smem[b0:b0 + kc * ldb].view(kc, ldb)[:, :tx * rn]
                    acc[e] += As.double() @ Bs.double()
                w += 1
            c[first:first + count] = acc[:, :m, :n].float()
    return c


ASYNC_MODEL_CASES = [((9, 12, 64), (9, 64, 12)), ((5, 12, 12), (5, 12, 64)), ((3, 64, 64), (3, 64, 64)),
                     ((33, 16, 16), (33, 16, 16)), ((7, 5, 36), (7, 36, 12)), ((6, 1, 8), (6, 8, 4)),
                     ((5, 33, 20), (5, 20, 60))]


@pytest.mark.parametrize("a_shape,b_shape", ASYNC_MODEL_CASES)
@pytest.mark.parametrize("layout", ["contiguous", "a_batch_strided", "a_rows_padded", "b_broadcast", "b_broadcast_t"])
@pytest.mark.parametrize("knobs", [{}, {"rm": 2, "rn": 4}, {"rm": 4, "rn": 8}, {"kc": 4, "stages": 5},
                                   {"kc": 8, "elems": 2}, {"elems": 3, "threads": 32, "stages": 2},
                                   {"rm": 4, "rn": 8, "fixed_tx": False}])
def test_async_kernel_model_matches_matmul(a_shape, b_shape, layout, knobs, seed):
    batch, m, k = a_shape
    n = b_shape[2]
    a = torch.randn(a_shape)
    b = torch.randn(b_shape)
    if layout == "a_batch_strided":
        a = torch.randn(2 * batch, m, k)[::2]
    elif layout == "a_rows_padded":
        a = torch.randn(batch, m, k + 4)[:, :, :k]
    elif layout == "b_broadcast":
        b = torch.randn(1, k, n)
    elif layout == "b_broadcast_t":
        b = torch.randn(1, n, k).transpose(1, 2)
    try:
        got = _model_bmm_tiny_async(a, b, **knobs)
    except ValueError:
        pytest.skip(f"{knobs} does not fit {m}x{n}x{k}")
    assert not torch.isnan(got).any(), "a stored output read shared memory that no copy wrote"
    torch.testing.assert_close(got.double(), torch.matmul(a.double(), b.double()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b,m,n,k", [(1024, 12, 12, 64), (16384, 12, 64, 12), (16384, 64, 64, 64), (9, 16, 16, 16),
                                     (5, 1, 4, 4), (3, 64, 4, 64), (2, 64, 64, 4)])
def test_async_plans_fit(b, m, n, k):
    """The default cp.async plans: within the kernel's thread bound, the multiprocessor's shared memory, and
    the blocks the grid assumes fit one multiprocessor by threads, shared memory and registers."""
    from fusedgemm.runtime import kernels as K
    from fusedgemm.tiny_bmm import _ASYNC_REGS, _H100_LIMITS

    sms, smem_sm, threads_sm, regs_sm = _H100_LIMITS
    for bcast in (False, True):
        p = plan_bmm_tiny(b, m, n, k, "float32", bcast, _H100_LIMITS, async_copy=True)
        tile = (p["rm"], p["rn"])
        assert p["name"] in K.bmm_tiny_kernel_names() and p["threads"] <= K.BMM_TINY_ASYNC_TILES[tile]
        assert p["threads"] % 32 == 0 and 2 <= p["stages"] <= K.BMM_TINY_MAX_STAGES and p["smem"] <= smem_sm - 1024
        per_sm = -(-p["grid"][0] // sms)
        assert per_sm * p["threads"] <= threads_sm and per_sm * (p["smem"] + 1024) <= smem_sm
        assert per_sm * p["threads"] * _ASYNC_REGS[tile] <= regs_sm
    with pytest.raises(ValueError, match="cp.async kernels need float32 and k % 4 == 0"):
        plan_bmm_tiny(b, m, n, 6, "float32", False, _H100_LIMITS, async_copy=True)
