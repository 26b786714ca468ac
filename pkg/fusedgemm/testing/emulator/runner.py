"""Drive one kernel of a code object on CPU tensors: the pieces tests (and the HIP backend) put together.

    obj = CodeObject.build("gemm_a8", "gfx942")                  # the package's build (cache) + its listing
    k = obj.kernel("fg_gemm_a8_fp8_bf16_none_m16n16k8")           # decoded, proven to be the object's bytes
    mem = Memory(); a_addr = mem.register(a) ...
    stats = Machine(mem).launch(k, grid, block, kernarg_bytes)

run_gemm_a8(...) does all of it for a preset gemm_a8 kernel, packing the kernel arguments itself with the
package's signature (runtime/kernels.py) -- the same packing the launcher uses.
"""
from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from . import codeobjects
from .errors import LoadError
from .loader import Kernel, load_kernel, object_arch
from .machine import Machine, Stats
from .memory import Memory


@dataclasses.dataclass
class CodeObject:
    data: bytes
    listing: str | None
    where: str

    @classmethod
    def build(cls, unit: str, arch: str, source: str | None = None) -> "CodeObject":
        path = codeobjects.code_object(unit, arch, source)
        lst = codeobjects.listing_of(path)
        return cls(path.read_bytes(), lst.read_text() if lst else None, str(path))

    @classmethod
    def from_listing(cls, listing: str, arch: str, where: str = "re-assembled listing") -> "CodeObject":
        """Assemble and link a (possibly edited) listing with the package's clang / lld: a new code object."""
        return cls(assemble(listing, arch), listing, where)

    @property
    def arch(self) -> str:
        return object_arch(self.data)

    def kernel(self, name: str) -> Kernel:
        return load_kernel(self.data, name, self.listing, where=self.where)


def assemble(listing: str, arch: str) -> bytes:
    from ...runtime.compilers import compiler_for

    clang = compiler_for(arch)
    with tempfile.TemporaryDirectory(prefix="fg_emu_asm_") as d:
        s, o, h = Path(d) / "k.s", Path(d) / "k.o", Path(d) / "k.hsaco"
        s.write_text(listing)
        for cmd in ([*codeobjects.assembler_command(arch), "-filetype", "obj", "-mrelocation-model", "pic", str(s),
                     "-o", str(o)], [*clang.lld, "-shared", str(o), "-o", str(h)]):
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                raise LoadError(f"assembling an edited listing failed: {' '.join(cmd)}\n{p.stderr[-3000:]}")
        return h.read_bytes()


def pack(signature, values: dict, shift: dict | None = None) -> bytes:
    """The kernel argument bytes of `signature` from {name: value}; `shift` moves named fields by a byte
    offset (planted-bug tests)."""
    import struct as _struct

    args = signature.values_in_order(values)
    buf = bytearray(signature.struct.size)
    signature.struct.pack_into(buf, 0, *args)
    if shift:
        # re-pack the shifted fields at their moved offsets (others keep theirs)
        names = signature.flat_names
        offs, fmts = [], []
        for (_n, ctype), off in zip(signature.params, signature.offsets):
            if hasattr(ctype, "fields"):
                for (_f, c), o in zip(ctype.fields, ctype.offsets):
                    offs.append(off + o)
                    fmts.append({"ptr": "Q", "i64": "q", "i32": "i", "f32": "f"}[c])
            else:
                offs.append(off)
                fmts.append({"ptr": "Q", "i64": "q", "i32": "i", "f32": "f"}[ctype])
        for name, by in shift.items():
            i = [n.split(".", 1)[-1] for n in names].index(name)
            size = _struct.calcsize(fmts[i])
            buf[offs[i]:offs[i] + size] = b"\0" * size
            _struct.pack_into("<" + fmts[i], buf, offs[i] + by, args[i])
    return bytes(buf)


