"""quantize_rows, Linear8 and fg.quantize on a GPU (skipped without one; written for an H100, runs on MI300X).

quantize_rows: codes and scales equal the float64 oracle bit for bit (NaN codes: any NaN pattern of the format)
for every input dtype and code type, ragged K (on both sides of what the registers hold), many rows, the
grid-stride path, strided / unaligned / 3-D inputs, special rows, poisoned outputs, CUDA graph replay and
torch.compile. Linear8: against the float64 oracle of the quantized GEMM with a tolerance derived from fp32
accumulation and one rounding, against the full-precision layer within the quantization bound, reloads, graphs.
"""
import math

import pytest
import torch

import fusedgemm as fg
from fusedgemm.nn import Linear8
from fusedgemm.quant import QMAX
from fusedgemm.reference import activation_f64, gemm_a8_reference, quantize_rows_reference, rel_error

pytestmark = pytest.mark.gpu

IN_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
ALL_QDTYPES = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8]  # every arch builds every code type
HALF_ULP = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
ONE_ROUNDING = {torch.float32: 2.0 ** -20, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def arch():
    from fusedgemm.runtime.arch import device_arch

    return device_arch(torch.cuda.current_device())


def fp8():
    return fg.FP8_DTYPE_FOR_ARCH[arch()]


def poison_allocator():
    """Fill free blocks of torch's caching allocator (its small and large pools) with 0xff, so the outputs the
    next call allocates start as NaN scales / 0xff codes: anything the kernel leaves unwritten then differs
    from the oracle."""
    small = [torch.empty(1 << 20, dtype=torch.uint8, device="cuda").fill_(0xFF) for _ in range(16)]
    large = torch.empty(256 << 20, dtype=torch.uint8, device="cuda").fill_(0xFF)
    del small, large


def assert_equals_oracle(x, got, qdtype):
    q, s = got
    torch.cuda.synchronize()
    rq, rs = quantize_rows_reference(x, qdtype)
    assert q.shape == rq.shape and q.dtype == qdtype and s.shape == rs.shape and s.dtype == torch.float32
    s_cpu = s.cpu()
    same_scale = (s_cpu.view(torch.int32) == rs.view(torch.int32)) | (torch.isnan(s_cpu) & torch.isnan(rs))
    assert same_scale.all(), f"{(~same_scale).sum().item()} scales differ, first rows {(~same_scale).nonzero()[:5]}"
    got_c, want_c = q.cpu().view(torch.uint8), rq.view(torch.uint8)
    diff = got_c != want_c
    if qdtype != torch.int8:  # NaN codes: the oracle writes the canonical one, hardware any NaN pattern
        is_nan = lambda c: (c & 0x7F) == 0x7F if qdtype == torch.float8_e4m3fn else c == 0x80  # noqa: E731
        diff &= ~(is_nan(got_c) & is_nan(want_c))
    assert not diff.any(), (f"{diff.sum().item()} codes differ, first at {diff.nonzero()[:5].tolist()}: got "
                            f"{got_c[diff][:5].tolist()}, want {want_c[diff][:5].tolist()}")


def special_rows(k, dtype):
    rows = torch.randn(10, k) * torch.logspace(-3, 3, 10)[:, None]
    rows[0] = 0
    rows[1, :] = 1e-30
    rows[2, k // 3] = float("nan")
    rows[3, k - 1] = float("inf")
    rows[4, 0] = float("-inf")
    rows[5] = torch.linspace(-1, 1, k) * 448.0
    rows[6, :] = -2.5
    return rows.to(dtype)


# ---- quantize_rows ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("qdtype", ALL_QDTYPES)
@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("k", [16, 1000, 4096, 4104, 16384, 40000])
def test_quantize_rows_equals_the_oracle(dtype, qdtype, k, seed):
    """K = 16384 fills the registers of a 512-thread block (bf16: 256); 40000 bf16 / 16384+ f32 read a tail twice."""
    m = 37 if k > 4104 else 300
    x = (torch.randn(m, k, device="cuda") * torch.logspace(-2, 2, m, device="cuda")[:, None]).to(dtype)
    x[: min(m, 10)] = special_rows(k, dtype).cuda()
    poison_allocator()
    got = fg.quantize_rows(x, qdtype)
    assert_equals_oracle(x, got, qdtype)
    again = fg.quantize_rows(x, qdtype)
    assert torch.equal(again[0].view(torch.uint8), got[0].view(torch.uint8))  # deterministic


@pytest.mark.parametrize("qdtype", [None, torch.int8])
def test_many_rows_and_the_grid_stride_path(qdtype, seed):
    qdtype = qdtype or fp8()
    x = torch.randn(4099, 4096, device="cuda", dtype=torch.bfloat16)
    assert_equals_oracle(x, fg.quantize_rows(x, qdtype), qdtype)
    many = torch.randn((1 << 20) + 37, 16, device="cuda", dtype=torch.bfloat16)  # more rows than blocks
    poison_allocator()
    assert_equals_oracle(many, fg.quantize_rows(many, qdtype), qdtype)


@pytest.mark.parametrize("dtype", IN_DTYPES)
def test_strided_unaligned_and_batched_inputs(dtype, seed):
    qdtype = fp8()
    wide = torch.randn(64, 4200, device="cuda").to(dtype)
    long_rows = torch.randn(8, 20002, device="cuda").to(dtype)
    views = {
        "row stride 4200, read in place": wide[:, :4096],
        "unaligned start: the element path": wide[:, 1:4097],
        "odd K": wide[:, :1001],
        "unaligned and long: the element path's tail read twice": long_rows[:, 1:20001],
        "3-D, leading dims flattened": torch.randn(4, 9, 1024, device="cuda").to(dtype),
        "transposed: copied": torch.randn(512, 64, device="cuda").to(dtype).t(),
        "one row": wide[5],
    }
    for what, x in views.items():
        poison_allocator()
        got = fg.quantize_rows(x, qdtype)
        assert got[0].shape == (x.numel() // x.shape[-1], x.shape[-1]), what
        assert_equals_oracle(x, got, qdtype)


def test_empty_inputs():
    q, s = fg.quantize_rows(torch.empty(0, 128, device="cuda", dtype=torch.bfloat16))
    assert q.shape == (0, 128) and s.shape == (0,)
    q, s = fg.quantize_rows(torch.empty(5, 0, device="cuda", dtype=torch.bfloat16), "int8")
    assert q.shape == (5, 0) and torch.equal(s.cpu(), torch.ones(5))


def test_graph_capture_replays_with_new_inputs(seed):
    qdtype = fp8()
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    fg.quantize_rows(x, qdtype)  # builds / loads the kernel and fills the launch cache outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        q, s = fg.quantize_rows(x, qdtype)
    for scale in (1.0, 1e-3, 50.0):
        x.copy_(torch.randn_like(x) * scale)
        g.replay()
        assert_equals_oracle(x, (q, s), qdtype)


def test_torch_compile_traces_the_op(seed):
    qdtype = fp8()

    def f(x):
        xq, s = fg.quantize_rows(x, "fp8")  # the device's variant, resolved while tracing
        return xq.to(torch.float32) * s[:, None]

    x = torch.randn(3, 7, 2048, device="cuda", dtype=torch.bfloat16)
    got = torch.compile(f, fullgraph=True)(x)
    q, s = quantize_rows_reference(x, qdtype)
    assert torch.equal(got.cpu(), q.to(torch.float32) * s[:, None])


def test_fast_path_serves_only_its_signature(seed):
    a = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)[:, 1:1025]  # same shape, other strides/alignment
    for x in (a, b, a, b, a.float()):
        assert_equals_oracle(x, fg.quantize_rows(x, "int8"), torch.int8)


# ---- Linear8 ---------------------------------------------------------------------------------------------------------
def quantized_reference(x, mod, lin):
    """The float64 oracle of Linear8's math on x: the oracle's codes of x and W, then the GEMM oracle unrounded."""
    xq, sx = quantize_rows_reference(x, mod.weight.dtype)
    wq, sw = quantize_rows_reference(lin.weight, mod.weight.dtype)
    pre = gemm_a8_reference(xq, wq, lin.bias, scale_a=sx, scale_b=sw,
                            epilogue="none" if lin.bias is None else "bias", unrounded=True)
    ref = activation_f64(pre, mod.activation)
    terms = (xq.double().abs() @ wq.double().abs().T) * sx.double()[:, None] * sw.double()[None, :]
    return pre, ref, terms


@pytest.mark.parametrize("qdtype", ["fp8", "int8"])
@pytest.mark.parametrize("activation", ["none", "relu", "silu", "gelu", "gelu_erf"])
@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("m", [1, 16, 100, 1000])
def test_linear8_equals_the_quantized_oracle(qdtype, activation, dtype, m, seed):
    k, n = 1024, 768
    lin = torch.nn.Linear(k, n, device="cuda")
    mod = Linear8.from_linear(lin, qdtype, activation=activation)
    x = (torch.randn(m, k, device="cuda") * 2).to(dtype)
    poison_allocator()
    y = mod(x.reshape(1, m, k)).reshape(m, n)
    torch.cuda.synchronize()
    assert y.dtype == dtype and not torch.isnan(y).any()
    pre, ref, terms = quantized_reference(x, mod, lin)
    # fp32 accumulation (fp8: Hopper's ~22-bit adds, promoted every 128 values; int8: exact), the scales and the
    # activation in fp32 (fast exp / rcp, erfc to 1.5e-7), then one rounding to the output type
    gamma = k * 2.0 ** -22 if mod.weight.dtype != torch.int8 else 4 * 2.0 ** -24
    y64 = y.cpu().double()
    allowed = 1.13 * (gamma * terms + 1e-6 * (pre.abs() + 1)) + (ref.abs() * 1.01 + 1e-30) * HALF_ULP[dtype] * 1.01
    assert ((y64 - ref).abs() <= allowed).all(), ((y64 - ref).abs() / allowed).max()
    if not (dtype == torch.float32 and qdtype == "fp8"):
        # one output rounding dominates -- except fp32 out of fp8, where the elementwise bound above (Hopper's
        # fp8 accumulation, ~1.2e-4 relative on H100) is the check
        assert rel_error(y, ref) <= ONE_ROUNDING[dtype]


@pytest.mark.parametrize("qdtype", ["fp8", "int8"])
def test_linear8_is_within_the_quantization_bound_of_the_full_precision_layer(qdtype, seed):
    k, n = 4096, 512
    lin = torch.nn.Linear(k, n, device="cuda")
    mod = Linear8.from_linear(lin, qdtype, activation="silu")
    x = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
    y = mod(x).cpu().double()
    full = torch.nn.functional.silu(x.cpu().double() @ lin.weight.detach().cpu().double().T
                                    + lin.bias.detach().cpu().double())
    # per element half a step of each operand's codes, summed over K (the CPU test derives the same bound)
    qmax = QMAX[mod.weight.dtype]
    xa, wa = x.cpu().double().abs(), lin.weight.detach().cpu().double().abs()
    if mod.weight.dtype == torch.int8:
        ex = (xa.amax(1, keepdim=True) / qmax / 2).expand_as(xa)
        ew = (wa.amax(1, keepdim=True) / qmax / 2).expand_as(wa)
    else:
        sub = 2.0 ** (-9 if mod.weight.dtype == torch.float8_e4m3fn else -10)
        ex = torch.maximum(xa * 2.0 ** -4, xa.amax(1, keepdim=True) / qmax * sub / 2)
        ew = torch.maximum(wa * 2.0 ** -4, wa.amax(1, keepdim=True) / qmax * sub / 2)
    bound = 1.13 * (xa @ ew.T + ex @ wa.T + ex @ ew.T) * 1.001 + full.abs() * 2.0 ** -8 * 1.01
    assert ((y - full).abs() <= bound).all()


def test_linear8_reload_move_and_graph(seed):
    lin_a, lin_b = torch.nn.Linear(512, 256), torch.nn.Linear(512, 256)
    a = Linear8.from_linear(lin_a, fp8(), activation="gelu").cuda()  # quantized on the CPU, moved
    b = Linear8.from_linear(lin_b.cuda(), fp8(), activation="gelu")
    x = torch.randn(32, 512, device="cuda", dtype=torch.bfloat16)
    ya = a(x)
    a.load_state_dict(b.state_dict())
    assert torch.equal(a(x), b(x)) and not torch.equal(a(x), ya), "the reload must be used by the next call"
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = a(x)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, b(x))


def test_linear8_torch_compile(seed):
    mod = Linear8.from_linear(torch.nn.Linear(1024, 512, device="cuda"), "fp8", activation="silu")
    x = torch.randn(2, 8, 1024, device="cuda", dtype=torch.bfloat16)
    eager = mod(x)
    assert torch.equal(torch.compile(mod, fullgraph=True)(x), eager)


def test_quantize_a_model_on_the_gpu(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024),
                                torch.nn.Linear(1024, 10)).cuda().to(torch.bfloat16)
    x = torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16)
    y0 = model[:3](x).float()
    q, rows = fg.quantize(model, "fp8", report=True)
    assert q is model and [r[1] == "swapped" for r in rows] == [True, True, False]
    y = q[:3](x).float()
    # e4m3 keeps 3 mantissa bits: up to 2^-4 relative per operand value, about 2^-5.5 rms, over two layers
    assert math.isfinite(rel_error(y, y0)) and rel_error(y, y0) < 0.08


