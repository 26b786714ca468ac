"""Load code objects and launch kernels on torch's current stream: the CUDA driver (libcuda.so.1) through
ctypes on NVIDIA, hip-python on ROCm. Per call: pack the arguments into a reused buffer, one driver call. No
host synchronisation, no allocation.

Why ctypes and not cuda-bindings on NVIDIA: cuda-bindings spends most of a decode-size call's host time wrapping
cuLaunchKernel's arguments; a ctypes foreign call with pre-converted arguments does not (docs/perf-notes.md). When
libcuda.so.1 cannot be loaded through ctypes (or FUSEDGEMM_CUDA_DRIVER=bindings), cuda-bindings is used.

Also here: encode_tensor_map_tiled (cuTensorMapEncodeTiled) for TMA kernels.
"""
from __future__ import annotations

import ctypes
import operator
import os
import struct
import threading
import warnings
from pathlib import Path

from .arch import device_arch, vendor_of
from .build import code_object_path
from .compilers import warn_once


class LaunchError(RuntimeError):
    pass


# cuda.h values (stable ABI).
_CU_LAUNCH_PARAM_TAGS = (0x01, 0x02, 0x00)  # BUFFER_POINTER, BUFFER_SIZE, END
_CUDA_ERROR_INVALID_CONTEXT = 201
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap), which must be 64-byte aligned
_TENSOR_MAP_MAX_RANK = 5

_VoidP = ctypes.c_void_p
_PVoidP = ctypes.POINTER(ctypes.c_void_p)

# (argtypes) of the driver functions off the hot path; all return CUresult (C int, ctypes' default restype).
# cuLaunchKernel and cuTensorMapEncodeTiled are deliberately left without argtypes: ctypes then converts
# no argument in Python (declared argtypes run a from_param converter per argument per call). Their call sites
# pass every pointer as a c_void_p or ctypes array object and only 32-bit values as Python ints, which
# ctypes passes as C int -- the ABI of the unsigned int / enum / cuuint32_t parameters they fill.
_PROTOTYPES = {
    "cuInit": (ctypes.c_uint,),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuGetErrorString": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuCtxGetCurrent": (_PVoidP,),
    "cuCtxSetCurrent": (_VoidP,),
    "cuDeviceGet": (ctypes.POINTER(ctypes.c_int), ctypes.c_int),
    "cuDevicePrimaryCtxRetain": (_PVoidP, ctypes.c_int),
    "cuModuleLoadData": (_PVoidP, ctypes.c_char_p),
    "cuModuleGetFunction": (_PVoidP, _VoidP, ctypes.c_char_p),
    "cuFuncSetAttribute": (_VoidP, ctypes.c_int, ctypes.c_int),
}


_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value union (clusterDim = 3 x uint first)."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig of cuLaunchKernelEx."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


class _ClusterLaunch(threading.local):
    """Per-thread launch config with one cluster-dimension attribute, reused by every cluster launch."""

    def __init__(self):
        self.attr = _LaunchAttribute()
        self.attr.id = _CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        self.config = _LaunchConfig()
        self.config.attrs = ctypes.pointer(self.attr)
        self.config.numAttrs = 1
        self.config_ptr = ctypes.c_void_p(ctypes.addressof(self.config))


class _ArgBuffer(threading.local):
    """Per-thread packed-argument buffer and the `extra` array that points at it."""

    def __init__(self, size: int, tags: tuple[int, int, int]):
        self.buf = ctypes.create_string_buffer(size)
        self.size = ctypes.c_size_t(size)
        ptr_tag, size_tag, end_tag = tags
        self.extra = (ctypes.c_void_p * 5)(ptr_tag, ctypes.addressof(self.buf), size_tag,
                                           ctypes.addressof(self.size), end_tag)
        self.extra_addr = ctypes.addressof(self.extra)
        self.extra_ptr = ctypes.c_void_p(self.extra_addr)  # pre-converted for the ctypes launch