def run_gemm_a8(arch: str, config: str, a, w_shuffled, out, *, act: str = "none", bias=None, scale_a=None,
                scale_b=None, alpha: float = 1.0, code: CodeObject | None = None, mfma=None,
                shift: dict | None = None, race_check: bool = True, grid=None, strict_hazards: bool = True,
                lds_fence_check: bool = True) -> Stats:
    """One preset gemm_a8 kernel on CPU tensors, the one the host launches for this K (a CDNA LDS config's
    whole-K-block kernel where K fills whole K blocks). a: [M, K] 8-bit; w_shuffled: preshuffled B data [N, K]
    (uint8 view is fine); out: [M, N] bf16 / fp16 (written); bias: [N] or None; scale_a [M] / scale_b [N]
    fp32 tensors or None. Returns the emulator's Stats."""
    import torch

    in_kind = "int8" if a.dtype == torch.int8 else "fp8"
    out_name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[out.dtype]
    unit, kname, sig, source = codeobjects.gemm_a8_kernel(arch, config, in_kind, out_name, act, k=a.shape[1])
    code = code or CodeObject.build(unit, arch, source)
    kernel = code.kernel(kname)
    cfg = codeobjects.tile_config(config)
    m, k = a.shape
    n = w_shuffled.shape[0]
    mem = Memory()
    pa = mem.register(a, "A")
    pb = mem.register(w_shuffled, "B")
    po = mem.register(out, "out")
    pbias = mem.register(bias, "bias") if bias is not None else 0
    psa = mem.register(scale_a, "scale_a") if scale_a is not None else 0
    psb = mem.register(scale_b, "scale_b") if scale_b is not None else 0
    kinds = {torch.float32: 1, torch.bfloat16: 2, torch.float16: 3}
    values = codeobjects.preset_values(pbias, 0 if bias is None else kinds[bias.dtype], psa, 1, psb, 1, alpha)
    values.update(a=pa, b=pb, M=m, N=n, K=k, out=po, ld_out=n)
    kernarg = pack(sig, values, shift)
    grid = grid or (-(-n // cfg.block_n), -(-m // cfg.block_m), 1)
    mach = Machine(mem, mfma=mfma, race_check=race_check, strict_hazards=strict_hazards,
                   lds_fence_check=lds_fence_check)
    return mach.launch(kernel, grid, cfg.warps * 64, kernarg, arch=arch)


__all__ = ["CodeObject", "assemble", "pack", "run_gemm_a8", "Machine", "Memory", "np"]


def run_quantize_rows(arch: str, x, qdtype, *, mfma=None, lds_fence_check: bool = True) -> tuple:
    """quantize_rows's kernel on a CPU [M, K] tensor: (codes [M, K] qdtype, scale [M] fp32, Stats)."""
    import torch

    m, k = x.shape
    es = x.element_size()
    ld = x.stride(0) if m > 1 else k
    vector = x.data_ptr() % 16 == 0 and (ld * es) % 16 == 0 and (k * es) % 16 == 0
    threads, blocks = codeobjects.quantize_rows_plan(m, k, es, vector)
    unit, name, sig = codeobjects.quantize_rows_kernel(x.dtype, qdtype, vector)
    kernel = CodeObject.build(unit, arch).kernel(name)
    q = torch.full((m, k), 0x7F, dtype=torch.uint8).view(qdtype) if qdtype != torch.int8 else \
        torch.full((m, k), 0x7F, dtype=torch.int8)
    scale = torch.full((m,), float("nan"))
    mem = Memory()
    px, pq, ps = mem.register(x, "x"), mem.register(q, "codes"), mem.register(scale, "scale")
    kernarg = pack(sig, {"x": px, "ld": ld, "q": pq, "scale": ps, "M": m, "K": k, "blocks": blocks})
    stats = Machine(mem, mfma=mfma, lds_fence_check=lds_fence_check).launch(kernel, (blocks, 1, 1), threads, kernarg,
                                                                            arch=arch)
    return q, scale, stats
