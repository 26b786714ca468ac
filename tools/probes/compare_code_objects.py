#!/usr/bin/env python3
"""Compare the machine code of two sets of code objects (before / after a source change that must not change it).

Each set is a directory of <arch>/<unit>.cubin|.hsaco files, as `python -m fusedgemm.runtime.build --out DIR`
writes them. Code objects are paired by file name; each kernel by symbol name. Names can be mapped first
(`--rename OLD=NEW`, applied to file and kernel names as whole `_`-separated words, longest first) so that a
rename of units, kernels or tile configs compares the code under the new names.

    cubin (sm_90a)   each kernel's .text.<kernel> section, byte for byte (the SASS; `--sass` prints the
                     nvdisasm listing of a kernel that differs)
    hsaco (gfx9xx)   the .text section byte for byte, and each kernel symbol's (offset, size) in it; also the
                     .rodata kernel descriptors (their code offsets taken relative to .text)

    python tools/probes/compare_code_objects.py BEFORE AFTER [--rename file:gemm_a8_sm90=sm90_gemm ...] [--sass]
    python tools/probes/compare_code_objects.py BEFORE AFTER --former-names    # before / after issue 39's renames

Exit status 0 when every code object and every kernel of BEFORE has an identical counterpart in AFTER and
AFTER has nothing more; 1 otherwise (each difference is printed).
"""
from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

SHT_SYMTAB, SHT_NOBITS = 2, 8
STT_FUNC = 2


def elf_sections(data: bytes) -> dict[str, tuple[int, bytes, int, int, int]]:
    """name -> (type, contents, link, entsize, address) of every section of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = data[heads[shstrndx][4]:heads[shstrndx][4] + heads[shstrndx][5]]
    out, by_index = {}, []
    for name_off, typ, _flags, addr, off, size, link, _info, _align, entsize in heads:
        name = names[name_off:names.index(b"\0", name_off)].decode()
        body = data[off:off + size] if typ != SHT_NOBITS else b""
        by_index.append(name)
        out[name] = (typ, body, link, entsize, addr)
    elf_sections.by_index = by_index  # section names by index (for symbol tables' sh_link)
    return out


def functions(data: bytes) -> dict[str, tuple[int, int]]:
    """Function symbols of an ELF64 file: name -> (offset in its section, size). Offsets, not addresses: longer
    names grow the tables that the linker places before .text."""
    secs = elf_sections(data)
    index = elf_sections.by_index
    out = {}
    for _name, (typ, body, link, entsize, _addr) in secs.items():
        if typ != SHT_SYMTAB:
            continue
        strtab = secs[index[link]][1]
        for pos in range(0, len(body), entsize or 24):
            st_name, st_info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", body, pos)
            if st_info & 0xF == STT_FUNC:
                base = secs[index[shndx]][4] if 0 < shndx < len(index) else 0
                out[strtab[st_name:strtab.index(b"\0", st_name)].decode()] = (value - base, size)
    return out


class Renamer:
    """OLD=NEW pairs applied to whole words (between non-alphanumerics) of a name, longest OLD first; a pair
    written file:OLD=NEW renames file names only (a unit renamed, its kernels not)."""

    def __init__(self, pairs: list[str], files: bool = False):
        table = {}
        for pair in pairs:
            file_only = pair.startswith("file:")
            if file_only and not files:
                continue
            old, new = pair[len("file:") if file_only else 0:].split("=", 1)
            table[old] = new
        self.patterns = [(re.compile(rf"(?<![A-Za-z0-9]){re.escape(old)}(?![A-Za-z0-9])"), new)
                         for old, new in sorted(table.items(), key=lambda kv: -len(kv[0]))]

    def __call__(self, name: str) -> str:
        for pat, new in self.patterns:
            name = pat.sub(new, name)
        return name


def kernel_texts(path: Path, rename: Renamer) -> dict[str, bytes]:
    """The machine code of each kernel (cubin) or of the whole object (hsaco: '.text', and '.rodata' holds the
    kernel descriptors; '@symbols' lists each kernel's (offset, size))."""
    data = path.read_bytes()
    secs = elf_sections(data)
    if path.suffix == ".cubin":  # one .text.<kernel> section per kernel
        return {rename(name[len(".text."):]): body for name, (_t, body, _l, _e, _a) in secs.items()
                if name.startswith(".text.")}
    syms = sorted((rename(n), v, s) for n, (v, s) in functions(data).items())
    return {".text": secs[".text"][1], ".rodata": kernel_descriptors(secs),
            "@symbols": repr(syms).encode()}


def kernel_descriptors(secs) -> bytes:
    """An hsaco's .rodata (its 64-byte kernel descriptors) with each descriptor's kernel_code_entry_byte_offset
    (bytes 16-23: from the descriptor to its code) made relative to .text: where the linker puts .rodata moves with
    the length of the symbol names, the code's place in .text does not."""
    if ".rodata" not in secs:
        return b""
    body, ro_addr, text_addr = bytearray(secs[".rodata"][1]), secs[".rodata"][4], secs[".text"][4]
    for pos in range(0, len(body) - 63, 64):
        entry, = struct.unpack_from("<q", body, pos + 16)
        struct.pack_into("<q", body, pos + 16, ro_addr + pos + entry - text_addr)
    return bytes(body)


def sass(path: Path, kernel_section: str) -> str:
    """nvdisasm's listing of one section of a cubin ('' when nvdisasm is not found)."""
    from fusedgemm.runtime.compilers import find_nvidia_tool

    try:
        tool = find_nvidia_tool("nvdisasm")
    except Exception:  # noqa: BLE001  (a tool that is not installed)
        return ""
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, Path(d) / path.name)
        res = subprocess.run([tool, "-fun", kernel_section, str(Path(d) / path.name)], capture_output=True, text=True)
    return res.stdout or res.stderr