class _BoundArgBuffer(_ArgBuffer):
    """A bound launch's per-thread buffer with its fixed trailing arguments packed in (the leading ones are
    zeros until the first call packs them)."""

    def __init__(self, full: "struct.Struct", lead: int, tail: tuple, tags: tuple[int, int, int]):
        super().__init__(full.size, tags)
        full.pack_into(self.buf, 0, *((0,) * lead), *tail)


class _TensorMapArgs(threading.local):
    """Per-thread arrays for cuTensorMapEncodeTiled, reused by every call, and a 64-byte-aligned output."""

    def __init__(self):
        self.raw = ctypes.create_string_buffer(_TENSOR_MAP_BYTES + 63)
        self.out_addr = (ctypes.addressof(self.raw) + 63) & ~63
        self.out_ptr = ctypes.c_void_p(self.out_addr)
        self.dims = (ctypes.c_uint64 * _TENSOR_MAP_MAX_RANK)()
        self.strides = (ctypes.c_uint64 * (_TENSOR_MAP_MAX_RANK - 1))()
        self.box = (ctypes.c_uint32 * _TENSOR_MAP_MAX_RANK)()
        self.elem_strides = (ctypes.c_uint32 * _TENSOR_MAP_MAX_RANK)()


def _tensor_map_arg_error(rank, global_dims, global_strides_bytes, box_dims, element_strides) -> ValueError:
    return ValueError(
        f"encode_tensor_map_tiled: rank {rank} (1..{_TENSOR_MAP_MAX_RANK}) needs {rank} global_dims, "
        f"{rank} - 1 global_strides_bytes, {rank} box_dims and {rank} element_strides, got {global_dims!r}, "
        f"{global_strides_bytes!r}, {box_dims!r}, {element_strides!r}")


def _load_libcuda():
    return ctypes.CDLL("libcuda.so.1")


