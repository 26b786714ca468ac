"""FlyDSL's preshuffle GEMM beside ours on the same paper (issue 41): both kernels' K loops, read from real code
objects by the emulator's loader, through plan/cdna_model.py (counts per iteration, bytes per MFMA, registers, LDS,
occupancy, PREDICTED times). No GPU anywhere.

FlyDSL compiles on the CPU: its `flyc.compile` treats CPU torch tensors as compile placeholders, FLYDSL_GPU_ARCH /
FLYDSL_COMPILE_ARCH pick the target, FLYDSL_DUMP_IR=1 leaves the final ISA (*_final_isa.s) and the gpu.binary (the
ELF, in *_gpu_module_to_binary.mlir). The one thing it lacks without ROCm is ld.lld: MLIR's ROCDL serializer runs
$ROCM_PATH/llvm/bin/ld.lld, so this script points ROCM_PATH at a wrapper around the package's own lld (zig's). The
listing is re-assembled with the package's clang and proven byte-equal to FlyDSL's own ELF (loader.load_kernel).

    # once: a separate venv with the wheel, torch CPU, and a FlyDSL source tree (its kernels/ are not in the wheel)
    python3.11 -m venv /tmp/flyvenv && /tmp/flyvenv/bin/pip install flydsl-0.4.2-*.whl numpy torch
    git --git-dir=<fetched ROCm/FlyDSL> archive HEAD kernels | tar x -C /tmp/flysrc
    # the table (compiles into --out; later runs reuse it unless --recompile)
    python tools/probes/flydsl_side_by_side.py --flydsl-python /tmp/flyvenv/bin/python --flysrc /tmp/flysrc
    python tools/probes/flydsl_side_by_side.py --out /tmp/flydsl_side_by_side     # saved objects only
    python tools/probes/flydsl_side_by_side.py --listing gfx942_fp8_128x128x128     # one FlyDSL loop's text

Ours come from plan/cdna_model.py's HOT_LOOPS (the committed table; --rebuild-ours re-reads our code objects
through tools/probes/cdna_hot_loop.py, minutes of clang). Not imported by the package or the tests.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

# FlyDSL builds: (name, kind, tile_m, tile_n, tile_k, use_async_copy, arches). 128x128x128 is the tile of its
# large-shape tests; bf16 128x128x64 has our cdna_lds_128x128's 128-byte K block.
FLY_BUILDS = (("fp8", 128, 128, 128, False, ("gfx942", "gfx950")),
              ("bf16", 128, 128, 64, False, ("gfx942", "gfx950")),
              ("fp8", 128, 128, 128, True, ("gfx950",)))
# our kernels: the one a call with these SHAPES' K (whole 128-byte K blocks) runs, the same config's kernel for any K
# (with the K-edge test), and the register-direct one
OURS = ("whole_k_cdna_lds_128x128", "cdna_lds_128x128", "portable_128x128")
SHAPES = ((4096, 4096, 4096), (4096, 8192, 8192), (4096, 14336, 4096), (8192, 8192, 8192))
NN, KK = 4096, 4096  # FlyDSL bakes N and K in; the loop body does not depend on them (only its trip count)


def build_name(arch, kind, tm, tn, tk, dma, kk=KK):
    return f"{arch}_{kind}_{tm}x{tn}x{tk}" + ("_async" if dma else "") + ("" if kk == KK else f"_k{kk}")


# ---- inside FlyDSL's venv (imports nothing of ours) -------------------------------------------------------------
def compile_in_flydsl(kind: str, tm: int, tn: int, tk: int, dma: bool, flysrc: str, kk: int = KK) -> None:
    sys.path.insert(0, flysrc)
    import flydsl
    import flydsl.compiler as flyc
    import flydsl.expr as fx
    import torch
    from kernels.gemm.preshuffle_gemm import compile_preshuffle_gemm

    fn = compile_preshuffle_gemm(N=NN, K=kk, tile_m=tm, tile_n=tn, tile_k=tk, in_dtype=kind, out_dtype="bf16",
                                 use_async_copy=dma)
    m, eight = 4096, kind in ("fp8", "int8")
    ab = torch.int8 if eight else torch.bfloat16  # CPU tensors: compile placeholders, never launched
    args = (torch.empty(m * NN, dtype=torch.bfloat16), torch.empty(m * kk, dtype=ab), torch.empty(NN * kk, dtype=ab),
            torch.empty(m, dtype=torch.float32), torch.empty(NN, dtype=torch.float32),
            torch.empty(0, dtype=torch.bfloat16), m, NN, fx.Stream(None))
    flyc.compile(fn, *args)
    print(json.dumps({"flydsl": flydsl.__version__, "torch": torch.__version__}))


# ---- our side ----------------------------------------------------------------------------------------------------
def lld_wrapper(root: Path) -> Path:
    """A ROCM_PATH whose llvm/bin/ld.lld runs the package's lld (what FlyDSL's serializer calls)."""
    from fusedgemm.runtime.compilers import compiler_for

    lld = compiler_for("gfx942").lld
    exe = root / "rocm" / "llvm" / "bin" / "ld.lld"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\nexec " + " ".join(map(str, lld)) + ' "$@"\n')
    exe.chmod(0o755)
    return root / "rocm"


def mlir_string_bytes(text: str) -> bytes:
    """The bytes of the first `bin = "..."` MLIR string attribute (\\XX hex escapes)."""
    m = re.search(r'bin = "((?:[^"\\]|\\.)*)"', text, re.DOTALL)
    if not m:
        raise SystemExit("no gpu.binary in FlyDSL's dump")
    s, out, i = m.group(1), bytearray(), 0
    while i < len(s):
        if s[i] == "\\" and re.fullmatch(r"[0-9A-Fa-f]{2}", s[i + 1:i + 3]):
            out.append(int(s[i + 1:i + 3], 16))
            i += 3
        elif s[i] == "\\":
            out += s[i + 1].encode()
            i += 2
        else:
            out += s[i].encode()
            i += 1
    return bytes(out)


def compile_build(args, arch, kind, tm, tn, tk, dma, kk=KK) -> Path:
    """FlyDSL's ELF + listing for one build, compiled through the other venv (or found in --out)."""
    d = Path(args.out) / build_name(arch, kind, tm, tn, tk, dma, kk)
    if (d / "kernel.hsaco").is_file() and not args.recompile:
        return d
    if not args.flydsl_python or not Path(args.flydsl_python).exists():
        raise SystemExit(f"{d}: not compiled yet; give --flydsl-python (a venv with the flydsl wheel and torch CPU) "
                         "and --flysrc (a FlyDSL source tree with kernels/)")
    dump = d / "dump"
    env = dict(os.environ, FLYDSL_GPU_ARCH=arch, FLYDSL_COMPILE_ARCH=arch, FLYDSL_DUMP_IR="1",
               FLYDSL_DUMP_DIR=str(dump), FLYDSL_RUNTIME_ENABLE_CACHE="0", ROCM_PATH=str(lld_wrapper(Path(args.out))))
    cmd = [args.flydsl_python, __file__, "--_compile", kind, str(tm), str(tn), str(tk), str(int(dma)), args.flysrc,
           str(kk)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode:
        err = p.stderr.strip().splitlines()
        if any("No module named 'flydsl'" in line for line in err):
            raise SystemExit(f"{args.flydsl_python} cannot import flydsl: install the wheel into that venv")
        raise SystemExit(f"FlyDSL compile failed ({' '.join(cmd)}):\n" + "\n".join(err[-25:]))
    binary = next(dump.glob("*/*_gpu_module_to_binary.mlir"))
    listing = next(dump.glob("*/*_final_isa.s"))
    (d / "kernel.hsaco").write_bytes(mlir_string_bytes(binary.read_text()))
    (d / "kernel.s").write_text(listing.read_text())
    (d / "versions.json").write_text(p.stdout.strip().splitlines()[-1])
    return d


def fly_kernel(d: Path):
    from fusedgemm.testing.emulator.loader import load_kernel

    listing = (d / "kernel.s").read_text()
    name = re.search(r"^\s*\.globl\s+(\S+)", listing, re.MULTILINE).group(1)
    return load_kernel((d / "kernel.hsaco").read_bytes(), name, listing, where=f"FlyDSL {d.name}")


def _whole(k, cm, **kw):
    """analyse() over a straight-line kernel: a fake branch back to the first instruction makes it one loop."""
    import types

    fake = types.SimpleNamespace(index=len(k.instructions), mnemonic="s_branch", text="s_branch", target_index=0)
    return cm.analyse([*k.instructions, fake], **kw)


def fly_hot_loop(d: Path, arch, kind, tm, tn, tk, d_short: Path | None = None):
    """(Geometry, HotLoop) of a FlyDSL build: 4 waves along N, each tm x tn/4; its loop is two K tiles (ping-pong),
    the loads of tile t + 1 in flight under tile t's MFMAs. A build whose K loop is unrolled (the gfx950 DMA path
    unrolls it in Python) has no loop: its iteration is then the difference of two builds' whole-kernel counts,
    K and K / 2, over the iterations between them (`d_short`; its loop marked as derived by `branch` = -1)."""
    import dataclasses

    from fusedgemm.plan import cdna_model as cm

    k = fly_kernel(d)
    agprs = int(k.metadata.get(".agpr_count", 0))
    vgprs = k.descriptor.accum_offset if agprs else int(k.metadata.get(".vgpr_count", 0))
    tile_bytes = tk * cm.IN_BYTES[kind]
    step = cm.step_bytes(arch, kind)
    kw = {"steps": 2 * tile_bytes // step, "prefetch": tile_bytes // step, "vgprs": vgprs, "agprs": agprs,
          "lds_kernel_bytes": k.lds_bytes}
    if d_short is None:
        h = cm.analyse(k.instructions, **kw)
    else:
        full, short = _whole(k, cm, **kw), _whole(fly_kernel(d_short), cm, **kw)
        iters = (KK - KK // 2) // (2 * tk)
        diff = {f.name: (getattr(full, f.name) - getattr(short, f.name)) / iters
                for f in dataclasses.fields(cm.HotLoop) if f.name not in (*kw, "mfma")}
        if any(v != int(v) for v in diff.values()):
            raise SystemExit(f"{d.name}: the two builds differ by a non-whole number of iterations: {diff}")
        (mn, a), = full.mfma
        (_m, b), = short.mfma
        h = dataclasses.replace(full, mfma=((mn, (a - b) // iters),), **{n: int(v) for n, v in diff.items()})
    g = cm.Geometry(f"flydsl_{tm}x{tn}x{tk}", 1, 4, 1, tm // 16, tn // 64)
    want = 2 * tm * (tn // 4) * 2 * tk  # one wave's FLOPs over two K tiles
    if h.mfma_flops() != want:
        raise SystemExit(f"{d.name}: the loop found has {h.mfma_flops()} MFMA FLOPs per wave, not two K tiles' {want}")
    return g, h


def ours(args, arch, kind, config):
    from fusedgemm.plan import cdna_model as cm

    if args.rebuild_ours:
        sys.path.insert(0, str(Path(__file__).parent))
        import cdna_hot_loop

        return cm.geometry(cm.config_of(config)), cdna_hot_loop.hot_loop(arch, config, kind)
    return cm.geometry(cm.config_of(config)), cm.HOT_LOOPS[(arch, config, kind)]


COLS = ("kernel", "K B/it", "MFMA x n", "cyc", "vmem", "KB", "g2lds", "lds", "KB", "salu", "valu", "wait", "bar",
        "vgpr", "agpr", "LDS KB", "WG/CU", "w/SIMD", "B/MFMA vmem", "B/MFMA lds", "MFMA share")


def row(arch, kind, label, g, h):
    from fusedgemm.plan import cdna_model as cm

    hw = cm.HARDWARE[arch]
    occ = cm.occupancy(hw, g, h)
    (mn, n), = h.mfma
    cyc = h.mfma_cycles(arch)
    share = cyc / (cyc + hw.valu_cycles * (h.instructions - h.mfma_count))
    kb = h.steps * cm.step_bytes(arch, kind)
    return (label, kb, re.sub("^v_mfma_(scale_)?f32_|^v_mfma_", "", mn) + f" x{n}", cyc, h.vmem_loads,
            h.vmem_load_bytes / 1024, h.lds_loads, h.lds_ops, (h.lds_bytes + h.lds_load_bytes) / 1024, h.salu,
            h.valu, h.waitcnt, h.barrier, h.vgprs, h.agprs, h.lds_kernel_bytes / 1024, occ,
            occ * g.warps / hw.simds, (h.vmem_load_bytes + h.lds_load_bytes) / n,
            (h.lds_bytes + h.lds_load_bytes) / n, f"{100 * share:.0f}%")


def markdown(rows):
    fmt = [f"{x:.1f}" if isinstance(x, float) else str(x) for x in rows]
    return "| " + " | ".join(fmt) + " |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flydsl-python", default="/tmp/flyvenv/bin/python")
    ap.add_argument("--flysrc", default="/tmp/flysrc", help="FlyDSL source tree (kernels/preshuffle_gemm.py)")
    ap.add_argument("--out", default="/tmp/flydsl_side_by_side", help="where FlyDSL's objects are kept")
    ap.add_argument("--recompile", action="store_true")
    ap.add_argument("--rebuild-ours", action="store_true")
    ap.add_argument("--listing", metavar="BUILD", help="print one FlyDSL build's K loop, e.g. gfx942_fp8_128x128x128")
    ap.add_argument("--_compile", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._compile:
        kind, tm, tn, tk, dma, src, kk = args._compile
        compile_in_flydsl(kind, int(tm), int(tn), int(tk), dma == "1", src, int(kk))
        return 0
    from fusedgemm.plan import cdna_model as cm

    if args.listing:
        k = fly_kernel(Path(args.out) / args.listing)
        a, b = cm.loop_range(k.instructions)
        print("\n".join(i.text for i in k.instructions[a:b + 1]))
        return 0
    fly = {}
    for kind, tm, tn, tk, dma, arches in FLY_BUILDS:
        for arch in arches:
            d = compile_build(args, arch, kind, tm, tn, tk, dma)
            short = compile_build(args, arch, kind, tm, tn, tk, dma, KK // 2) if dma else None
            fly[(arch, kind, d.name)] = fly_hot_loop(d, arch, kind, tm, tn, tk, short)
    vers = next(Path(args.out).glob("*/versions.json")).read_text()
    print(f"FlyDSL build: {vers}; source {args.flysrc}; N = K = {NN} baked in; one wave, one K-loop iteration\n")
    print("| arch | kind | " + " | ".join(COLS) + " |")
    print("|" + "---|" * (len(COLS) + 2))
    entries = []
    for arch in ("gfx942", "gfx950"):
        for kind in ("fp8", "bf16"):
            for (a, k_, name), (g, h) in fly.items():
                if (a, k_) == (arch, kind):
                    label = "FlyDSL " + name.split("_", 2)[2]
                    entries.append((arch, kind, label, g, h))
                    print(markdown((arch, kind, *row(arch, kind, label, g, h))))
            for config in OURS:
                if (arch, config, kind) in cm.HOT_LOOPS:
                    g, h = ours(args, arch, kind, config)
                    entries.append((arch, kind, config, g, h))
                    print(markdown((arch, kind, *row(arch, kind, config, g, h))))
    print("\nMFMA share: the wave's MFMA cycles / (MFMA cycles + 4 cycles per other instruction), one wave alone. "
          "B/MFMA: bytes per wave per MFMA instruction (vmem: global -> VGPR or LDS; lds: ds_read / ds_write + DMA).")
    print("\nPREDICTED (plan/cdna_model.py; no GPU ran any of this): TFLOP/s, fraction of dense peak, binding term")
    print("| arch | kind | kernel | " + " | ".join(f"{m}x{n}x{k}" for m, n, k in SHAPES) + " |")
    print("|" + "---|" * (len(SHAPES) + 3))
    for arch, kind, label, g, h in entries:
        cells = []
        for m, n, k in SHAPES:
            p = cm.predict(arch, kind, g.name, m, n, k, hot=h, geom=g)
            cells.append(f"{p.tflops:.0f} ({100 * p.fraction_of_peak:.0f}%, {p.bound})")
        print(f"| {arch} | {kind} | {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
