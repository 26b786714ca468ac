"""Read kernel metadata straight from code objects (no GPU, no vendor tools needed).

hsaco (AMD): the NT_AMDGPU_METADATA note, a msgpack map with amdhsa.kernels[*].args (offset, size,
value_kind), register counts, spills and segment sizes.
cubin (NVIDIA): the .nv.info.<kernel> sections; EIATTR_KPARAM_INFO records give each parameter's ordinal,
offset and size.
"""
from __future__ import annotations

import dataclasses
import struct


@dataclasses.dataclass(frozen=True)
class KernelParam:
    ordinal: int
    offset: int
    size: int


def _elf_sections(data: bytes) -> list[tuple[str, int, bytes]]:
    """(name, type, contents) of every section of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = []
    for i in range(e_shnum):
        sh_name, sh_type, _flags, _addr, sh_offset, sh_size = struct.unpack_from("<IIQQQQ", data, e_shoff + i * e_shentsize)
        headers.append((sh_name, sh_type, sh_offset, sh_size))
    strtab_off, strtab_size = headers[e_shstrndx][2], headers[e_shstrndx][3]
    strtab = data[strtab_off:strtab_off + strtab_size]
    out = []
    for sh_name, sh_type, off, size in headers:
        name = strtab[sh_name:strtab.index(b"\0", sh_name)].decode()
        out.append((name, sh_type, data[off:off + size] if sh_type != 8 else b""))  # 8 = SHT_NOBITS
    return out


# ---- AMD -----------------------------------------------------------------------------------------------------
NT_AMDGPU_METADATA = 32
SHT_NOTE = 7


def hsaco_metadata(data: bytes) -> dict:
    """The decoded AMDGPU metadata map of an hsaco (amdhsa.version, amdhsa.kernels, amdhsa.target, ...)."""
    import msgpack

    for _name, sh_type, body in _elf_sections(data):
        if sh_type != SHT_NOTE:
            continue
        pos = 0
        while pos + 12 <= len(body):
            namesz, descsz, ntype = struct.unpack_from("<III", body, pos)
            pos += 12
            name = body[pos:pos + namesz].rstrip(b"\0")
            pos += (namesz + 3) & ~3
            desc = body[pos:pos + descsz]
            pos += (descsz + 3) & ~3
            if name == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
                return msgpack.unpackb(desc, raw=False)
    raise ValueError("no AMDGPU metadata note in this code object")


def hsaco_kernels(data: bytes) -> dict[str, dict]:
    return {k[".name"]: k for k in hsaco_metadata(data)["amdhsa.kernels"]}


def hsaco_params(kernel_meta: dict) -> list[KernelParam]:
    """Explicit kernel arguments (hidden_* arguments the runtime appends are skipped)."""
    args = [a for a in kernel_meta[".args"] if not a[".value_kind"].startswith("hidden_")]
    return [KernelParam(i, a[".offset"], a[".size"]) for i, a in enumerate(args)]


# ---- NVIDIA --------------------------------------------------------------------------------------------------
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_KPARAM_INFO = 0x17


def cubin_params(data: bytes) -> dict[str, list[KernelParam]]:
    """Kernel name -> its parameters in ordinal order, from the .nv.info.<kernel> sections."""
    out: dict[str, list[KernelParam]] = {}
    for name, _type, body in _elf_sections(data):
        if not name.startswith(".nv.info."):
            continue
        params = []
        pos = 0
        while pos + 4 <= len(body):
            fmt, attr, value = struct.unpack_from("<BBH", body, pos)
            pos += 4
            if fmt != EIFMT_SVAL:
                continue  # NVAL/BVAL/HVAL carry their value in the 2 bytes already read
            payload = body[pos:pos + value]
            pos += value
            if attr == EIATTR_KPARAM_INFO:
                _index, ordinal, offset, bits = struct.unpack_from("<IHHI", payload)
                params.append(KernelParam(ordinal, offset, (bits >> 18) & 0x3FFF))
        out[name[len(".nv.info."):]] = sorted(params, key=lambda p: p.ordinal)
    return out
