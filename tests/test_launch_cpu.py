"""The NVIDIA launch path without a GPU or a driver.

FakeDriver stands in for libcuda.so.1: every entry point is a C function pointer (a ctypes callback) with
the real prototype from cuda.h, so each call crosses the same C ABI as a call into the driver -- in
particular the untyped cuLaunchKernel / cuTensorMapEncodeTiled calls, whose 64-bit handles would be
silently truncated if the call sites passed them as Python ints.
"""
from __future__ import annotations

import ctypes
import struct
import sys
import threading
import types

import pytest

from fusedgemm.runtime import kernels, launch

C = ctypes
ERRORS = {0: (b"CUDA_SUCCESS", b"no error"), 1: (b"CUDA_ERROR_INVALID_VALUE", b"invalid argument"),
          100: (b"CUDA_ERROR_NO_DEVICE", b"no CUDA-capable device is detected"),
          201: (b"CUDA_ERROR_INVALID_CONTEXT", b"invalid device context"),
          700: (b"CUDA_ERROR_ILLEGAL_ADDRESS", b"an illegal memory access was encountered")}

FUNC_BASE = 0x7F00_1234_0000       # handles above 2**32: truncation would show
MODULE = 0x7F00_5678_0000
PRIMARY_CTX = 0x7F00_9ABC_0000
STREAM = 0x7FFF_DEAD_BEEF_0040


class FakeDriver:
    def __init__(self, current_ctx=PRIMARY_CTX, init_error=0):
        self.calls: list[tuple] = []
        self.current_ctx = current_ctx
        self.launch_results: list[int] = []   # errors to return from the next cuLaunchKernel calls
        self.encode_result = 0
        self.functions: dict[bytes, int] = {}
        u32, u64, vp, i = C.c_uint32, C.c_uint64, C.c_void_p, C.c_int

        def entry(restype, *argtypes):
            def wrap(py):
                cb = C.CFUNCTYPE(restype, *argtypes)(py)
                setattr(self, py.__name__, cb)  # kept alive by self
                return py
            return wrap

        @entry(i, C.c_uint)
        def cuInit(flags):
            self.calls.append(("cuInit", flags))
            return init_error

        @entry(i, i, C.POINTER(C.c_char_p))
        def cuGetErrorName(err, out):
            if err not in ERRORS:
                return 1
            out[0] = ERRORS[err][0]
            return 0

        @entry(i, i, C.POINTER(C.c_char_p))
        def cuGetErrorString(err, out):
            if err not in ERRORS:
                return 1
            out[0] = ERRORS[err][1]
            return 0

        @entry(i, C.POINTER(vp))
        def cuCtxGetCurrent(out):
            out[0] = self.current_ctx
            return 0

        @entry(i, vp)
        def cuCtxSetCurrent(ctx):
            self.calls.append(("cuCtxSetCurrent", ctx))
            self.current_ctx = ctx
            return 0

        @entry(i, C.POINTER(i), i)
        def cuDeviceGet(out, ordinal):
            self.calls.append(("cuDeviceGet", ordinal))
            out[0] = ordinal
            return 0

        @entry(i, C.POINTER(vp), i)
        def cuDevicePrimaryCtxRetain(out, dev):
            self.calls.append(("cuDevicePrimaryCtxRetain", dev))
            out[0] = PRIMARY_CTX
            return 0

        @entry(i, C.POINTER(vp), vp)
        def cuModuleLoadData(out, image):
            self.calls.append(("cuModuleLoadData", C.string_at(image, 8)))
            out[0] = MODULE
            return 0

        @entry(i, C.POINTER(vp), vp, C.c_char_p)
        def cuModuleGetFunction(out, module, name):
            assert module == MODULE
            out[0] = self.functions.setdefault(name, FUNC_BASE + 0x100 * len(self.functions))
            return 0

        @entry(i, vp, i, i)
        def cuFuncSetAttribute(func, attr, value):
            self.calls.append(("cuFuncSetAttribute", func, attr, value))
            return 0

        @entry(i, vp, u32, u32, u32, u32, u32, u32, u32, vp, vp, vp)
        def cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            x = (C.c_void_p * 5).from_address(extra)
            size = C.c_size_t.from_address(x[3]).value
            self.calls.append(("cuLaunchKernel", f, (gx, gy, gz), (bx, by, bz), smem, stream, params,
                               (x[0] or 0, x[2], x[4] or 0), x[1], C.string_at(x[1], size)))
            return self.launch_results.pop(0) if self.launch_results else 0

        @entry(i, vp, i, u32, vp, C.POINTER(u64), C.POINTER(u64), C.POINTER(u32), C.POINTER(u32), i, i, i, i)
        def cuTensorMapEncodeTiled(out, dtype, rank, addr, dims, strides, box, estr, interleave, swizzle, l2, oob):
            args = (out, dtype, rank, addr, dims[:rank], strides[:rank - 1], box[:rank], estr[:rank], interleave,
                    swizzle, l2, oob)
            self.calls.append(("cuTensorMapEncodeTiled",) + args)
            if self.encode_result:
                return self.encode_result
            C.memmove(out, tensor_map_bytes(*args[1:]), 128)
            return 0


