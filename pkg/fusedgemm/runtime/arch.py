"""Which code object serves a device: arch detection and the list of supported arches."""
from __future__ import annotations

import functools

# Arch name -> (vendor, code-object suffix).
SUPPORTED_ARCHES: dict[str, tuple[str, str]] = {
    "sm_90a": ("nvidia", ".cubin"),
    "gfx942": ("amd", ".hsaco"),
    "gfx950": ("amd", ".hsaco"),
}


class UnsupportedArchError(RuntimeError):
    """The device has no fusedgemm code object. Never silently replaced by another arch."""


def vendor_of(arch: str) -> str:
    return SUPPORTED_ARCHES[arch][0]


def arch_from_properties(*, is_hip: bool, gcn_arch_name: str = "", major: int = 0, minor: int = 0,
                         device_name: str = "") -> str:
    """Map what the driver reports to a supported arch name, or raise UnsupportedArchError."""
    if is_hip:
        arch = gcn_arch_name.split(":")[0].strip()
    else:
        # sm_90 devices run sm_90a code (Hopper's arch-specific features: wgmma, setmaxnreg).
        arch = f"sm_{major}{minor}a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"
    if arch not in SUPPORTED_ARCHES:
        raise UnsupportedArchError(
            f"fusedgemm has no code object for {device_name or 'this device'} (arch {arch}); "
            f"supported arches: {', '.join(SUPPORTED_ARCHES)}")
    return arch


@functools.lru_cache(maxsize=None)
def device_arch(device_index: int) -> str:
    """The supported arch name of torch device `cuda:<device_index>` (ROCm or CUDA)."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    is_hip = torch.version.hip is not None
    return arch_from_properties(is_hip=is_hip, gcn_arch_name=getattr(props, "gcnArchName", ""),
                                major=props.major, minor=props.minor, device_name=props.name)
