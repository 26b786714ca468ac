"""Testing tools: the AMD emulator (fusedgemm.testing.emulator) and `emulate`, which runs the package's HIP
launch path against it on CPU tensors.

    from fusedgemm.testing import emulate
    with emulate("gfx942") as dev:
        mod = fusedgemm.runtime.launch.module_for(unit, 0, source)     # the real loader: hipModuleLoadData ...
        mod.kernel(name, signature)(grid, block, 0, 0, *args)         # ... hipModuleLaunchKernel -> emulator
    dev.stats.rate   # instructions per second

Inside the context, runtime/launch.py's hip-python module (`from hip import hip`) is an emulated one
(emulator/hip.py), the launcher's device arch is the emulated arch, and its module cache is a fresh one;
everything is restored on exit. See docs/emulator.md for what the public ops need besides this.
"""
from __future__ import annotations

import contextlib
import sys
import types

__all__ = ["emulate"]


@contextlib.contextmanager
def emulate(arch: str = "gfx942", *, mfma=None, race_check: bool = True, lds_fence_check: bool = True,
            api: bool = True):
    """Run AMD launches of the package in the emulator, as device `arch` (gfx942 or gfx950). Yields the
    EmulatedDevice (stats, launches, register()). api=True also routes the public ops' CPU tensors to the
    kernels (best effort: see docs/emulator.md, "End to end"). race_check / lds_fence_check: LDS accesses of
    two waves with no s_barrier between them, or to bytes whose ds_write no s_waitcnt completed, are errors."""
    from .emulator.hip import EmulatedDevice
    from ..runtime import launch

    if arch not in ("gfx942", "gfx950"):
        raise ValueError(f"emulate: the emulator models gfx942 and gfx950, not {arch!r}")
    dev = EmulatedDevice(arch, mfma=mfma, race_check=race_check, lds_fence_check=lds_fence_check)
    hip_mod = dev.module()
    pkg = types.ModuleType("hip")
    pkg.hip = hip_mod
    pkg.__path__ = []  # a package, so `from hip import hip` resolves the attribute
    saved_modules = {k: sys.modules.get(k) for k in ("hip", "hip.hip")}
    patches: list[tuple[object, str, object]] = []

    def patch(obj, name, value):
        if hasattr(obj, name):
            patches.append((obj, name, getattr(obj, name)))
            setattr(obj, name, value)

    real_code_object_path = launch.code_object_path

    def code_object_path(unit, arch_, source=None):
        p = real_code_object_path(unit, arch_, source)
        dev.remember(p)
        return p

    sys.modules["hip"], sys.modules["hip.hip"] = pkg, hip_mod
    patch(launch, "_BACKENDS", {k: v for k, v in launch._BACKENDS.items() if k != "amd"})
    patch(launch, "_MODULES", {})
    patch(launch, "device_arch", lambda _index: arch)
    patch(launch, "code_object_path", code_object_path)
    if api:
        from . import _api_patches

        for obj, name, value in _api_patches.patches(arch):
            patch(obj, name, value)
    try:
        yield dev
    finally:
        for obj, name, old in reversed(patches):
            setattr(obj, name, old)
        for k, v in saved_modules.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