def tensor_map_bytes(dtype, rank, addr, dims, strides, box, estr, *enums) -> bytes:
    """What the fake driver writes: every argument, so the test sees they all arrived intact."""
    words = [dtype, rank, addr, *dims, *strides, *box, *estr, *enums]
    return struct.pack(f"<{len(words)}Q", *words).ljust(128, b"\xee")


@pytest.fixture
def drv():
    return FakeDriver()


@pytest.fixture
def be(drv):
    return launch._CudaBackend(drv)


def launches(drv):
    return [c for c in drv.calls if c[0] == "cuLaunchKernel"]


# A signature of our own (kernels.py's change with the kernels): pointers, a padded i64, an f32.
SIG = kernels.Signature((("a", "ptr"), ("b", "ptr"), ("out", "ptr"), ("bias", "ptr"), ("m", "i32"), ("s", "i64"),
                         ("n", "i32"), ("k", "i32"), ("alpha", "f32")))
ARGS = (0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000, 0, 16, -(2**40), 4096, 4096, 0.5)


def test_arg_buffer_extra_layout():
    a = launch._ArgBuffer(40, (1, 2, 0))
    extra = (C.c_void_p * 5).from_address(a.extra_addr)
    assert [extra[0], extra[1], extra[2], extra[3], extra[4]] == [1, C.addressof(a.buf), 2, C.addressof(a.size),
                                                                  None]
    assert a.size.value == 40 and len(a.buf) == 40
    assert a.extra_ptr.value == a.extra_addr


def test_arg_buffer_is_per_thread():
    a = launch._ArgBuffer(16, (1, 2, 0))
    here = a.extra_addr
    there = []
    t = threading.Thread(target=lambda: there.append((a.extra_addr, C.addressof(a.buf))))
    t.start()
    t.join()
    assert there[0][0] != here and there[0][1] != C.addressof(a.buf)


def test_module_load_and_function(drv, be):
    module = be.load(b"\x7fELF\x00\x01\x02\x03rest")
    assert ("cuModuleLoadData", b"\x7fELF\x00\x01\x02\x03") in drv.calls
    f = be.function(module, "fg_kernel")
    assert isinstance(f, C.c_void_p) and f.value == FUNC_BASE
    assert be.module_ctx[f.value] == PRIMARY_CTX


def test_ensure_context_retains_primary_when_none_current():
    drv = FakeDriver(current_ctx=None)
    be = launch._CudaBackend(drv)
    be.ensure_context(3)
    assert [c for c in drv.calls if c[0] != "cuInit"] == [
        ("cuDeviceGet", 3), ("cuDevicePrimaryCtxRetain", 3), ("cuCtxSetCurrent", PRIMARY_CTX)]
    drv.calls.clear()
    be.ensure_context(3)  # now current: nothing to do
    assert drv.calls == []