class _CudaBackend:
    """The driver API through ctypes. Function handles are c_void_p objects (passed without conversion)."""

    tags = _CU_LAUNCH_PARAM_TAGS

    def __init__(self, lib):
        for name, argtypes in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            setattr(self, name, fn)
        # Own function pointers (not the CDLL's cached, shareable attributes) so argtypes stay unset.
        untyped = ctypes.CFUNCTYPE(ctypes.c_int)
        self.cuLaunchKernel = untyped(ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value)
        launch_ex = getattr(lib, "cuLaunchKernelEx", None)  # CUDA 12+: clusters
        self.cuLaunchKernelEx = None if launch_ex is None else untyped(ctypes.cast(launch_ex, ctypes.c_void_p).value)
        self.cluster_launch = _ClusterLaunch()
        encode = getattr(lib, "cuTensorMapEncodeTiled", None)  # absent before driver 12.0: launches still work
        self.cuTensorMapEncodeTiled = None if encode is None else untyped(ctypes.cast(encode, ctypes.c_void_p).value)
        self.tmap_args = _TensorMapArgs()
        self.module_ctx: dict[int, int] = {}  # function handle -> the context its module was loaded in
        self.check(self.cuInit(0), "cuInit")  # idempotent; torch has normally done it already

    def error_string(self, err: int) -> str:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.cuGetErrorName(err, ctypes.byref(name))
        self.cuGetErrorString(err, ctypes.byref(text))
        return f"CUDA error {err} ({(name.value or b'unknown').decode()}: {(text.value or b'?').decode()})"

    def check(self, err: int, what: str):
        if err:
            raise LaunchError(f"{what} failed: {self.error_string(err)}")

    def ensure_context(self, device_index: int):
        ctx = ctypes.c_void_p()
        self.check(self.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            dev = ctypes.c_int()
            self.check(self.cuDeviceGet(ctypes.byref(dev), device_index), "cuDeviceGet")
            self.check(self.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
            self.check(self.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def load(self, image: bytes):
        module = ctypes.c_void_p()
        self.check(self.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")  # copies the image
        return module

    def function(self, module, name: str):
        func, ctx = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.cuModuleGetFunction(ctypes.byref(func), module, name.encode()),
                   f"cuModuleGetFunction({name})")
        self.check(self.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        self.module_ctx[func.value] = ctx.value
        return func

    def set_max_dynamic_smem(self, func, nbytes: int):
        self.check(self.cuFuncSetAttribute(func, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
                   f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes})")

    def launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, args: _ArgBuffer):
        err = self.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, smem, _VoidP(stream), None, args.extra_ptr)
        if err:
            self._launch_failed(err, func, (func, gx, gy, gz, bx, by, bz, smem, _VoidP(stream), None,
                                             args.extra_ptr))

    def launch_cluster(self, func, gx, gy, gz, cx, cy, cz, bx, by, bz, smem, stream, args: _ArgBuffer):
        """cuLaunchKernelEx with a cluster-dimension attribute (thread-block clusters, sm_90)."""
        if self.cuLaunchKernelEx is None:
            raise LaunchError("cuLaunchKernelEx is not in this libcuda (cluster launches need a CUDA 12 driver)")
        lc = self.cluster_launch
        c = lc.config
        c.gridDimX, c.gridDimY, c.gridDimZ = gx, gy, gz
        c.blockDimX, c.blockDimY, c.blockDimZ = bx, by, bz
        c.sharedMemBytes, c.hStream = smem, stream
        v = lc.attr.value
        v[0], v[1], v[2] = cx, cy, cz
        err = self.cuLaunchKernelEx(lc.config_ptr, func, None, args.extra_ptr)
        if err:
            self._launch_failed(err, func, (lc.config_ptr, func, None, args.extra_ptr), self.cuLaunchKernelEx)

    def _launch_failed(self, err: int, func, call_args, launch_fn=None):
        launch_fn = launch_fn or self.cuLaunchKernel
        if err == _CUDA_ERROR_INVALID_CONTEXT:
            # A thread that has not touched this device yet (e.g. autograd's backward worker): make the
            # module's context current and launch again.
            self.check(self.cuCtxSetCurrent(self.module_ctx[func.value]), "cuCtxSetCurrent")
            err = launch_fn(*call_args)
        self.check(err, "cuLaunchKernel" if launch_fn is self.cuLaunchKernel else "cuLaunchKernelEx")

    def encode_tensor_map_tiled(self, dtype_code, rank, global_address, global_dims, global_strides_bytes, box_dims,
                                element_strides, interleave, swizzle, l2_promotion, oob_fill) -> bytes:
        if self.cuTensorMapEncodeTiled is None:
            raise LaunchError("cuTensorMapEncodeTiled is not in this libcuda (needs an R525+ driver, CUDA 12)")
        if not (dtype_code.__class__ is int and rank.__class__ is int and interleave.__class__ is int
                and swizzle.__class__ is int and l2_promotion.__class__ is int and oob_fill.__class__ is int):
            # Untyped call (see _PROTOTYPES): only Python ints may reach it (IntEnums, numpy ints converted).
            dtype_code, rank, interleave, swizzle, l2_promotion, oob_fill = map(
                operator.index, (dtype_code, rank, interleave, swizzle, l2_promotion, oob_fill))
        a = self.tmap_args
        try:  # slice assignment also checks each length against rank
            a.dims[:rank] = global_dims
            a.strides[:rank - 1] = global_strides_bytes
            a.box[:rank] = box_dims
            a.elem_strides[:rank] = element_strides
        except (ValueError, TypeError) as e:
            raise _tensor_map_arg_error(rank, global_dims, global_strides_bytes, box_dims, element_strides) from e
        err = self.cuTensorMapEncodeTiled(a.out_ptr, dtype_code, rank, _VoidP(global_address), a.dims, a.strides,
                                          a.box, a.elem_strides, interleave, swizzle, l2_promotion, oob_fill)
        if err:
            addr = hex(global_address) if isinstance(global_address, int) else repr(global_address)
            raise LaunchError(
                f"cuTensorMapEncodeTiled failed: {self.error_string(err)}; dtype={dtype_code} rank={rank} "
                f"address={addr} dims={tuple(global_dims)} strides={tuple(global_strides_bytes)} "
                f"box={tuple(box_dims)} element_strides={tuple(element_strides)} interleave={interleave} "
                f"swizzle={swizzle} l2_promotion={l2_promotion} oob_fill={oob_fill}")
        return ctypes.string_at(a.out_addr, _TENSOR_MAP_BYTES)


class _CudaBindingsBackend:
    """The driver API through cuda-bindings: the fallback (slower per launch; see the module docstring)."""

    def __init__(self):
        from cuda.bindings import driver

        self.drv = driver
        self.tags = (int(driver.CU_LAUNCH_PARAM_BUFFER_POINTER), int(driver.CU_LAUNCH_PARAM_BUFFER_SIZE),
                     int(driver.CU_LAUNCH_PARAM_END))
        self.success = driver.CUresult.CUDA_SUCCESS
        self.invalid_context = driver.CUresult.CUDA_ERROR_INVALID_CONTEXT
        self.module_ctx: dict[int, object] = {}  # function handle -> the context its module was loaded in

    def check(self, result, what: str):
        err = result[0]
        if err != self.success:
            _, msg = self.drv.cuGetErrorString(err)
            raise LaunchError(f"{what} failed: {err!r} {msg.decode() if isinstance(msg, bytes) else msg}")
        return result[1] if len(result) == 2 else result[1:]

    def ensure_context(self, device_index: int):
        drv = self.drv
        ctx = self.check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(ctx) == 0:
            dev = self.check(drv.cuDeviceGet(device_index), "cuDeviceGet")
            ctx = self.check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            self.check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def load(self, image: bytes):
        return self.check(self.drv.cuModuleLoadData(image), "cuModuleLoadData")

    def function(self, module, name: str):
        func = self.check(self.drv.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
        self.module_ctx[int(func)] = self.check(self.drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        return func

    def set_max_dynamic_smem(self, func, nbytes: int):
        attr = self.drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.check(self.drv.cuFuncSetAttribute(func, attr, nbytes),
                   f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes})")

    def launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, args: _ArgBuffer):
        err, = self.drv.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, smem, stream, None, args.extra_addr)
        if err == self.invalid_context:
            # See _CudaBackend._launch_failed.
            self.check(self.drv.cuCtxSetCurrent(self.module_ctx[int(func)]), "cuCtxSetCurrent")
            err, = self.drv.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, smem, stream, None, args.extra_addr)
        if err != self.success:
            self.check((err,), "cuLaunchKernel")

    def launch_cluster(self, func, gx, gy, gz, cx, cy, cz, bx, by, bz, smem, stream, args: _ArgBuffer):
        d = self.drv
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bx, by, bz
        cfg.sharedMemBytes, cfg.hStream = smem, d.CUstream(stream)
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cx, cy, cz
        cfg.attrs, cfg.numAttrs = [attr], 1
        err, = d.cuLaunchKernelEx(cfg, func, None, args.extra_addr)
        if err == self.invalid_context:
            self.check(d.cuCtxSetCurrent(self.module_ctx[int(func)]), "cuCtxSetCurrent")
            err, = d.cuLaunchKernelEx(cfg, func, None, args.extra_addr)
        if err != self.success:
            self.check((err,), "cuLaunchKernelEx")

    def encode_tensor_map_tiled(self, dtype_code, rank, global_address, global_dims, global_strides_bytes, box_dims,
                                element_strides, interleave, swizzle, l2_promotion, oob_fill) -> bytes:
        d = self.drv
        if not (len(global_dims) == len(box_dims) == len(element_strides) == rank
                and len(global_strides_bytes) == rank - 1):
            raise _tensor_map_arg_error(rank, global_dims, global_strides_bytes, box_dims, element_strides)
        u32, u64 = d.cuuint32_t, d.cuuint64_t  # cuda-bindings wants its own integer wrappers (a plain int: TypeError)
        tmap = self.check(d.cuTensorMapEncodeTiled(
            d.CUtensorMapDataType(dtype_code), u32(rank), global_address, [u64(x) for x in global_dims],
            [u64(x) for x in global_strides_bytes], [u32(x) for x in box_dims], [u32(x) for x in element_strides],
            d.CUtensorMapInterleave(interleave),
            d.CUtensorMapSwizzle(swizzle), d.CUtensorMapL2promotion(l2_promotion),
            d.CUtensorMapFloatOOBfill(oob_fill)), "cuTensorMapEncodeTiled")
        return ctypes.string_at(tmap.getPtr(), _TENSOR_MAP_BYTES)


