import pytest
import torch

import fusedgemm as fg

DTYPES = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8, torch.bfloat16, torch.float16]


def random_weight(n, k, dtype):
    if dtype == torch.int8:
        return torch.randint(-128, 128, (n, k), dtype=torch.int8)
    if dtype.itemsize == 1:  # fp8: random bytes cover every code, NaNs included
        return torch.randint(0, 256, (n, k), dtype=torch.uint8).view(dtype)
    return torch.randn(n, k).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(16, 16), (48, 96), (1040, 160), (32, 4096)])
def test_round_trip_bit_exact(dtype, n, k, seed):
    kp = 16 // dtype.itemsize
    k = max(k // kp * kp, kp)
    w = random_weight(n, k, dtype)
    wq = fg.preshuffle(w)
    assert isinstance(wq, fg.PreshuffledWeight) and wq.layout == fg.LAYOUT_16x16
    assert wq.dtype == dtype and tuple(wq.shape) == (n, k)
    back = fg.unshuffle(wq)
    assert back.dtype == dtype
    assert torch.equal(back.view(torch.uint8 if dtype.itemsize == 1 else torch.int16),
                       w.view(torch.uint8 if dtype.itemsize == 1 else torch.int16))


@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
def test_layout_matches_the_formula(dtype, seed):
    """off(n, k) = (n // 16) * 16K + (k // Kp) * 16Kp + (n % 16) * Kp + (k % Kp), element by element."""
    n, k = 48, 64
    kp = 16 // dtype.itemsize
    w = random_weight(n, k, dtype)
    flat = fg.preshuffle(w).data.reshape(-1)
    for nn in range(n):
        for kk in range(k):
            off = (nn // 16) * 16 * k + (kk // kp) * 16 * kp + (nn % 16) * kp + kk % kp
            assert flat[off] == w[nn, kk]


def test_preshuffle_is_not_identity(seed):
    w = random_weight(32, 64, torch.int8)
    assert not torch.equal(fg.preshuffle(w).data, w)


def test_errors():
    with pytest.raises(ValueError, match="N % 16 == 0 and K % 16 == 0"):
        fg.preshuffle(torch.zeros(24, 32, dtype=torch.int8))
    with pytest.raises(ValueError, match="K % 16"):
        fg.preshuffle(torch.zeros(16, 40, dtype=torch.int8))
    with pytest.raises(ValueError, match="2-D"):
        fg.preshuffle(torch.zeros(16, 16, 16, dtype=torch.int8))
    with pytest.raises(TypeError, match="already preshuffled"):
        fg.preshuffle(fg.preshuffle(torch.zeros(16, 16, dtype=torch.int8)))
    with pytest.raises(TypeError, match="expected a PreshuffledWeight"):
        fg.unshuffle(torch.zeros(16, 16, dtype=torch.int8))
    with pytest.raises(TypeError, match="keeps its dtype"):
        fg.preshuffle(torch.zeros(16, 16, dtype=torch.int8)).to(torch.float32)


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
