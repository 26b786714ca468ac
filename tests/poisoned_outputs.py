"""poisoned_outputs(): while open, torch.empty returns poisoned memory (the ops allocate their outputs with it), on the
CPU (the emulator's outputs) and on a GPU, so an output element a kernel never writes stays NaN / an impossible code
and fails the check. check_group_codes: a group-quantised output (out_group=128) against quantize_rows' rule.
rel_error: a poisoned output's relative error (none left unwritten). launched_cdna_kernel: an emulated call's one
kernel, a CDNA LDS config's for any K or for whole K blocks."""
from __future__ import annotations

import contextlib

import torch

# a value no kernel writes: NaN for floats, the fp8 NaN code, -128 for int8 (quantize_rows saturates at +-127)
POISON_BYTE = {torch.float8_e4m3fn: 0x7F, torch.float8_e4m3fnuz: 0x80, torch.int8: 0x80}


@contextlib.contextmanager
def poisoned_outputs():
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        if t.device.type in ("cpu", "cuda") and t.numel():
            if t.dtype.is_floating_point and t.element_size() > 1:
                t.fill_(float("nan"))
            elif t.dtype in POISON_BYTE:
                t.view(torch.uint8).fill_(POISON_BYTE[t.dtype])
            elif t.dtype == torch.int32:
                t.fill_(0x7FBADBAD)
        return t

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = real


def check_group_codes(codes, scales, y64, what, rtol=1e-5, max_differ=0.01):
    """codes, scales of a group-quantised output (out_group=128) against quantize_rows' rule per 128 columns of y64
    (the float64 oracle, rounded once to fp32 as a kernel holds it). Scales to rtol (default: fp32 rounding, a
    kernel's fp32 sums differing from float64 by their rounding; an epilogue with approximate activations needs
    theirs); codes equal to the oracle's but where the two values sit on either side of a rounding boundary: one code
    step, in at most max_differ of them. Poison left anywhere fails."""
    import fusedgemm as fg

    want_c, want_s = (t.to(codes.device) for t in fg.quantize_rows(y64.to(torch.float32), codes.dtype, group=128))
    assert not scales.isnan().any(), f"{what}: scales never written"
    assert torch.allclose(scales, want_s, rtol=rtol, atol=0), f"{what}: scales {(scales / want_s - 1).abs().max():.2e}"
    got, want = codes.view(torch.uint8), want_c.view(torch.uint8)
    assert not (got == POISON_BYTE[codes.dtype]).any(), f"{what}: codes never written (poison left)"
    differ = got != want
    step = (codes.float() - want_c.float()).abs() / (want_c.float().abs().clamp(min=2.0 ** -6))
    assert differ.float().mean() < max_differ and (step[differ] <= 0.13).all(), \
        f"{what}: {int(differ.sum())} codes differ"


def rel_error(y, ref) -> float:
    """||y - ref|| / ||ref|| in float64, once no output is left poisoned (NaN)."""
    assert not y.isnan().any(), "outputs never written"
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


def launched_cdna_kernel(dev, config, whole, what):
    """The emulated call launched one kernel: `config`'s, its whole-K-block one iff `whole`."""
    names = [name for name, _grid, _block in dev.launches]
    assert len(names) == 1 and names[0].endswith(config), f"{what}: {names}"
    assert names[0].endswith("_whole_k_" + config) == whole, f"{what}: {names[0]}"