def make_kernel(be, name="fg_gemm", sig=SIG):
    return launch.Kernel(be, be.function(be.load(b"image..."), name), name, sig)


def test_launch_packs_extra_and_passes_64bit_handles(drv, be):
    k = make_kernel(be)
    k((256, 2, 1), 256, 1024, STREAM, *ARGS)
    (_, f, grid, block, smem, stream, params, tags, buf_addr, packed), = launches(drv)
    assert f == FUNC_BASE and stream == STREAM and params is None
    assert grid == (256, 2, 1) and block == (256, 1, 1) and smem == 1024
    assert tags == (0x01, 0x02, 0x00)
    assert packed == SIG.struct.pack(*ARGS)
    assert buf_addr == C.addressof(k._args.buf)


def test_bound_launch_matches_the_checked_call(drv, be):
    k = make_kernel(be)
    k((256, 2, 1), (128, 2, 1), 1024, STREAM, *ARGS)
    go = k.bind((256, 2, 1), (1, 1, 1), (128, 2, 1), 1024)
    go(STREAM, *ARGS)
    go(0, *ARGS)
    first, second, third = launches(drv)
    assert first[1:] == second[1:]
    assert third[5] is None and third[1:5] == first[1:5]


def test_bound_launch_with_a_fixed_tail_packs_the_same_bytes(drv, be):
    """bind(tail=...) packs the trailing arguments once; each call packs only the leading ones, into a buffer
    of its own (another kernel's launches must not overwrite the tail)."""
    k = make_kernel(be)
    lead = 2
    go = k.bind((4, 1, 1), (1, 1, 1), 64, 0, tail=ARGS[lead:])
    go(STREAM, *ARGS[:lead])
    k((4, 1, 1), 64, 0, STREAM, *[7] * len(ARGS[:lead]), *ARGS[lead:])  # the kernel's shared buffer moves on
    go(STREAM, *ARGS[:lead])
    bound1, checked, bound2 = launches(drv)
    assert bound1[-1] == bound2[-1] == SIG.struct.pack(*ARGS)
    assert bound1[-2] != checked[-2]  # not the kernel's own buffer
    with pytest.raises(ValueError, match="scalars or pointers"):
        k.bind((4, 1, 1), (1, 1, 1), 64, 0, tail=())  # every parameter 'leading' is fine ...
        k.signature.prefix_struct(len(SIG.params) + 1)  # ... past the end is not


def test_bind_checks_once(drv, be):
    k = make_kernel(be)
    with pytest.raises(TypeError):
        k.bind((2.0, 1, 1), (1, 1, 1), 256, 0)
    with pytest.raises(ValueError, match="whole number of clusters"):
        k.bind((3, 1, 1), (2, 1, 1), 256, 0)
    assert not launches(drv)


@pytest.mark.parametrize("block, dims", [((128, 2, 1), (128, 2, 1)), ([32, 4, 2], (32, 4, 2)), ((64,), (64, 1, 1)),
                                         ((32, 8), (32, 8, 1))])
def test_launch_block_dims(drv, be, block, dims):
    make_kernel(be)((1, 1, 1), block, 0, 0, *ARGS)
    (call,) = launches(drv)
    assert call[3] == dims and call[5] is None  # stream 0 arrives as NULL


def test_launch_bad_block(be):
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        make_kernel(be)((1, 1, 1), (1, 1, 1, 1), 0, 0, *ARGS)


@pytest.mark.parametrize("grid, block, smem", [((2.0, 1, 1), 256, 0), ((2, 1, 1), 256.0, 0), ((2, 1, 1), 256, 0.0),
                                               ((2, 1, 1), (256, 1.0, 1), 0)])
