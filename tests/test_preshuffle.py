import pytest
import torch

import fusedgemm as fg

DTYPES = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8]  # what gemm_a8 reads, all preshuffle takes


def random_weight(n, k, dtype):
    if dtype == torch.int8:
        return torch.randint(-128, 128, (n, k), dtype=torch.int8)
    if dtype.itemsize == 1:  # fp8: random bytes cover every code, NaNs included
        return torch.randint(0, 256, (n, k), dtype=torch.uint8).view(dtype)
    return torch.randn(n, k).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(16, 16), (48, 96), (1040, 160), (32, 4096)])
def test_round_trip_bit_exact(dtype, n, k, seed):
    w = random_weight(n, k, dtype)
    wq = fg.preshuffle(w)
    assert isinstance(wq, fg.PreshuffledWeight) and wq.layout == fg.LAYOUT_16x16
    assert wq.dtype == dtype and tuple(wq.shape) == (n, k)
    back = fg.unshuffle(wq)
    assert back.dtype == dtype
    assert torch.equal(back.view(torch.uint8), w.view(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.int8, torch.float8_e4m3fn])
def test_layout_matches_the_formula(dtype, seed):
    """off(n, k) = (n // 16) * 16K + (k // Kp) * 16Kp + (n % 16) * Kp + (k % Kp), element by element."""
    n, k = 48, 64
    kp = 16 // dtype.itemsize
    w = random_weight(n, k, dtype).view(torch.uint8)
    flat = fg.preshuffle(w.view(dtype)).data.view(torch.uint8).reshape(-1)
    for nn in range(n):
        for kk in range(k):
            off = (nn // 16) * 16 * k + (kk // kp) * 16 * kp + (nn % 16) * kp + kk % kp
            assert flat[off] == w[nn, kk]


def test_preshuffle_is_not_identity(seed):
    w = random_weight(32, 64, torch.int8)
    assert not torch.equal(fg.preshuffle(w).data, w)


def test_grouped_weight_is_each_expert_preshuffled():
    """[G, N, K] experts (grouped_gemm_a8): each expert's bytes are its own preshuffle, padding per expert, and
    unshuffle gives the stack back; gemm_a8 refuses a grouped weight by name."""
    w = torch.randint(-100, 100, (3, 40, 70), dtype=torch.int8)
    q = fg.preshuffle(w)
    assert q.groups == 3 and tuple(q.shape) == (3, 40, 70) and tuple(q.data.shape) == (3, 48, 80)
    for g in range(3):
        assert torch.equal(q.data[g], fg.preshuffle(w[g]).data)
    assert torch.equal(fg.unshuffle(q), w)
    with pytest.raises(ValueError, match="grouped_gemm_a8"):
        fg.gemm_a8(torch.zeros(4, 70, dtype=torch.int8), q)
    with pytest.raises(ValueError, match="G >= 1"):
        fg.preshuffle(torch.zeros(0, 16, 16, dtype=torch.int8))


def test_errors():
    with pytest.raises(ValueError, match="2-D"):
        fg.preshuffle(torch.zeros(2, 16, 16, 16, dtype=torch.int8))
    with pytest.raises(ValueError, match="2-D"):
        fg.preshuffle(torch.zeros(16, dtype=torch.int8))
    with pytest.raises(TypeError, match="already preshuffled"):
        fg.preshuffle(fg.preshuffle(torch.zeros(16, 16, dtype=torch.int8)))
    with pytest.raises(TypeError, match="expected a torch.Tensor, got list"):
        fg.preshuffle([[0] * 16] * 16)
    with pytest.raises(TypeError, match="expected a PreshuffledWeight"):
        fg.unshuffle(torch.zeros(16, 16, dtype=torch.int8))
    with pytest.raises(TypeError, match="keeps its dtype"):
        fg.preshuffle(torch.zeros(16, 16, dtype=torch.int8)).to(torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.bool,
                                   torch.complex64, torch.uint8, torch.int16, torch.float8_e5m2])
def test_refuses_what_gemm_a8_cannot_read(dtype):
    """Only the 8-bit types gemm_a8 reads; the message names them and the dtype it got."""
    w = torch.zeros(32, 64, dtype=dtype)
    msg = (r"preshuffle: the weight must be torch.float8_e4m3fn, torch.float8_e4m3fnuz or torch.int8 \(what "
           rf"gemm_a8 reads\), got {dtype}; quantize")
    with pytest.raises(TypeError, match=msg):
        fg.preshuffle(w)
    with pytest.raises(TypeError, match="got torch.float32"):  # checked before the shape
        fg.preshuffle(torch.zeros(3, 5))


@pytest.mark.parametrize("n,k", [(0, 64), (32, 0), (0, 0)])
def test_refuses_empty_weights(n, k):
    """N, K >= 1 (any other N and K is zero-padded to multiples of 16: tests/test_unaligned_cpu.py)."""
    for dtype in DTYPES:
        with pytest.raises(ValueError, match=rf"N >= 1 and K >= 1, got N={n}, K={k}$"):
            fg.preshuffle(torch.zeros(n, k, dtype=torch.int8).view(dtype))


def test_accepted_weight_passes_gemm_a8_shape_checks():
    """What preshuffle accepts, gemm_a8's own checks accept as B (CPU tensors, explicit arch)."""
    from fusedgemm.gemm_a8 import check_gemm_a8_args

    for dtype, arch in ((torch.float8_e4m3fn, "sm_90a"), (torch.float8_e4m3fnuz, "gfx942"), (torch.int8, "gfx950")):
        wq = fg.preshuffle(random_weight(16, 16, dtype))
        a = torch.zeros(1, 16, dtype=torch.int8).view(dtype)
        assert check_gemm_a8_args(a, wq, None, None, None, "none", torch.bfloat16, None, arch=arch)["n"] == 16


def test_to_keeps_the_tag():
    wq = fg.preshuffle(random_weight(16, 32, torch.int8))
    moved = wq.to("cpu")
    assert isinstance(moved, fg.PreshuffledWeight) and torch.equal(moved.data, wq.data)
    assert "PreshuffledWeight(N=16, K=32" in repr(wq)


def test_pickle_and_copy_keep_the_weight_and_drop_launch_plans():
    import copy
    import io
    import pickle

    w = torch.randn(32, 64).to(torch.float8_e4m3fn)
    wq = fg.preshuffle(w)
    wq.call_plans[("signature",)] = lambda: None  # what gemm_a8 leaves there cannot be pickled
    # (plain pickle of an fp8 tensor fails inside torch itself: UntypedStorage has no dtype; int8 shows the path)
    w8 = fg.preshuffle(torch.randint(-8, 8, (32, 64), dtype=torch.int8))
    w8.call_plans[("signature",)] = lambda: None
    clone8 = pickle.loads(pickle.dumps(w8))
    assert clone8.call_plans == {} and torch.equal(clone8.data, w8.data)
    for clone in (copy.deepcopy(wq), copy.copy(wq)):
        assert isinstance(clone, fg.PreshuffledWeight) and clone.call_plans == {}
        assert clone.layout == wq.layout and torch.equal(clone.data.view(torch.uint8), wq.data.view(torch.uint8))
    buf = io.BytesIO()
    torch.save({"w": wq}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)["w"]
    assert torch.equal(fg.unshuffle(loaded).view(torch.uint8), w.view(torch.uint8))
