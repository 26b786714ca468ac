"""An emulated HIP backend: the subset of hip-python's `hip.hip` module that runtime/launch.py calls
(hipModuleLoadData, hipModuleGetFunction, hipModuleLaunchKernel with the packed `extra` argument buffer,
HIP_LAUNCH_PARAM_*, hipError_t), executing every launch in the emulator on CPU memory.

Kernel arguments hold host addresses of CPU tensors. The buffers a launch may touch are the storages of the
live CPU tensors that contain an address its argument buffer holds (found through the garbage collector's list
of tensors), plus anything registered with EmulatedDevice.register: an access outside them is a MemoryFault
naming the kernel, the instruction and the address.
"""
from __future__ import annotations

import ctypes
import enum
import gc
import hashlib
import itertools
import struct
import types
import weakref
from pathlib import Path

from . import codeobjects
from .errors import LaunchError, LoadError
from .loader import load_kernel, object_arch
from .machine import Machine, Stats
from .memory import Memory

HIP_LAUNCH_PARAM_BUFFER_POINTER = 0x01
HIP_LAUNCH_PARAM_BUFFER_SIZE = 0x02
HIP_LAUNCH_PARAM_END = 0x03


class hipError_t(enum.IntEnum):  # noqa: N801  (hip-python's spelling)
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorInvalidImage = 200
    hipErrorNotFound = 500
    hipErrorLaunchFailure = 719


class _Module:
    def __init__(self, data: bytes, listing: str | None, where: str):
        self.data, self.listing, self.where = data, listing, where
        self.arch = object_arch(data)


class _Function:
    def __init__(self, module: _Module, kernel):
        self.module, self.kernel = module, kernel


