"""Load code objects and launch kernels on torch's current stream: CUDA driver API (cuda-bindings) on
NVIDIA, hip-python on ROCm. Per call: pack the arguments into a reused buffer, one driver call. No host
synchronisation, no allocation.
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path

from .arch import device_arch, vendor_of
from .build import code_object_path


class LaunchError(RuntimeError):
    pass


class _ArgBuffer(threading.local):
    """Per-thread packed-argument buffer and the `extra` array that points at it."""

    def __init__(self, size: int, tags: tuple[int, int, int]):
        self.buf = ctypes.create_string_buffer(size)
        self.size = ctypes.c_size_t(size)
        ptr_tag, size_tag, end_tag = tags
        self.extra = (ctypes.c_void_p * 5)(ptr_tag, ctypes.addressof(self.buf), size_tag,
                                           ctypes.addressof(self.size), end_tag)
        self.extra_addr = ctypes.addressof(self.extra)


class _CudaBackend:
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

    def launch(self, func, grid, block, smem: int, stream: int, extra_addr: int):
        err, = self.drv.cuLaunchKernel(func, grid[0], grid[1], grid[2], block, 1, 1, smem, stream, None, extra_addr)
        if err == self.invalid_context:
            # A thread that has not touched this device yet (e.g. autograd's backward worker): make the
            # module's context current and launch again.
            self.check(self.drv.cuCtxSetCurrent(self.module_ctx[int(func)]), "cuCtxSetCurrent")
            err, = self.drv.cuLaunchKernel(func, grid[0], grid[1], grid[2], block, 1, 1, smem, stream, None,
                                           extra_addr)
        if err != self.success:
            self.check((err,), "cuLaunchKernel")


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

    def launch(self, func, grid, block, smem: int, stream: int, extra_addr: int):
        result = self.hip.hipModuleLaunchKernel(func, grid[0], grid[1], grid[2], block, 1, 1, smem, stream, None,
                                                extra_addr)
        self.check(result, "hipModuleLaunchKernel")


_BACKENDS: dict[str, object] = {}
_MODULES: dict[tuple[str, int], "Module"] = {}
_LOCK = threading.Lock()


def backend(vendor: str):
    if vendor not in _BACKENDS:
        _BACKENDS[vendor] = _CudaBackend() if vendor == "nvidia" else _HipBackend()
    return _BACKENDS[vendor]


class Kernel:
    """A loaded kernel with its own per-thread argument buffer. __call__ is the hot path."""

    __slots__ = ("name", "signature", "_func", "_launch", "_pack_into", "_args")

    def __init__(self, be, func, name: str, signature):
        self.name = name
        self.signature = signature
        self._func = func
        self._launch = be.launch
        self._pack_into = signature.struct.pack_into
        self._args = _ArgBuffer(signature.struct.size, be.tags)

    def __call__(self, grid, block: int, smem: int, stream: int, *args):
        """grid (x, y, z), threads per block, dynamic shared-memory bytes, stream handle, kernel arguments."""
        a = self._args
        self._pack_into(a.buf, 0, *args)
        self._launch(self._func, grid, block, smem, stream, a.extra_addr)


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


def module_for(unit: str, device_index: int) -> Module:
    """The loaded code object of `unit` for device `device_index`, built on first use if needed."""
    key = (unit, device_index)
    mod = _MODULES.get(key)
    if mod is None:
        with _LOCK:
            mod = _MODULES.get(key)
            if mod is None:
                arch = device_arch(device_index)
                mod = _MODULES[key] = Module(code_object_path(unit, arch), vendor_of(arch), device_index)
    return mod
