"""The LDS-staged, pipelined CDNA GEMM (hip_src/include/fusedgemm/cdna_gemm.hpp, config cdna_lds_128x128) for
matmul_fused's kinds in the AMD emulator: bf16, fp16 and tf32 (fp32 inputs) with a plain row-major B [N, K] (A
through the double-buffered swizzled LDS tile, B straight to registers), the real gfx942 and gfx950 code objects reached
through the public API with the config forced, ragged M / N / K (rows past M, rows of B past N -- N % 16 == 8 --
and K chunks past K through the buffer descriptors' range check; K a multiple of 8, not of the 64-element K
block) and whole K blocks, the bias + SiLU preset, alpha / beta / c, an expression epilogue with column and aux
operands, outputs poisoned, float64 oracles, every hazard check on -- K filling whole K blocks launches the kernel
without the K-edge test (CdnaWholeKBlocks), any other K the one with it; and a planted bug: a deleted s_barrier must
be an LDS race."""
from __future__ import annotations

import contextlib
import re

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
import fusedgemm.epilogue as E  # noqa: E402
from fusedgemm.plan import forced_config  # noqa: E402
from fusedgemm.testing import emulate  # noqa: E402
from fusedgemm.testing.emulator import hip, loader  # noqa: E402
from fusedgemm.testing.emulator.errors import HazardError  # noqa: E402
from fusedgemm.testing.emulator.runner import CodeObject  # noqa: E402
from poisoned_outputs import poisoned_outputs  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

CONFIG = "cdna_lds_128x128"
ARCHES = ("gfx942", "gfx950")
DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # float32: precision="tf32" (gfx942 xf32, gfx950 exact fp32)
# (M, N, K), K in elements (64 per 128-byte K block): two row tiles, the second of 3 rows, and a partial column tile
# (144 = 128 + 16), K of 3 blocks + one chunk (4 blocks: the twice-unrolled loop runs both halves); a tile straddling
# N (40 = 2.5 tiles), K of 1 block + 1 chunk; one row, N = 24, K of one chunk; a second column block of 8 rows of B
# (136 = 128 + 8), K of 2 blocks + 1 chunk (3 blocks: the loop leaves by its mid-iteration break); then whole K
# blocks (K % 64 == 0, every LLM shape): 3 with a partial column tile, 2 with a tile straddling N, 4 (the whole-K
# kernel's loop once, then its tail of two blocks).
SHAPES = ((131, 144, 200), (37, 40, 72), (1, 24, 8), (37, 136, 136), (131, 144, 192), (37, 40, 128), (37, 48, 256))


def _check(out, ref, tol, what):
    assert not out.isnan().any(), f"{what}: {int(out.isnan().sum())} outputs never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < tol, f"{what}: relative error {err:.2e}"


def _launched_cdna(dev, what, k, dtype=torch.bfloat16):
    """One launch of the config's kernel: the whole-K-block one (no K-edge test) exactly where K fills whole
    128-byte K blocks (64 16-bit or 32 fp32 elements)."""
    assert len(dev.launches) == 1, what
    name = dev.launches[0][0]
    assert name.startswith("fg_matmul_") and name.endswith(CONFIG), name
    per_block = 128 // torch.tensor([], dtype=dtype).element_size()
    assert name.endswith("_whole_k_" + CONFIG) == (k % per_block == 0), f"{what}: {name}"


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16", "tf32"])
def test_ragged_bias_silu_and_alpha_beta_c(arch, dtype, seed):
    """Every shape: the bias + SiLU preset (even rows of SHAPES) or alpha * AB + beta * c with SiLU (odd ones),
    into a given output that sits in front of a poisoned tail that must stay untouched."""
    g = torch.Generator().manual_seed(seed)
    kw = {"precision": "tf32"} if dtype == torch.float32 else {}
    for i, (m, n, k) in enumerate(SHAPES):
        x, w = torch.randn(m, k, generator=g).to(dtype), (torch.randn(n, k, generator=g) / 4).to(dtype)
        store = torch.full((m * n + 64,), float("nan"), dtype=dtype)
        out = store[:m * n].view(m, n)
        what = f"{arch} {dtype} {m}x{n}x{k}"
        if i % 2 == 0:
            bias = torch.randn(n, generator=g).to(dtype)
            with forced_config(CONFIG), emulate(arch) as dev:
                fg.matmul_fused(x, w, bias, activation="silu", out=out, **kw)
            ref = F.silu(x.double() @ w.double().T + bias.double())
        else:
            c = torch.randn(m, n, generator=g).to(dtype)
            with forced_config(CONFIG), emulate(arch) as dev:
                fg.matmul_fused(x, w, alpha=0.5, beta=2.0, c=c, activation="silu", out=out, **kw)
            ref = F.silu(0.5 * (x.double() @ w.double().T) + 2.0 * c.double())
        _launched_cdna(dev, what, k, dtype)
        _check(out, ref, 8e-3, what)
        assert store[m * n:].isnan().all(), f"{what}: the kernel wrote past the end of the output"


