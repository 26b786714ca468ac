"""An instruction-level emulator of the CDNA3 (gfx942) / CDNA4 (gfx950) subset our kernels use: it executes the
real code objects the package builds, on CPU tensors, with waitcnt / LDS-race hazard checks. docs/emulator.md.

    codeobjects   the one place code objects and kernel specs come from (the package's build API)
    loader        ELF, kernel descriptor, metadata; the listing decoded and proven to be the object
    isa_regs, isa_valu, isa_valu_ops, isa_valu_special, isa_scalar, isa_mem
                               instruction semantics compiled to closures (operands; VALU; SALU / SOPP; memory, MFMA)
    mfma, numerics             v_mfma_* semantics and the fp8 / bf16 / f16 conversions
    machine       launches: workgroups, waves, barriers, LDS, hazards;  memory: registered buffers
    hip           an emulated hip-python backend for runtime/launch.py (fusedgemm.testing.emulate)
    runner, snippet            helpers for tests: run a kernel with packed arguments; a few instructions
    python -m fusedgemm.testing.emulator   opcode coverage of every AMD code object
"""