def test_launch_rejects_floats(drv, be, grid, block, smem):
    """The launch call is untyped: a float would reach the driver in a floating-point register."""
    with pytest.raises(TypeError):
        make_kernel(be)(grid, block, smem, 0, *ARGS)
    assert not launches(drv)


def test_launch_accepts_other_integer_types(drv, be):
    np = pytest.importorskip("numpy")
    make_kernel(be)(tuple(np.array([5, 2, 1])), np.int32(128), np.int64(512), 0, *ARGS)
    (call,) = launches(drv)
    assert call[2:5] == ((5, 2, 1), (128, 1, 1), 512)


def test_launch_retries_in_module_context_on_invalid_context(drv, be):
    k = make_kernel(be)
    drv.current_ctx = None  # e.g. autograd's worker thread
    drv.launch_results = [201]
    k((1, 1, 1), 256, 0, STREAM, *ARGS)
    assert ("cuCtxSetCurrent", PRIMARY_CTX) in drv.calls
    first, second = launches(drv)
    assert first[1:] == second[1:]


def test_launch_error_names_the_driver_error(drv, be):
    k = make_kernel(be)
    drv.launch_results = [700]
    with pytest.raises(launch.LaunchError, match="cuLaunchKernel failed: CUDA error 700 .*ILLEGAL_ADDRESS"):
        k((1, 1, 1), 256, 0, STREAM, *ARGS)
    drv.launch_results = [201, 201]  # the retry fails as well
    with pytest.raises(launch.LaunchError, match="INVALID_CONTEXT"):
        k((1, 1, 1), 256, 0, STREAM, *ARGS)
    drv.launch_results = [12345]  # a code the driver has no name for
    with pytest.raises(launch.LaunchError, match="CUDA error 12345 .unknown"):
        k((1, 1, 1), 256, 0, STREAM, *ARGS)


def test_set_max_dynamic_smem_calls_driver_only_when_raised(drv, be):
    k = make_kernel(be)
    k.set_max_dynamic_smem(100_000)
    k.set_max_dynamic_smem(100_000)
    k.set_max_dynamic_smem(50_000)
    k.set_max_dynamic_smem(200_000)
    attrs = [c for c in drv.calls if c[0] == "cuFuncSetAttribute"]
    assert attrs == [("cuFuncSetAttribute", FUNC_BASE, 8, 100_000), ("cuFuncSetAttribute", FUNC_BASE, 8, 200_000)]


TMAP = dict(dtype_code=0, rank=2, global_address=0x7F00_0000_0100, global_dims=(4096, 1024),
            global_strides_bytes=(4096,), box_dims=(128, 64), element_strides=(1, 1), interleave=0, swizzle=3,
            l2_promotion=2, oob_fill=0)


def test_encode_tensor_map_tiled(drv, be, monkeypatch):
    monkeypatch.setitem(launch._BACKENDS, "nvidia", be)
    out = launch.encode_tensor_map_tiled(**TMAP)
    call, = [c for c in drv.calls if c[0] == "cuTensorMapEncodeTiled"]
    assert call[1] % 64 == 0  # CUtensorMap must be 64-byte aligned
    assert call[2:] == (0, 2, 0x7F00_0000_0100, [4096, 1024], [4096], [128, 64], [1, 1], 0, 3, 2, 0)
    assert out == tensor_map_bytes(*call[2:]) and isinstance(out, bytes) and len(out) == 128
    # A second call of another rank reuses the arrays; only `rank` entries count.
    out5 = launch.encode_tensor_map_tiled(0, 5, 0x10, (1, 2, 3, 4, 5), (16, 32, 64, 128), (1, 1, 1, 1, 1),
                                          (1, 1, 1, 1, 1), 0, 0, 0, 0)
    out1 = launch.encode_tensor_map_tiled(0, 1, 0x10, [7], [], [8], [1], 0, 0, 0, 0)
    assert out1 == tensor_map_bytes(0, 1, 0x10, [7], [], [8], [1], 0, 0, 0, 0) and out5 != out1


