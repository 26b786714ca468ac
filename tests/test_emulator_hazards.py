"""Planted bugs the AMD emulator must catch (each mutates the real listing, re-assembles it with the package's
clang into a new code object, and runs it), and bad inputs it must refuse before executing."""
from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("msgpack")
import fusedgemm as fg  # noqa: E402
from fusedgemm.reference import gemm_a8_reference  # noqa: E402
from fusedgemm.testing.emulator import codeobjects, loader  # noqa: E402
from fusedgemm.testing.emulator.errors import (EmulatorError, HazardError, LaunchError, LoadError,  # noqa: E402
                                               MemoryFault)
from fusedgemm.testing.emulator.machine import Machine  # noqa: E402
from fusedgemm.testing.emulator.memory import Memory  # noqa: E402
from fusedgemm.testing.emulator.runner import CodeObject, run_gemm_a8  # noqa: E402

pytestmark = pytest.mark.slow  # builds code objects (cached between runs)

ARCH = "gfx942"
M, N, K = 19, 32, 96


@pytest.fixture(scope="module")
def setup():
    config = codeobjects.amd_gemm_configs(ARCH)[0]
    unit, name, sig, source = codeobjects.gemm_a8_kernel(ARCH, config, "fp8", "bf16", "none")
    return config, name, CodeObject.build(unit, ARCH, source)


def _data():
    g = torch.Generator().manual_seed(1)
    a = (torch.randn(M, K, generator=g) * 2).to(torch.float8_e4m3fnuz)
    w = (torch.randn(N, K, generator=g) * 2).to(torch.float8_e4m3fnuz)
    return a, w, fg.preshuffle(w)


def _run(setup, code=None, **kw):
    config, _name, obj = setup
    a, w, wq = _data()
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    run_gemm_a8(ARCH, config, a, wq.data, out, code=code or obj, **kw)
    ref = gemm_a8_reference(a, w, epilogue="none", out_dtype=torch.float64, unrounded=True)
    return out, ref


def _correct(out, ref) -> bool:
    return bool(not out.isnan().any() and ((out.double() - ref).norm() / ref.norm()) < 8e-3)


def _mutated(setup, edit) -> CodeObject:
    _config, name, obj = setup
    body = loader.function_text(obj.listing, name)
    new = edit(body)
    assert new != body, "the mutation found nothing to change"
    return CodeObject.from_listing(obj.listing.replace(body, new), ARCH)


def test_unmutated_kernel_is_correct(setup):
    assert _correct(*_run(setup))


def test_deleted_waitcnt_fails(setup):
    """The s_waitcnt vmcnt(0) before the MFMAs of the K loop, deleted: the MFMA touches registers whose loads are
    in flight -- an error naming both; with that check off, the MFMAs read poison and later retirements clobber
    reused registers, so the result is wrong or a later access faults."""
    code = _mutated(setup, lambda b: re.sub(r"\ts_waitcnt vmcnt\(0\)\n(?=\tv_mfma)", "", b, count=1))
    with pytest.raises(HazardError, match=r"v_mfma\S* .* touches v\d+ while `global_load"):
        _run(setup, code)
    try:
        out, ref = _run(setup, code, strict_hazards=False)
    except EmulatorError:
        return
    assert not _correct(out, ref)


def test_weakened_waitcnt_fails(setup):
    """vmcnt(0) -> vmcnt(1) before the MFMAs: the last load may still be in flight."""
    code = _mutated(setup, lambda b: re.sub(r"\ts_waitcnt vmcnt\(0\)\n(?=\tv_mfma)", "\ts_waitcnt vmcnt(1)\n", b,
                                            count=1))
    with pytest.raises(HazardError, match="in flight"):
        _run(setup, code)


def test_swapped_mfma_operands_fail(setup):
    def swap(body):
        return re.sub(r"(v_mfma\w+ \S+, )(v\[\d+:\d+\]), (v\[\d+:\d+\])", r"\1\3, \2", body)
    out, ref = _run(setup, _mutated(setup, swap))
    assert not _correct(out, ref)


def test_missing_barrier_is_an_lds_race(setup):
    code = _mutated(setup, lambda b: b.replace("\ts_barrier\n", "", 1))
    with pytest.raises(HazardError, match="LDS race"):
        _run(setup, code)