class _HipBackend:
    def __init__(self):
        from hip import hip

        self.hip = hip
        self.tags = (int(hip.HIP_LAUNCH_PARAM_BUFFER_POINTER), int(hip.HIP_LAUNCH_PARAM_BUFFER_SIZE),
                     int(hip.HIP_LAUNCH_PARAM_END))
        self.success = hip.hipError_t.hipSuccess

    def check(self, result, what: str):
        err = result[0] if isinstance(result, tuple) else result
        if err != self.success:
            raise LaunchError(f"{what} failed: {err!r}")
        return result[1] if isinstance(result, tuple) and len(result) == 2 else None

    def ensure_context(self, device_index: int):
        pass  # HIP modules are per device; torch has made the device current

    def load(self, image: bytes):
        return self.check(self.hip.hipModuleLoadData(image), "hipModuleLoadData")

    def function(self, module, name: str):
        return self.check(self.hip.hipModuleGetFunction(module, name.encode()), f"hipModuleGetFunction({name})")

    def set_max_dynamic_smem(self, func, nbytes: int):
        pass  # AMD needs no opt-in: a launch may use all of the CU's LDS

    def launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, args: _ArgBuffer):
        result = self.hip.hipModuleLaunchKernel(func, gx, gy, gz, bx, by, bz, smem, stream, None, args.extra_addr)
        self.check(result, "hipModuleLaunchKernel")


