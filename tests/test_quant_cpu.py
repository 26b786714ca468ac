"""quantize_rows / quantize_weight on the CPU: the float64 oracle's stated semantics (zero rows, NaN / inf,
saturation, ties), the torch path and the kernel header's own arithmetic (compiled for the host) against it,
the API (shapes, strides, dtypes) and torch.compile tracing."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import fusedgemm as fg
from fusedgemm.quant import MIN_SCALE, QMAX, quantize_rows_torch, resolve_dtype
from fusedgemm.reference import fp8_round_reference, quantize_rows_reference

ROOT = Path(__file__).resolve().parents[1]
CXX = shutil.which("g++") or shutil.which("clang++")
QDTYPES = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.int8]
IN_DTYPES = [torch.float32, torch.bfloat16, torch.float16]
NAN_CODE = {torch.float8_e4m3fn: 0x7F, torch.float8_e4m3fnuz: 0x80}


def codes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype != torch.int8 else t


def assert_same(got, want):
    (gq, gs), (wq, ws) = got, want
    assert gq.dtype == wq.dtype and gq.shape == wq.shape
    assert torch.equal(codes(gq).cpu(), codes(wq)), "codes differ from the oracle"
    assert torch.equal(gs.cpu().view(torch.int32), ws.view(torch.int32)), "scales differ from the oracle (bits)"


def adversarial_rows(k: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows that exercise the rule's corners: zeros, one nonzero, huge / tiny magnitudes, repeated maxima, both
    signs, subnormal-range values, and random rows of several scales."""
    g = torch.Generator().manual_seed(k)
    rows = [torch.zeros(k), torch.zeros(k).index_fill_(0, torch.tensor([k // 2]), -3.0),
            torch.full((k,), 7.5), torch.linspace(-1, 1, k), torch.randn(k, generator=g) * 1e4,
            torch.randn(k, generator=g) * 1e-6, torch.randn(k, generator=g) * 1e-30,
            torch.randn(k, generator=g).sign() * 2.0 ** torch.randint(-20, 10, (k,), generator=g).float()]
    rows += [torch.randn(k, generator=g) * s for s in (1.0, 0.01, 300.0)]
    x = torch.stack(rows)
    if dtype == torch.float16:
        x = x.clamp(-6e4, 6e4)
    return x.to(dtype)


# ---- the oracle's semantics ---------------------------------------------------------------------------------
@pytest.mark.parametrize("qdtype", QDTYPES)
def test_zero_row_gets_scale_one_and_zero_codes(qdtype):
    q, s = quantize_rows_reference(torch.zeros(3, 32), qdtype)
    assert torch.equal(s, torch.ones(3)) and not codes(q).any()


@pytest.mark.parametrize("qdtype", QDTYPES)
def test_tiny_rows_are_floored_so_the_reciprocal_is_finite(qdtype):
    x = torch.tensor([[1e-45, -2e-45, 0.0, 0.0], [1e-40, 0.0, 0.0, 0.0]])
    q, s = quantize_rows_reference(x, qdtype)
    assert torch.equal(s, torch.full((2,), MIN_SCALE, dtype=torch.float32))
    assert torch.isfinite(1.0 / s).all()


@pytest.mark.parametrize("qdtype", QDTYPES)
def test_row_absmax_maps_to_qmax_and_nothing_exceeds_it(qdtype):
    x = torch.randn(64, 512) * torch.logspace(-3, 3, 64)[:, None]
    q, s = quantize_rows_reference(x, qdtype)
    vals = q.to(torch.float32)
    assert (vals.abs().amax(1) == QMAX[qdtype]).all(), "each row's largest magnitude must reach qmax"
    assert torch.equal(s, (x.abs().amax(1) / QMAX[qdtype]).to(torch.float32))


@pytest.mark.parametrize("qdtype", QDTYPES)
def test_nan_and_inf_rows(qdtype):
    x = torch.tensor([[1.0, float("nan"), -2.0, 0.5], [1.0, float("inf"), -3.0, 0.0],
                      [float("-inf"), 1.0, 2.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    q, s = quantize_rows_reference(x, qdtype)
    assert torch.isnan(s[0]) and s[1] == float("inf") and s[2] == float("inf") and s[3] == 4.0 / QMAX[qdtype]
    c = codes(q).to(torch.int64)
    if qdtype == torch.int8:
        assert not c[:3].any(), "int8 has no NaN: a NaN row and the infinities write 0"
    else:
        nan = NAN_CODE[qdtype]
        assert (c[0] == nan).all(), "a NaN row is NaN throughout"
        assert c[1, 1] == nan and c[2, 0] == nan, "inf * (1 / inf) = inf * 0 = NaN"
        zero_pos, zero_neg = 0x00, 0x80 if qdtype == torch.float8_e4m3fn else 0x00
        assert c[1, 0] == zero_pos and c[1, 2] == zero_neg, "finite values of an inf row quantize to (signed) 0"


def test_int8_ties_round_to_even():
    # absmax 127 -> scale 1, 1 / scale 1: the codes are the values rounded, ties to even
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 3.4999998, 3.5000002, 0.0]])
    q, s = quantize_rows_reference(x, torch.int8)
    assert s.item() == 1.0
    assert q[0].tolist() == [127, 0, 2, 2, 0, -2, -2, 126, -126, 3, 4, 0]


@pytest.mark.parametrize("qdtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_fp8_ties_round_to_even_and_saturate(qdtype):
    qmax = QMAX[qdtype]
    # absmax qmax -> scale 1: 1.0625 lies halfway between 1.0 (even mantissa) and 1.125; 1.1875 between 1.125
    # and 1.25 (even); a value just under qmax keeps qmax
    x = torch.tensor([[qmax, 1.0625, 1.1875, -1.0625, qmax - 1.0, 0.0]])
    q, s = quantize_rows_reference(x, qdtype)
    assert s.item() == 1.0
    assert q[0].to(torch.float32).tolist() == [qmax, 1.0, 1.25, -1.0, qmax, 0.0]
    # saturation: values past qmax (the clamp) write qmax, never NaN
    t = torch.tensor([qmax * 1.01, -qmax * 4, 1e30], dtype=torch.float64)
    assert fp8_round_reference(t, qdtype).view(qdtype).to(torch.float32).tolist() == [qmax, -qmax, qmax]


@pytest.mark.parametrize("qdtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_fp8_rounding_of_the_oracle_matches_torch_cast_on_every_midpoint(qdtype):
    """The oracle rounds by searching the format's values; the CPU path uses torch's cast: they must agree on
    every code, every midpoint between codes (ties), its neighbours, and random values (incl. subnormals)."""
    from fusedgemm.quant import codes_from_fp32

    values = torch.arange(256).to(torch.uint8).view(qdtype).to(torch.float64)
    fin = values[torch.isfinite(values)].unique()
    mids = (fin[1:] + fin[:-1]) / 2
    up = torch.nextafter(mids.float(), torch.tensor(float("inf"))).double()
    down = torch.nextafter(mids.float(), torch.tensor(float("-inf"))).double()
    t = torch.cat([fin, mids, up, down, -mids, torch.randn(20000, dtype=torch.float64) * 30,
                   torch.randn(2000, dtype=torch.float64) * 1e-3, torch.tensor([0.0, -0.0, float("nan"), 1e9])])
    t = t.float().double()
    assert torch.equal(fp8_round_reference(t, qdtype), codes_from_fp32(t.float(), qdtype).view(torch.uint8))


# ---- the torch path and the kernel header's arithmetic against the oracle -------------------------------------
@pytest.mark.parametrize("qdtype", QDTYPES)
@pytest.mark.parametrize("dtype", IN_DTYPES)
def test_torch_path_equals_the_oracle(dtype, qdtype, seed):
    for k in (16, 1000, 4104):
        x = torch.cat([adversarial_rows(k, dtype), (torch.randn(40, k) * 3).to(dtype)])
        assert_same(quantize_rows_torch(x, qdtype), quantize_rows_reference(x, qdtype))
    x = torch.tensor([[1.0, float("nan"), 2.0], [float("inf"), 1.0, -1.0], [0.0, 0.0, 0.0]]).to(dtype)
    assert_same(quantize_rows_torch(x, qdtype), quantize_rows_reference(x, qdtype))


@pytest.fixture(scope="module")
def host_quantizer(tmp_path_factory):
    """The header's per-row arithmetic (row_scale, mul_rn, from_float / from_float2, the bit-pattern absmax)
    compiled for the host with -DFG_HOST, as a C function over one fp32 row."""
    if CXX is None:
        pytest.skip("needs a host C++ compiler")
    tmp = tmp_path_factory.mktemp("quant_host")
    src = tmp / "quant_host.cpp"
    src.write_text("""#include "include/fusedgemm/quantize_rows.hpp"
template <class Q>
static void run(const float* x, int k, unsigned char* q, float* scale) {
  fg::u32 amax = 0;
  for (int i = 0; i < k; ++i) amax = fg::quant::max_u32(amax, fg::quant::abs_bits(x[i]));
  const float s = fg::quant::row_scale<Q>(fg::bits_to_float(amax));
  const float inv = 1.f / s;
  int i = 0;
  for (; i + 1 < k; i += 2) {  // pairs, as the 16-byte-pack path converts them
    const fg::u32 two = Q::from_float2(fg::quant::mul_rn(x[i], inv), fg::quant::mul_rn(x[i + 1], inv));
    q[i] = two & 0xffu;
    q[i + 1] = two >> 8;
  }
  for (; i < k; ++i) q[i] = Q::from_float(fg::quant::mul_rn(x[i], inv));
  *scale = s;
}
extern "C" void quantize_row(int kind, const float* x, int k, unsigned char* q, float* scale) {
  if (kind == 0) run<fg::QuantFp8E4M3Fn>(x, k, q, scale);
  if (kind == 1) run<fg::QuantFp8E4M3Fnuz>(x, k, q, scale);
  if (kind == 2) run<fg::QuantInt8>(x, k, q, scale);
}
""")
    lib = tmp / "quant_host.so"
    proc = subprocess.run([CXX, "-std=c++17", "-O2", "-shared", "-fPIC", "-DFG_HOST", "-Wno-unknown-pragmas",
                           f"-I{ROOT / 'hip_src'}", str(src), "-o", str(lib)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    dll = ctypes.CDLL(str(lib))

    def quantize(x: torch.Tensor, qdtype):
        x = x.to(torch.float32).contiguous()
        m, k = x.shape
        q = torch.empty((m, k), dtype=torch.uint8)
        s = torch.empty(m, dtype=torch.float32)
        for r in range(m):
            dll.quantize_row(QDTYPES.index(qdtype), ctypes.c_void_p(x[r].data_ptr()), k,
                             ctypes.c_void_p(q[r].data_ptr()), ctypes.c_void_p(s[r:].data_ptr()))
        return q.view(qdtype), s
    return quantize


@pytest.mark.parametrize("qdtype", QDTYPES)
def test_kernel_arithmetic_compiled_for_the_host_equals_the_oracle(host_quantizer, qdtype, seed):
    x = torch.cat([adversarial_rows(1001, torch.float32), torch.randn(20, 1001) * 5,
                   torch.tensor([[1.0, float("nan")] + [0.5] * 999, [float("inf")] + [-1.0] * 1000])])
    assert_same(host_quantizer(x, qdtype), quantize_rows_reference(x, qdtype))
    # ties: int8 halves, fp8 midpoints, at scale exactly 1
    qmax = QMAX[qdtype]
    ties = torch.tensor([[qmax, 0.5, 1.5, 2.5, -2.5, 1.0625, 1.1875, -1.0625, 3.5]])
    assert_same(host_quantizer(ties, qdtype), quantize_rows_reference(ties, qdtype))


@pytest.mark.parametrize("qdtype", QDTYPES)
def test_dequantized_rows_are_within_half_a_step(qdtype, seed):
    x = torch.randn(32, 256) * torch.logspace(-2, 2, 32)[:, None]
    q, s = quantize_rows_reference(x, qdtype)
    err = (q.to(torch.float64) * s.double()[:, None] - x.double()).abs()
    if qdtype == torch.int8:
        bound = s.double()[:, None] * (0.5 + 1e-6)
    else:  # 3 mantissa bits: half an ulp is 2^-4 of the value; below the smallest normal a fixed step
        sub_step = 2.0 ** (-9 if qdtype == torch.float8_e4m3fn else -10)
        bound = torch.maximum(x.double().abs() * 2.0 ** -4, sub_step / 2 * s.double()[:, None]) * (1 + 1e-6)
    assert (err <= bound).all()


# ---- the public API ----------------------------------------------------------------------------------------------
def test_api_flattens_leading_dims_and_reads_strided_rows():
    base = torch.randn(4, 6, 160)
    x = base[..., :128]  # row stride 160: read in place on a GPU (a view here too)
    xq, s = fg.quantize_rows(x, "int8")
    assert xq.shape == (24, 128) and s.shape == (24,) and xq.dtype == torch.int8
    assert_same((xq, s), quantize_rows_reference(x, torch.int8))
    xt = torch.randn(128, 8).t()  # unit stride along rows missing: copied
    assert_same(fg.quantize_rows(xt, "fp8"), quantize_rows_reference(xt, torch.float8_e4m3fn))
    e1, e2 = fg.quantize_rows(torch.empty(0, 64)), fg.quantize_rows(torch.empty(3, 0))
    assert e1[0].shape == (0, 64) and e1[1].shape == (0,)
    assert e2[0].shape == (3, 0) and torch.equal(e2[1], torch.ones(3))
    wq, sw = fg.quantize_weight(torch.randn(48, 32, dtype=torch.float64), torch.int8)
    assert wq.shape == (48, 32) and sw.dtype == torch.float32


def test_api_rejects_what_it_does_not_take():
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        fg.quantize_rows(torch.randn(2, 16, dtype=torch.float64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        fg.quantize_rows([1.0, 2.0])
    with pytest.raises(ValueError, match="'fp8', 'int8'"):
        fg.quantize_rows(torch.randn(2, 16), "int4")
    with pytest.raises(TypeError, match="dtype must be"):
        fg.quantize_rows(torch.randn(2, 16), torch.uint8)
    with pytest.raises(ValueError, match="at least one dimension"):
        fg.quantize_rows(torch.tensor(1.0))
    assert resolve_dtype("fp8", torch.device("cpu")) == torch.float8_e4m3fn
    assert resolve_dtype(torch.float8_e4m3fnuz) == torch.float8_e4m3fnuz


def test_torch_compile_traces_the_op():
    import torch._dynamo.testing

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")

    def f(x):
        xq, s = fg.quantize_rows(x, torch.int8)
        return xq.to(torch.float32) * s[:, None]

    x = torch.randn(2, 5, 64)
    got = torch.compile(f, backend=counter, fullgraph=True)(x)
    q, s = quantize_rows_reference(x, torch.int8)
    assert torch.equal(got, q.to(torch.float32) * s[:, None])
    assert counter.frame_count == 1
    ops = (torch.ops.fusedgemm.quantize_rows, torch.ops.fusedgemm.quantize_rows.default)
    assert any(n.target in ops for g in counter.graphs for n in g.graph.nodes), "traced through, not as the op"


def test_the_fp8_variant_lookup_is_marked_as_torch_marks_a_constant_result():
    """quant._fp8_of_device carries what torch.compiler.assume_constant_result sets, without the import of
    torch._dynamo that the decorator does (quant._assume_constant_result)."""
    from fusedgemm import quant

    def f():
        return None

    marked = torch.compiler.assume_constant_result(f)
    assert marked is f and set(vars(f)) == {"_dynamo_marked_constant"}
    assert quant._fp8_of_device._dynamo_marked_constant is f._dynamo_marked_constant


def test_import_loads_no_dynamo():
    """`import fusedgemm` leaves torch._dynamo unloaded (~0.7 s of import time on the CPU machine)."""
    import subprocess
    import sys

    code = "import sys, fusedgemm; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "False", out.stderr