def test_kernarg_offset_shifted_by_8_fails(setup):
    with pytest.raises(MemoryFault, match=r"global_store_short .*address 0x"):
        _run(setup, shift={"out": 8})


def test_bad_inputs(setup):
    config, name, obj = setup
    kernel = obj.kernel(name)
    mach = Machine(Memory())
    with pytest.raises(LaunchError, match="no blocks"):
        mach.launch(kernel, (0, 1, 1), 512, bytes(112))
    with pytest.raises(LaunchError, match="shorter"):
        mach.launch(kernel, (1, 1, 1), 512, bytes(100))
    with pytest.raises(LaunchError, match="LDS"):
        mach.launch(kernel, (1, 1, 1), 512, bytes(112), dynamic_lds=64 * 1024)
    with pytest.raises(LaunchError, match="emulated device is gfx950"):
        mach.launch(kernel, (1, 1, 1), 512, bytes(112), arch="gfx950")
    with pytest.raises(LoadError, match="not in"):
        obj.kernel("fg_no_such_kernel")
    with pytest.raises(LoadError, match="not the listing|listing is not"):
        # a listing that is not this object: one instruction changed
        bad = obj.listing.replace("\ts_barrier\n", "\ts_nop 0\n", 1)
        loader._CACHE.clear()
        loader.load_kernel(obj.data, name, bad)


def test_lds_write_not_waited_before_barrier_is_caught():
    """A snippet-sized workgroup: each wave writes LDS, passes s_barrier and reads its neighbour's bytes. With
    s_waitcnt lgkmcnt(0) before the barrier it is correct; without, the emulator reports the incomplete write."""
    from fusedgemm.testing.emulator.loader import Kernel, KernelDescriptor
    from fusedgemm.testing.emulator.snippet import assemble_snippet

    def kernel(fenced: bool) -> Kernel:
        body = ["v_lshlrev_b32_e32 v1, 2, v0", "ds_write_b32 v1, v0"]
        body += ["s_waitcnt lgkmcnt(0)"] if fenced else []
        body += ["s_barrier", "v_xor_b32_e32 v2, 0x100, v1", "ds_read_b32 v3, v2", "s_waitcnt lgkmcnt(0)"]
        instrs = assemble_snippet(body, ARCH)
        kd = KernelDescriptor(512, 0, 0, 0, 0, 0x180, 0, 0, 0)  # 512 B of LDS, workgroup ids x / y, no user SGPRs
        return Kernel("lds_exchange", ARCH, kd, {".max_flat_workgroup_size": 128, ".args": []}, instrs, b"", "test")

    Machine(Memory()).launch(kernel(True), (1, 1, 1), 128, b"")
    with pytest.raises(HazardError, match="has not completed: no s_waitcnt lgkmcnt"):
        Machine(Memory()).launch(kernel(False), (1, 1, 1), 128, b"")


def test_shipped_barriers_complete_lds_writes(setup):
    """The finding the emulator made (issue 40): platform.hpp's __syncthreads() was a bare s_barrier, so no
    s_waitcnt lgkmcnt(0) completed the split-K partial sums' ds_write before it and wave 0 could read another
    wave's partial sum before it landed (LDS requests of different waves may be reordered). It now fences as HIP's
    own does (release fence, s_barrier, acquire fence): the shipped kernel passes with the check on."""
    out, ref = _run(setup, lds_fence_check=True)
    assert _correct(out, ref)
    _config, name, obj = setup
    assert "\ts_waitcnt lgkmcnt(0)\n\ts_barrier\n" in loader.function_text(obj.listing, name)


def test_wait_before_barrier_deleted_fails(setup):
    """A planted bug: the shipped kernel with the s_waitcnt lgkmcnt(0) before each s_barrier deleted (the code
    the bare s_barrier gave) is reported: another wave reads LDS bytes whose ds_write has not completed."""
    code = _mutated(setup, lambda b: b.replace("\ts_waitcnt lgkmcnt(0)\n\ts_barrier\n", "\ts_barrier\n"))
    with pytest.raises(HazardError, match="has not completed: no s_waitcnt lgkmcnt"):
        _run(setup, code, lds_fence_check=True)