@pytest.mark.parametrize("m", [1, 100, 1000])
def test_block_scaled_linear8_on_the_gpu(m, seed):
    """Linear8 with 128 x 128 weight blocks (from_linear(block=128)): quantize_rows(group=128) on the GPU equals its
    CPU rule bit for bit, and the block-scaled gemm_a8 is within fp8 accumulation of the float64 block oracle."""
    from fusedgemm.reference import gemm_a8_block_reference

    if arch() != "sm_90a":
        pytest.skip("block-scaled gemm_a8 is sm_90a's")
    k, n = 1024, 768
    lin = torch.nn.Linear(k, n, device="cuda")
    mod = Linear8.from_linear(lin, "fp8", activation="silu", block=128)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    y = mod(x)
    xq, sx = fg.quantize_rows(x, "fp8", group=128)
    xq_c, sx_c = fg.quantize_rows(x.cpu(), "fp8", group=128)
    assert torch.equal(xq.cpu().view(torch.uint8), xq_c.view(torch.uint8)) and torch.equal(sx.cpu(), sx_c)
    wq, ws = fg.quantize_weight(lin.weight, "fp8", block=128)
    ref = gemm_a8_block_reference(xq, wq, lin.bias, scale_a=sx, scale_b=ws, epilogue="bias_silu", unrounded=True)
    assert rel_error(y, ref) < 1e-2