@pytest.mark.parametrize("arch", ARCHES)
def test_expression_epilogue_with_aux(arch, seed):
    """A generated kernel of an expression with column and aux operands, fp32 output allocated poisoned by the op;
    N % 16 == 8 (a tile straddling N)."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 37, 40, 200
    dtype = torch.bfloat16 if arch == "gfx942" else torch.float16
    x, w = torch.randn(m, k, generator=g).to(dtype), (torch.randn(n, k, generator=g) / 4).to(dtype)
    s, res = torch.rand(n, generator=g) + 0.5, torch.randn(m, n, generator=g).to(dtype)
    with poisoned_outputs(), forced_config(CONFIG), emulate(arch) as dev:
        y = fg.matmul_fused(x, w, epilogue=E.parse("silu(acc * n_vec(s)) + aux(res)"),
                            operands={"s": s, "res": res}, out_dtype=torch.float32)
    _launched_cdna(dev, f"{arch} expression", k)
    pre = (x.double() @ w.double().T) * s.double()
    _check(y, F.silu(pre) + res.double(), 1e-5, f"{arch} expression")


@contextlib.contextmanager
def _barrier_deleted(which: str, arch: str, counted: list):
    """Every kernel the emulated HIP loads while open has one of its s_barriers deleted (re-assembled)."""
    real = hip.load_kernel

    def load(data, name, listing, **kwargs):
        body = loader.function_text(listing, name)
        counted.append(len(re.findall(r"\ts_barrier\n", body)))
        if which == "first":
            mutated = body.replace("\ts_barrier\n", "", 1)
        else:
            head, _sep, tail = body.rpartition("\ts_barrier\n")
            mutated = head + tail
        code = CodeObject.from_listing(listing.replace(body, mutated), arch)
        return real(code.data, name, code.listing, **kwargs)

    hip.load_kernel = load
    try:
        yield
    finally:
        hip.load_kernel = real


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", ["first", "last"])
def test_deleted_barrier_is_an_lds_race(arch, which, seed):
    """Planted bugs in the bf16 kernel: the prologue's s_barrier deleted (waves read K block 0's A before other
    waves wrote it) or the last one (the second K block of the twice-unrolled loop: the next block's write into
    the buffer other waves still read). The emulator must report an LDS race either way."""
    g = torch.Generator().manual_seed(seed)
    m, n, k = 37, 48, 200
    x, w = torch.randn(m, k, generator=g).to(torch.bfloat16), torch.randn(n, k, generator=g).to(torch.bfloat16)
    counted: list = []
    with pytest.raises(HazardError, match="LDS race"):
        with _barrier_deleted(which, arch, counted), forced_config(CONFIG), emulate(arch):
            fg.matmul_fused(x, w)
    assert counted == [3], f"expected the prologue's barrier and one per K block of the unrolled loop: {counted}"
