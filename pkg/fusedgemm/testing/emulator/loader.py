"""Load one kernel of an AMDGPU code object (hsaco) for the emulator.

- ELF: sections, symbols; the kernel's machine code (<name>) and its kernel descriptor (<name>.kd).
- Kernel descriptor: LDS size, kernarg size, user / system SGPRs the hardware initialises, VGPR workitem ids,
  AGPR offset (rsrc3.accum_offset), wave size.
- Metadata note (msgpack): kernarg layout, segment sizes, workgroup size limits.
- Instructions: the build's assembler listing (<unit>.s next to the hsaco). The function's text is re-assembled
  by the same clang (`-cc1as -show-encoding`); the encodings, with each branch target resolved, must equal the
  code object's bytes of that kernel one for one -- so what executes is the object, decoded by the assembler
  that produced it. A listing that does not match is an error (never a silent mismatch).
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import struct
import subprocess
import tempfile
from pathlib import Path

from .errors import LoadError


# ---- ELF -----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int


def parse_elf(data: bytes):
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise LoadError("not a little-endian ELF64 code object")
    e_machine, = struct.unpack_from("<H", data, 0x12)
    if e_machine != 224:  # EM_AMDGPU
        raise LoadError(f"not an AMDGPU code object (e_machine {e_machine})")
    e_flags, = struct.unpack_from("<I", data, 0x30)
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = []
    for i in range(e_shnum):
        (sh_name, sh_type, _fl, sh_addr, sh_offset, sh_size, sh_link, _info, _al,
         sh_entsize) = struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
        raw.append((sh_name, sh_type, sh_addr, sh_offset, sh_size, sh_link, sh_entsize))
    stroff = raw[e_shstrndx][3]

    def cstr(off):
        return data[off:data.index(b"\0", off)].decode()

    sections = [Section(cstr(stroff + r[0]), r[1], r[2], r[3], r[4]) for r in raw]
    symbols = {}
    for r, sec in zip(raw, sections):
        if sec.type not in (2, 11):  # SYMTAB, DYNSYM
            continue
        strtab = raw[r[5]][3]
        for j in range(sec.size // 24):
            st_name, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, sec.offset + 24 * j)
            if st_name:
                symbols.setdefault(cstr(strtab + st_name), (value, size, shndx))
    return e_flags, sections, symbols


EF_AMDGPU_MACH = {0x4C: "gfx942", 0x4F: "gfx950"}


def _file_offset(sections, shndx: int, value: int) -> int:
    sec = sections[shndx]
    return value - sec.addr + sec.offset


# ---- kernel descriptor ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class KernelDescriptor:
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    entry_offset: int
    rsrc1: int
    rsrc2: int
    rsrc3: int
    code_properties: int
    kernarg_preload: int

    @classmethod
    def parse(cls, b: bytes) -> "KernelDescriptor":
        if len(b) != 64:
            raise LoadError(f"kernel descriptor is {len(b)} bytes, expected 64")
        g, p, ka = struct.unpack_from("<III", b, 0)
        entry, = struct.unpack_from("<q", b, 16)
        r3, r1, r2 = struct.unpack_from("<III", b, 44)
        props, preload = struct.unpack_from("<HH", b, 56)
        return cls(g, p, ka, entry, r1, r2, r3, props, preload)

    # user SGPRs in hardware order (AMDGPUUsage, "Initial Kernel Execution State")
    @property
    def user_sgprs(self) -> list[tuple[str, int]]:
        order = [("private_segment_buffer", 4), ("dispatch_ptr", 2), ("queue_ptr", 2), ("kernarg_segment_ptr", 2),
                 ("dispatch_id", 2), ("flat_scratch_init", 2), ("private_segment_size", 1)]
        return [(n, c) for i, (n, c) in enumerate(order) if self.code_properties >> i & 1]

    @property
    def user_sgpr_count(self) -> int:
        return self.rsrc2 >> 1 & 0x1F

    @property
    def workgroup_ids(self) -> tuple[bool, bool, bool]:
        return tuple(bool(self.rsrc2 >> b & 1) for b in (7, 8, 9))

    @property
    def workgroup_info(self) -> bool:
        return bool(self.rsrc2 >> 10 & 1)

    @property
    def private_segment(self) -> bool:
        return bool(self.rsrc2 & 1)

    @property
    def vgpr_workitem_id(self) -> int:
        return self.rsrc2 >> 11 & 3

    @property
    def accum_offset(self) -> int:
        return ((self.rsrc3 & 0x3F) + 1) * 4

    @property
    def wave32(self) -> bool:
        return bool(self.code_properties >> 10 & 1)

    @property
    def vgpr_granules(self) -> int:
        return self.rsrc1 & 0x3F

    @property
    def lds_bytes(self) -> int:
        return self.group_segment_fixed_size


# ---- instructions ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Instr:
    index: int
    pc: int  # byte offset from the kernel entry
    text: str  # as the assembler printed it
    mnemonic: str
    operands: list[str]
    modifiers: list[str]
    encoding: bytes
    target: str | None = None  # branch label
    target_index: int | None = None


_SEPARATORS = {",": re.compile("(,)"), " ": re.compile("([ \t])")}  # " " splits at tabs too


def split_top(s: str, sep: str) -> list[str]:
    """s split at the separators outside brackets / parentheses, pieces stripped, empty ones dropped."""
    rx = _SEPARATORS.get(sep)
    if rx is None:
        return _split_top_chars(s, sep)
    pieces = rx.split(s)  # text, separator, text, separator, ..., text
    if "[" not in s and "(" not in s and "]" not in s and ")" not in s:
        return [x.strip() for x in pieces[::2] if x.strip()]
    # a separator splits where the bracket depth of all text before it is 0 (the depth may go negative)
    out, cur, depth = [], [], 0
    for i, piece in enumerate(pieces):
        if i & 1:
            if depth == 0:
                out.append("".join(cur))
                cur = []
            else:
                cur.append(piece)
        else:
            cur.append(piece)
            depth += piece.count("[") + piece.count("(") - piece.count("]") - piece.count(")")
    out.append("".join(cur))
    return [x.strip() for x in out if x.strip()]


def _split_top_chars(s: str, sep: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if depth == 0 and (ch == sep or (sep == " " and ch in " \t")):
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [x.strip() for x in out if x.strip()]


def parse_instruction_text(text: str) -> tuple[str, list[str], list[str]]:
    parts = text.strip().split(None, 1)
    mnemonic = parts[0]
    rest = parts[1] if len(parts) > 1 else ""
    if mnemonic in ("s_waitcnt",) or not rest:
        return mnemonic, [], split_top(rest, " ")
    pieces = split_top(rest, ",")
    operands, modifiers = [], []
    for i, piece in enumerate(pieces):
        # pieces come stripped and non-empty: one without blanks is its own single token
        toks = [piece] if " " not in piece and "\t" not in piece else split_top(piece, " ")
        if i < len(pieces) - 1:
            if len(toks) != 1:
                raise LoadError(f"cannot parse operands of {text!r}")
            operands.append(toks[0])
        else:
            operands.append(toks[0])
            modifiers = toks[1:]
    # Instructions without register operands but with modifiers (s_sleep 1 is an operand; "s_nop 0" too)
    return mnemonic, operands, modifiers


# An instruction line of `-show-encoding` output. The instruction ends at the first ';' (AMDGPU's comment string);
# the source line's own comment, when it has one, comes before "; encoding:" and is skipped -- the register
# allocator's spill / copy comments ("v_accvgpr_write_b32 a1, v2 ;  Reload Reuse ; encoding: [...]") must not
# hide the instruction (decode_listing also refuses any encoding line this does not match).
_ENC = re.compile(r"^\s*(?P<inst>[a-z_][\w.]*(?:\s[^;]*)?)\s*(?:;.*?)?;\s*encoding:\s*\[(?P<bytes>[^\]]*)\]")
_LABEL = re.compile(r"^(?P<label>[.\w$]+):")
_HEX_BYTES = re.compile(r"0x[0-9a-fA-F]{2}(?:,0x[0-9a-fA-F]{2})*")
_FIXUP = re.compile(r"fixup (?P<tag>\w) - offset: (?P<off>\d+), value: (?P<value>[^,]+), kind: (?P<kind>\w+)")


def function_text(listing: str, name: str) -> str:
    """The lines of function `name` in an assembler listing (its label to the end of its .text)."""
    start = re.search(rf"^{re.escape(name)}:", listing, re.M)
    if not start:
        raise LoadError(f"kernel {name} is not in the listing")
    end = listing.find("\n\t.section", start.start())
    endfunc = re.compile(r"^\.Lfunc_end\d+:", re.M).search(listing, start.start())
    stop = min(x for x in (end if end >= 0 else len(listing), endfunc.start() if endfunc else len(listing)))
    return listing[start.start():stop]


def assemble_with_encodings(text: str, arch: str) -> str:
    from .codeobjects import assembler_command

    with tempfile.TemporaryDirectory(prefix="fg_emu_") as d:
        src = Path(d) / "k.s"
        src.write_text(f'\t.amdgcn_target "amdgcn-amd-amdhsa--{arch}"\n\t.text\n{text}\n')
        out = Path(d) / "k.enc.s"
        cmd = [*assembler_command(arch), "-filetype", "asm", "-show-encoding", str(src), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise LoadError(f"re-assembling the listing failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
        return out.read_text()


def decode_listing(enc_text: str, name: str) -> list[Instr]:
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    fixups: list[tuple[Instr, str, str]] = []
    pc = 0
    for line in enc_text.splitlines():
        m = _LABEL.match(line)
        if m:
            labels[m.group("label")] = len(instrs)
            continue
        m = _ENC.match(line)
        if m:
            text = m.group("inst").strip()
            raw = m.group("bytes")
            if _HEX_BYTES.fullmatch(raw):  # the usual "0x.." list: no fixup placeholders
                enc = bytes.fromhex(raw.replace("0x", "").replace(",", ""))
                holes = ()
            else:
                toks = [t.strip() for t in raw.split(",")]
                enc = bytes(int(t, 16) if t.startswith("0x") else 0 for t in toks)
                holes = [i for i, t in enumerate(toks) if not t.startswith("0x")]
            mnem, ops, mods = parse_instruction_text(text)
            ins = Instr(len(instrs), pc, text, mnem, ops, mods, enc)
            ins._placeholders = holes
            instrs.append(ins)
            pc += len(enc)
            continue
        if "encoding:" in line:
            # An instruction the pattern above misses would shift every pc after it (and show only as a branch
            # mismatch far from the cause): refuse it here, by name.
            raise LoadError(f"{name}: cannot parse the assembler's encoding line {line.strip()!r}")
        m = _FIXUP.search(line) if "fixup" in line else None
        if m and instrs:
            fixups.append((instrs[-1], m.group("value").strip(), m.group("kind")))
    labels["__end__"] = len(instrs)
    for ins, value, kind in fixups:
        if kind != "fixup_si_sopp_br":
            raise LoadError(f"{name}: instruction {ins.text!r} has a relocation ({kind} to {value}) the emulator "
                            "does not resolve")
        if value not in labels:
            raise LoadError(f"{name}: branch target {value} of {ins.text!r} is not in the kernel")
        ins.target = value
        ins.target_index = labels[value]
    return instrs


def resolved_bytes(instrs: list[Instr]) -> bytes:
    """The machine code the listing stands for, branch offsets filled in."""
    out = bytearray()
    pcs = [i.pc for i in instrs] + [instrs[-1].pc + len(instrs[-1].encoding) if instrs else 0]
    for ins in instrs:
        enc = bytearray(ins.encoding)
        if ins.target is not None:
            simm = (pcs[ins.target_index] - (ins.pc + 4)) // 4
            struct.pack_into("<h", enc, 0, simm)
        out += enc
    return bytes(out)


# ---- the kernel ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Kernel:
    name: str
    arch: str
    descriptor: KernelDescriptor
    metadata: dict
    instructions: list[Instr]
    code: bytes
    source: str  # where the code object came from (for messages)

    @property
    def lds_bytes(self) -> int:
        return self.descriptor.group_segment_fixed_size

    @property
    def kernarg_size(self) -> int:
        return int(self.metadata.get(".kernarg_segment_size", self.descriptor.kernarg_size))


_CACHE: dict[tuple[str, str], Kernel] = {}


def object_arch(data: bytes) -> str:
    e_flags, _s, _y = parse_elf(data)
    arch = EF_AMDGPU_MACH.get(e_flags & 0xFF)
    if arch is None:
        raise LoadError(f"code object for an arch the emulator does not model (EF_AMDGPU_MACH 0x{e_flags & 0xFF:x})")
    return arch


def load_kernel(data: bytes, name: str, listing: str | None, *, where: str = "code object") -> Kernel:
    """Kernel `name` of code object `data`, decoded from `listing` (the build's .s) and proven to be the object."""
    key = (hashlib.sha256(data).hexdigest(), name)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    from ...runtime.codeobject import hsaco_kernels

    arch = object_arch(data)
    _flags, sections, symbols = parse_elf(data)
    metas = hsaco_kernels(data)
    if name not in metas or name not in symbols or name + ".kd" not in symbols:
        raise LoadError(f"kernel {name!r} is not in {where} (it has {', '.join(sorted(metas)[:8])}"
                        f"{', ...' if len(metas) > 8 else ''})")
    kd_val, kd_size, kd_sec = symbols[name + ".kd"]
    kd_off = _file_offset(sections, kd_sec, kd_val)
    kd = KernelDescriptor.parse(data[kd_off:kd_off + 64])
    fn_val, fn_size, fn_sec = symbols[name]
    if kd_val + kd.entry_offset != fn_val:
        raise LoadError(f"{name}: kernel descriptor entry 0x{kd_val + kd.entry_offset:x} != symbol 0x{fn_val:x}")
    fo = _file_offset(sections, fn_sec, fn_val)
    code = data[fo:fo + fn_size]
    if kd.wave32:
        raise LoadError(f"{name}: wave32 kernels are not modelled (gfx9 runs wave64)")
    if kd.private_segment_fixed_size:
        raise LoadError(f"{name}: uses {kd.private_segment_fixed_size} bytes of scratch per lane (registers spilled): "
                        "the emulator does not model scratch, and a shipped kernel must not spill")
    if listing is None:
        raise LoadError(f"{name}: no assembler listing for {where}; the emulator decodes the build's listing "
                        "(<unit>.s beside the hsaco)")
    instrs = decode_listing(assemble_with_encodings(function_text(listing, name), arch), name)
    got = resolved_bytes(instrs)
    # The object pads the function's end (s_code_end / alignment); the listing's bytes must be its prefix and
    # cover the symbol's size.
    if got != code[:len(got)] or len(got) != len(code):
        bad = next((i for i in instrs if got[i.pc:i.pc + len(i.encoding)] != code[i.pc:i.pc + len(i.encoding)]),
                   None)
        where_ = f"byte {bad.pc}: `{bad.text}`" if bad else "the end"
        raise LoadError(f"{name}: the listing is not this code object (listing {len(got)} bytes, object "
                        f"{len(code)}; first difference at {where_})")
    k = Kernel(name, arch, kd, metas[name], instrs, code, where)
    _CACHE[key] = k
    return k