def _cuda_backend():
    """ctypes on libcuda.so.1; cuda-bindings when that cannot be loaded or FUSEDGEMM_CUDA_DRIVER=bindings."""
    setting = os.environ.get("FUSEDGEMM_CUDA_DRIVER", "")
    if setting.lower() not in ("", "ctypes", "bindings"):
        warn_once(f"FUSEDGEMM_CUDA_DRIVER={setting!r} is neither ctypes nor bindings; using ctypes (libcuda.so.1)")
    forced = setting.lower() == "bindings"
    why = "FUSEDGEMM_CUDA_DRIVER=bindings"
    if not forced:
        try:
            return _CudaBackend(_load_libcuda())
        except (OSError, AttributeError) as e:  # no libcuda.so.1 / a symbol missing (not: a driver error)
            why = f"libcuda.so.1 could not be used through ctypes ({e})"
    try:
        be = _CudaBindingsBackend()
    except ImportError as e:
        raise LaunchError(f"fusedgemm cannot reach the CUDA driver: {why}, and cuda-bindings is not importable "
                          f"({e}); install the NVIDIA driver, or `pip install cuda-bindings`") from e
    if not forced:
        warnings.warn(f"fusedgemm: launching through cuda-bindings (more host time per call): {why}",
                      RuntimeWarning, stacklevel=3)
    return be