def test_encode_tensor_map_tiled_errors(drv, be):
    with pytest.raises(ValueError, match="rank 2 .* needs 2 global_dims, 2 - 1 global_strides_bytes"):
        be.encode_tensor_map_tiled(**{**TMAP, "global_strides_bytes": (4096, 4096)})
    with pytest.raises(ValueError, match="needs 2 global_dims"):
        be.encode_tensor_map_tiled(**{**TMAP, "box_dims": (128,)})
    drv.encode_result = 1
    with pytest.raises(launch.LaunchError, match=r"cuTensorMapEncodeTiled failed: CUDA error 1 "
                                                 r"\(CUDA_ERROR_INVALID_VALUE.*address=0x7f0000000100"):
        be.encode_tensor_map_tiled(**TMAP)


def test_encode_tensor_map_tiled_argument_types(drv, be):
    import enum

    np = pytest.importorskip("numpy")

    class Swizzle(enum.IntEnum):
        B128 = 3

    ref = be.encode_tensor_map_tiled(**TMAP)
    assert be.encode_tensor_map_tiled(**{**TMAP, "swizzle": Swizzle.B128, "rank": np.int64(2),
                                         "global_dims": np.array([4096, 1024])}) == ref
    with pytest.raises(TypeError):
        be.encode_tensor_map_tiled(**{**TMAP, "l2_promotion": 2.0})


def test_encode_without_the_symbol(drv):
    del drv.cuTensorMapEncodeTiled  # an old driver: launches still work
    be = launch._CudaBackend(drv)
    with pytest.raises(launch.LaunchError, match="not in this libcuda"):
        be.encode_tensor_map_tiled(**TMAP)


# --- choosing the backend ---------------------------------------------------------------------------------

def _no_libcuda():
    raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")


def test_backend_is_ctypes_when_libcuda_loads(monkeypatch):
    monkeypatch.delenv("FUSEDGEMM_CUDA_DRIVER", raising=False)
    monkeypatch.setattr(launch, "_load_libcuda", FakeDriver)
    assert isinstance(launch._cuda_backend(), launch._CudaBackend)


def test_an_unknown_driver_setting_is_reported(monkeypatch):
    monkeypatch.setenv("FUSEDGEMM_CUDA_DRIVER", "bindigns")
    monkeypatch.setattr(launch, "_load_libcuda", FakeDriver)
    with pytest.warns(RuntimeWarning, match="FUSEDGEMM_CUDA_DRIVER='bindigns' is neither ctypes nor bindings"):
        assert isinstance(launch._cuda_backend(), launch._CudaBackend)


def test_backend_falls_back_to_cuda_bindings(monkeypatch):
    pytest.importorskip("cuda.bindings.driver")
    monkeypatch.delenv("FUSEDGEMM_CUDA_DRIVER", raising=False)
    monkeypatch.setattr(launch, "_load_libcuda", _no_libcuda)
    with pytest.warns(RuntimeWarning, match="through cuda-bindings .*cannot open shared object"):
        be = launch._cuda_backend()
    assert isinstance(be, launch._CudaBindingsBackend) and be.tags == (1, 2, 0)


def test_backend_forced_to_cuda_bindings(monkeypatch, recwarn):
    pytest.importorskip("cuda.bindings.driver")
    monkeypatch.setenv("FUSEDGEMM_CUDA_DRIVER", "bindings")
    monkeypatch.setattr(launch, "_load_libcuda", lambda: pytest.fail("must not load libcuda"))
    assert isinstance(launch._cuda_backend(), launch._CudaBindingsBackend)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_backend_without_libcuda_or_cuda_bindings(monkeypatch):
    monkeypatch.delenv("FUSEDGEMM_CUDA_DRIVER", raising=False)
    monkeypatch.setattr(launch, "_load_libcuda", _no_libcuda)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # makes the import fail
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    with pytest.raises(launch.LaunchError, match="cannot reach the CUDA driver: libcuda.so.1 .*cuda-bindings is "
                                                 "not importable"):
        launch._cuda_backend()