def compare(before: Path, after: Path, pairs: list[str], show_sass: bool = False) -> int:
    rename, rename_file = Renamer(pairs), Renamer(pairs, files=True)

    def objects(root: Path, mapped: bool) -> dict[str, Path]:
        out = {}
        for p in sorted(root.rglob("*")):
            if p.suffix in (".cubin", ".hsaco"):
                rel = p.relative_to(root).as_posix()
                out[rename_file(rel) if mapped else rel] = p
        return out

    old, new = objects(before, True), objects(after, False)
    bad = 0
    for rel in sorted(set(old) - set(new)):
        print(f"MISSING in after: {rel}")
        bad += 1
    for rel in sorted(set(new) - set(old)):
        print(f"EXTRA in after:   {rel}")
        bad += 1
    kernels = same = 0
    for rel in sorted(set(old) & set(new)):
        a, b = kernel_texts(old[rel], rename), kernel_texts(new[rel], Renamer([]))
        diffs = []
        for name in sorted(set(a) | set(b)):
            if name not in b or name not in a:
                diffs.append(f"{name}: only in {'before' if name in a else 'after'}")
            elif a[name] != b[name]:
                diffs.append(f"{name}: {len(a[name])} -> {len(b[name])} bytes, differ")
                if show_sass and rel.endswith(".cubin"):
                    print(sass(new[rel], name)[:4000])
        n = len(a) if rel.endswith(".cubin") else a["@symbols"].count(b"(")
        kernels += n
        if diffs:
            bad += 1
            print(f"DIFFERS {rel}:")
            for d in diffs[:20]:
                print(f"    {d}")
            if len(diffs) > 20:
                print(f"    ... and {len(diffs) - 20} more")
        else:
            same += 1
            print(f"same    {rel}  ({n} kernels)")
    print(f"\n{same} of {len(set(old) | set(new))} code objects identical ({kernels} kernels); "
          f"{bad} difference(s)")
    return 1 if bad else 0


def former_names() -> list[str]:
    """The renames of issue 39 as OLD=NEW pairs: the two GEMM units (file names only) and the tile configs."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "pkg" / "fusedgemm" / "runtime" / "tile_configs.py"
    spec = importlib.util.spec_from_file_location("_tile_configs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return ["file:gemm_a8_sm90=sm90_gemm", "file:gemm_a8=portable_gemm",
            *(f"{old}={new}" for old, new in module.FORMER_NAMES.items())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                    help="map a name of BEFORE (a word of a file or kernel name) to its name in AFTER; "
                         "file:OLD=NEW: file names only")
    ap.add_argument("--rename-file", type=Path, help="OLD=NEW pairs, one a line ('#' comments)")
    ap.add_argument("--former-names", action="store_true",
                    help="BEFORE predates the renames of issue 39: map its units (gemm_a8 -> portable_gemm, "
                         "gemm_a8_sm90 -> sm90_gemm) and tile configs (runtime/tile_configs.py FORMER_NAMES) to "
                         "today's names")
    ap.add_argument("--sass", action="store_true", help="print nvdisasm's listing of a cubin kernel that differs")
    args = ap.parse_args(argv)
    pairs = list(args.rename)
    if args.rename_file:
        pairs += [ln.split("#")[0].strip() for ln in args.rename_file.read_text().splitlines()
                  if ln.split("#")[0].strip()]
    if args.former_names:
        pairs += former_names()
    bad = [p for p in pairs if "=" not in p]
    if bad:
        ap.error(f"--rename: expected OLD=NEW, got {bad}")
    return compare(args.before, args.after, pairs, args.sass)


if __name__ == "__main__":
    sys.exit(main())