_BACKENDS: dict[str, object] = {}
_MODULES: dict[tuple[str, int], "Module"] = {}
_LOCK = threading.Lock()


def backend(vendor: str):
    be = _BACKENDS.get(vendor)
    if be is None:
        be = _BACKENDS[vendor] = _cuda_backend() if vendor == "nvidia" else _HipBackend()
    return be


def _dim3(v) -> tuple[int, int, int]:
    """An int or 1 to 3 ints (any integer type; a float is a TypeError) -> (x, y, z) of Python ints."""
    if hasattr(v, "__index__"):
        return operator.index(v), 1, 1
    t = tuple(map(operator.index, v))
    if not 1 <= len(t) <= 3:
        raise ValueError(f"a block or grid has 1 to 3 dimensions, got {v!r}")
    return t + (1,) * (3 - len(t))


class Kernel:
    """A loaded kernel with its own per-thread argument buffer. __call__ is the hot path."""

    __slots__ = ("name", "signature", "_func", "_be", "_launch", "_pack_into", "_args", "_max_smem")

    def __init__(self, be, func, name: str, signature):
        self.name = name
        self.signature = signature
        self._func = func
        self._be = be
        self._launch = be.launch
        self._pack_into = signature.struct.pack_into
        self._args = _ArgBuffer(signature.struct.size, be.tags)
        self._max_smem = 0

    def set_max_dynamic_smem(self, nbytes: int) -> None:
        """Allow launches with up to `nbytes` of dynamic shared memory (NVIDIA needs this opt-in above 48 KB).
        The driver is called only when the limit rises: a repeat or a smaller value is a no-op."""
        if nbytes > self._max_smem:
            self._be.set_max_dynamic_smem(self._func, nbytes)
            self._max_smem = nbytes

    def __call__(self, grid, block, smem: int, stream: int, *args):
        """grid (x, y, z); block: threads per block or (x, y, z); dynamic shared-memory bytes; stream handle;
        kernel arguments in signature order."""
        a = self._args
        self._pack_into(a.buf, 0, *args)
        gx, gy, gz = grid
        bx, by, bz = (block, 1, 1) if block.__class__ is int else _dim3(block)
        if not (gx.__class__ is int and gy.__class__ is int and gz.__class__ is int and smem.__class__ is int):
            # The ctypes launch is untyped: a float here would be passed in a floating-point register.
            (gx, gy, gz), smem = _dim3(grid), operator.index(smem)
        self._launch(self._func, gx, gy, gz, bx, by, bz, smem, stream, a)

    def launch_cluster(self, grid, cluster, block: int, smem: int, stream: int, *args):
        """Launch as thread-block clusters of `cluster` = (x, y, z) CTAs (each grid dimension a multiple of
        the cluster's). A cluster of one CTA is an ordinary launch. NVIDIA sm_90 only."""
        if cluster == (1, 1, 1):
            return self(grid, block, smem, stream, *args)
        a = self._args
        self._pack_into(a.buf, 0, *args)
        (gx, gy, gz), (cx, cy, cz), (bx, by, bz) = _dim3(grid), _dim3(cluster), _dim3(block)
        if gx % cx or gy % cy or gz % cz:
            raise ValueError(f"grid {grid} is not a whole number of clusters {cluster}")
        self._be.launch_cluster(self._func, gx, gy, gz, cx, cy, cz, bx, by, bz, operator.index(smem), stream, a)

    def bind(self, grid, cluster, block, smem: int, tail: tuple | None = None):
        """-> launch(stream, *args): this kernel with a fixed grid, cluster, block and shared memory, checked
        once here, so a repeated call does only the packing and the driver call (the eager hot path).
        With `tail` (the values of the last len(tail) flat arguments), those are packed once into the bound
        launch's own buffer and launch takes only the leading arguments: a call packs three pointers, not the
        twenty-odd sizes and strides behind them."""
        (gx, gy, gz), (cx, cy, cz), (bx, by, bz) = _dim3(grid), _dim3(cluster), _dim3(block)
        smem = operator.index(smem)
        if gx % cx or gy % cy or gz % cz:
            raise ValueError(f"grid {grid} is not a whole number of clusters {cluster}")
        be, func, pack_into, buffers = self._be, self._func, self._pack_into, self._args  # buffers: per thread
        if tail is not None:
            lead = len(self.signature.flat_names) - len(tail)
            pack_into, buffers = self.signature.prefix_struct(lead).pack_into, _BoundArgBuffer(
                self.signature.struct, lead, tuple(tail), be.tags)
        raw = getattr(be, "cuLaunchKernel", None)  # ctypes: call the driver from here (one frame less)
        if (cx, cy, cz) == (1, 1, 1) and raw is not None:
            be_launch = be.launch

            def launch(stream: int, *args):
                b = buffers
                pack_into(b.buf, 0, *args)
                if raw(func, gx, gy, gz, bx, by, bz, smem, _VoidP(stream), None, b.extra_ptr):
                    be_launch(func, gx, gy, gz, bx, by, bz, smem, stream, b)  # not launched: retry or raise
        elif (cx, cy, cz) == (1, 1, 1):
            be_launch = be.launch

            def launch(stream: int, *args):
                pack_into(buffers.buf, 0, *args)
                be_launch(func, gx, gy, gz, bx, by, bz, smem, stream, buffers)
        else:
            be_launch_cluster = be.launch_cluster

            def launch(stream: int, *args):
                pack_into(buffers.buf, 0, *args)
                be_launch_cluster(func, gx, gy, gz, cx, cy, cz, bx, by, bz, smem, stream, buffers)
        return launch