def test_driver_error_at_init_is_not_hidden_by_the_fallback(monkeypatch):
    monkeypatch.delenv("FUSEDGEMM_CUDA_DRIVER", raising=False)
    monkeypatch.setattr(launch, "_load_libcuda", lambda: FakeDriver(init_error=100))
    with pytest.raises(launch.LaunchError, match="cuInit failed: .*NO_DEVICE"):
        launch._cuda_backend()


def test_real_environment_without_libcuda(monkeypatch):
    """On a machine without the driver (CPU CI) the real loader fails and the fallback takes over."""
    try:
        launch._load_libcuda()
    except OSError:
        pass
    else:
        pytest.skip("libcuda.so.1 is present")
    pytest.importorskip("cuda.bindings.driver")
    monkeypatch.delenv("FUSEDGEMM_CUDA_DRIVER", raising=False)
    with pytest.warns(RuntimeWarning):
        assert isinstance(launch._cuda_backend(), launch._CudaBindingsBackend)


# --- the cuda-bindings fallback's launch, against a stand-in for cuda.bindings.driver ----------------------

def test_cuda_bindings_launch_and_retry(monkeypatch):
    real = pytest.importorskip("cuda.bindings.driver")
    be = launch._CudaBindingsBackend()
    calls, results = [], [real.CUresult.CUDA_ERROR_INVALID_CONTEXT]
    fake = types.SimpleNamespace(
        CUresult=real.CUresult,
        cuLaunchKernel=lambda *a: calls.append(("launch",) + a) or ((results.pop(0) if results else
                                                                      real.CUresult.CUDA_SUCCESS),),
        cuCtxSetCurrent=lambda ctx: calls.append(("ctx", ctx)) or (real.CUresult.CUDA_SUCCESS,),
        cuModuleGetFunction=lambda m, n: (real.CUresult.CUDA_SUCCESS, 0xF00),
        cuCtxGetCurrent=lambda: (real.CUresult.CUDA_SUCCESS, 0xC7C),
        cuGetErrorString=lambda e: (real.CUresult.CUDA_SUCCESS, b"an illegal memory access"))
    be.drv = fake
    k = launch.Kernel(be, be.function(0xA, "k"), "k", SIG)
    k((4, 1, 1), (128, 2, 1), 64, STREAM, *ARGS)
    extra = k._args.extra_addr
    assert calls == [("launch", 0xF00, 4, 1, 1, 128, 2, 1, 64, STREAM, None, extra), ("ctx", 0xC7C),
                     ("launch", 0xF00, 4, 1, 1, 128, 2, 1, 64, STREAM, None, extra)]
    assert bytes(k._args.buf) == SIG.struct.pack(*ARGS)
    results.append(real.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS)
    with pytest.raises(launch.LaunchError, match="cuLaunchKernel failed: .*illegal memory access"):
        k((4, 1, 1), 128, 0, 0, *ARGS)


def test_bound_cluster_launch_passes_the_cluster(drv, be, monkeypatch):
    seen = []
    monkeypatch.setattr(be, "launch_cluster", lambda *a: seen.append(a[1:-1] + (bytes(a[-1].buf),)))
    k = make_kernel(be)
    k.bind((8, 3, 4), (1, 1, 4), 160, 99_000)(STREAM, *ARGS)
    (call,) = seen
    assert call[:-1] == (8, 3, 4, 1, 1, 4, 160, 1, 1, 99_000, STREAM)
    assert call[-1][:SIG.struct.size] == SIG.struct.pack(*ARGS)