class EmulatedDevice:
    """One emulated AMD device: its arch, the code objects the package built (image hash -> path), stats, and
    the error of the last failed call (hip-python returns error codes; the launcher raises from them)."""

    def __init__(self, arch: str, mfma=None, race_check: bool = True, lds_fence_check: bool = True):
        self.arch = arch
        self.lds_fence_check = lds_fence_check
        self.mfma = mfma
        self.race_check = race_check
        self.paths: dict[str, Path] = {}
        self.stats = Stats()
        self.launches: list[tuple[str, tuple, tuple]] = []
        self.last_error: Exception | None = None
        self.extra_buffers: list = []

    # -- where images come from --
    def remember(self, path: Path) -> None:
        try:
            self.paths[hashlib.sha256(Path(path).read_bytes()).hexdigest()] = Path(path)
        except OSError:
            pass

    def _listing_for(self, data: bytes) -> tuple[str | None, str]:
        h = hashlib.sha256(data).hexdigest()
        path = self.paths.get(h)
        if path is None:  # search the build cache for the same bytes
            for p in sorted(codeobjects.cache_root().glob(f"{object_arch(data)}/*/*.hsaco")):
                if p.stat().st_size == len(data) and p.read_bytes() == data:
                    path = self.paths[h] = p
                    break
        if path is None:
            return None, "an image the package did not build"
        lst = codeobjects.listing_of(path)
        return (lst.read_text() if lst else None), str(path)

    def register(self, *tensors) -> None:
        """Buffers a launch may use besides those found through its arguments."""
        self.extra_buffers.extend(tensors)

    # -- the hip.hip functions --
    def hipModuleLoadData(self, image):  # noqa: N802
        data = bytes(image)
        try:
            arch = object_arch(data)
            if arch != self.arch:
                raise LoadError(f"hipModuleLoadData: a code object for {arch} on an emulated {self.arch} device")
            listing, where = self._listing_for(data)
            return hipError_t.hipSuccess, _Module(data, listing, where)
        except Exception as e:  # noqa: BLE001
            self.last_error = e
            raise

    def hipModuleGetFunction(self, module: _Module, name):  # noqa: N802
        name = name.decode() if isinstance(name, bytes) else str(name)
        return hipError_t.hipSuccess, _Function(module, load_kernel(module.data, name, module.listing,
                                                                    where=module.where))

    def hipModuleLaunchKernel(self, func: _Function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        if params not in (None, 0):
            raise LaunchError("hipModuleLaunchKernel: kernelParams is not supported by the emulator (pass extra)")
        kernarg = _read_extra(int(extra))
        mem = Memory()
        _register_buffers(mem, kernarg, self.extra_buffers)
        mach = Machine(mem, mfma=self.mfma, race_check=self.race_check, lds_fence_check=self.lds_fence_check)
        mach.launch(func.kernel, (gx, gy, gz), (bx, by, bz), kernarg, dynamic_lds=int(smem), stats=self.stats,
                    arch=self.arch)
        self.launches.append((func.kernel.name, (gx, gy, gz), (bx, by, bz)))
        return (hipError_t.hipSuccess,)

    def module(self) -> types.ModuleType:
        """A stand-in for hip-python's `hip.hip` bound to this device."""
        m = types.ModuleType("hip.hip")
        m.HIP_LAUNCH_PARAM_BUFFER_POINTER = HIP_LAUNCH_PARAM_BUFFER_POINTER
        m.HIP_LAUNCH_PARAM_BUFFER_SIZE = HIP_LAUNCH_PARAM_BUFFER_SIZE
        m.HIP_LAUNCH_PARAM_END = HIP_LAUNCH_PARAM_END
        m.hipError_t = hipError_t
        m.hipModuleLoadData = self.hipModuleLoadData
        m.hipModuleGetFunction = self.hipModuleGetFunction
        m.hipModuleLaunchKernel = self.hipModuleLaunchKernel
        m.emulated_device = self
        return m


def _read_extra(extra: int) -> bytes:
    """The argument bytes an `extra` array points at: {BUFFER_POINTER, p, BUFFER_SIZE, &size, END}."""
    if not extra:
        raise LaunchError("hipModuleLaunchKernel: no extra argument buffer")
    buf = size = None
    for i in range(0, 16, 2):
        tag = ctypes.c_void_p.from_address(extra + 8 * i).value or 0
        if tag == HIP_LAUNCH_PARAM_END:
            break
        val = ctypes.c_void_p.from_address(extra + 8 * (i + 1)).value or 0
        if tag == HIP_LAUNCH_PARAM_BUFFER_POINTER:
            buf = val
        elif tag == HIP_LAUNCH_PARAM_BUFFER_SIZE:
            size = ctypes.c_size_t.from_address(val).value
        else:
            raise LaunchError(f"hipModuleLaunchKernel: unknown extra tag {tag}")
    if buf is None or size is None:
        raise LaunchError("hipModuleLaunchKernel: extra lacks the buffer pointer or size")
    return ctypes.string_at(buf, size)


def _is_tensor(o, tensor_type) -> bool:
    """isinstance that survives gc's dead weakref proxies (left by torch.compile), which raise on any access."""
    try:
        return isinstance(o, tensor_type)
    except ReferenceError:
        return False


# Built-in types whose instances report their own type as __class__ (generic attribute lookup finds object's
# __class__ descriptor first): isinstance(o, torch.Tensor) is False for every one of them without asking.
_PLAIN_BUILTINS = frozenset({tuple, list, dict, set, frozenset, type, types.FunctionType, types.CellType,
                             types.BuiltinFunctionType, types.MethodDescriptorType, types.GetSetDescriptorType,
                             types.WrapperDescriptorType, types.MemberDescriptorType, types.ClassMethodDescriptorType,
                             types.ModuleType, types.CodeType, types.MethodType, types.MappingProxyType,
                             types.GenericAlias, property, staticmethod, classmethod, weakref.ref})


def _class_is_own_type(t: type) -> bool:
    """Whether o.__class__ is type(o) for every instance o of t: no class of its MRO (besides the plain built-ins)
    redefines __class__ or attribute lookup (a weakref proxy, a mock with a spec, ... must be asked one by one)."""
    for c in t.__mro__:
        if c is object or c in _PLAIN_BUILTINS:
            continue
        d = c.__dict__
        if "__class__" in d or "__getattribute__" in d:
            return False
    return True


class _MaybeTensorType(dict):
    """type -> whether its instances need a look: True for torch.Tensor's subclasses and for the types whose
    instances may claim another __class__; decided on the first instance of each type."""

    def __init__(self, tensor_type):
        super().__init__()
        self.tensor_type = tensor_type

    def __missing__(self, t):
        v = self[t] = issubclass(t, self.tensor_type) or not _class_is_own_type(t)
        return v


def _tensors_among(objs, tensor_type) -> list:
    """[o for o in objs if _is_tensor(o, tensor_type)], in order -- with the per-object Python call only for the
    objects whose type may hold tensors (a test session holds ~10^6 gc-tracked objects of a few thousand types)."""
    if type(tensor_type).__instancecheck__ is not type.__instancecheck__:
        return [o for o in objs if _is_tensor(o, tensor_type)]  # a metaclass that decides itself: ask everyone
    maybe = itertools.compress(objs, map(_MaybeTensorType(tensor_type).__getitem__, map(type, objs)))
    return [o for o in maybe if _is_tensor(o, tensor_type)]


def _live_cpu_storages():
    import torch

    import warnings

    seen = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        objs = _tensors_among(gc.get_objects(), torch.Tensor)
    for o in objs:
        try:
            if o.device.type != "cpu":
                continue
            st = o.untyped_storage()
            ptr, n = st.data_ptr(), st.nbytes()
        except (RuntimeError, NotImplementedError, TypeError):
            continue
        if n and ptr not in seen:
            seen[ptr] = (n, o)
    return seen


def _register_buffers(mem: Memory, kernarg: bytes, extra) -> None:
    import torch

    words = {struct.unpack_from("<Q", kernarg, off)[0] for off in range(0, len(kernarg) - 7, 4)}
    words.discard(0)
    for t in extra:
        st = t.untyped_storage()
        mem.register(torch.empty(0, dtype=torch.uint8).set_(st), "registered buffer", base="host")
    for ptr, (n, _t) in sorted(_live_cpu_storages().items()):
        if any(ptr <= w < ptr + n for w in words):
            try:
                whole = torch.empty(0, dtype=torch.uint8).set_(_t.untyped_storage())
                mem.register(whole, f"tensor storage at 0x{ptr:x}", base="host")
            except ValueError:
                pass  # already registered through another view