class Module:
    def __init__(self, path: Path, vendor: str, device_index: int):
        self.path = path
        self._be = backend(vendor)
        self._be.ensure_context(device_index)
        self._module = self._be.load(path.read_bytes())
        self._kernels: dict[str, Kernel] = {}

    def kernel(self, name: str, signature) -> Kernel:
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = Kernel(self._be, self._be.function(self._module, name), name, signature)
        return k


def module_for(unit: str, device_index: int, source: str | None = None) -> Module:
    """The loaded code object of `unit` for device `device_index`, built on first use if needed. `source`: the
    text of a generated translation unit (unit is then its spec-derived name; see runtime/build.py)."""
    key = (unit, device_index)
    mod = _MODULES.get(key)
    if mod is None:
        with _LOCK:
            mod = _MODULES.get(key)
            if mod is None:
                arch = device_arch(device_index)
                mod = _MODULES[key] = Module(code_object_path(unit, arch, source), vendor_of(arch), device_index)
    return mod


def encode_tensor_map_tiled(dtype_code: int, rank: int, global_address: int, global_dims, global_strides_bytes,
                            box_dims, element_strides, interleave: int, swizzle: int, l2_promotion: int,
                            oob_fill: int) -> bytes:
    """cuTensorMapEncodeTiled -> the 128 bytes of the CUtensorMap, to pass by value as a __grid_constant__
    kernel parameter (the caller packs them; the map was encoded at a 64-byte-aligned address).

    global_dims, box_dims, element_strides: `rank` entries, innermost dimension first; global_strides_bytes:
    rank - 1 entries, the byte strides of dimensions 1.. . Enums as the ints of cuda.h: dtype UINT8=0;
    interleave NONE=0; swizzle NONE=0, 32B=1, 64B=2, 128B=3; l2_promotion NONE=0, 64B=1, 128B=2, 256B=3;
    oob_fill NONE=0. Host-only (no stream, no sync); raises LaunchError with the driver's message."""
    return backend("nvidia").encode_tensor_map_tiled(dtype_code, rank, global_address, global_dims,
                                                     global_strides_bytes, box_dims, element_strides, interleave,
                                                     swizzle, l2_promotion, oob_fill)
