"""python -m fusedgemm.testing.emulator [--arch gfx942] [--unit UNIT] [-v]

Opcode coverage of the package's AMD code objects: per arch and unit, the kernels, the mnemonics they use, and
any instruction the emulator does not model (exit status 1 if there is one)."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    from ...runtime.build import units_for
    from ...runtime.codeobject import hsaco_kernels
    from .machine import coverage, unsupported
    from .runner import CodeObject

    p = argparse.ArgumentParser(prog="python -m fusedgemm.testing.emulator", description=__doc__.split("\n\n")[1])
    p.add_argument("--arch", action="append", choices=["gfx942", "gfx950"], help="default: both")
    p.add_argument("--unit", action="append", help="default: every unit of the arch")
    p.add_argument("-v", "--verbose", action="store_true", help="list the mnemonics")
    args = p.parse_args(argv)
    bad = 0
    for arch in args.arch or ["gfx942", "gfx950"]:
        for unit in args.unit or units_for(arch):
            obj = CodeObject.build(unit, arch)
            seen: dict[str, int] = {}
            missing: dict[str, str] = {}
            names = sorted(hsaco_kernels(obj.data))
            for name in names:
                kernel = obj.kernel(name)
                for mn, c in coverage(kernel).items():
                    seen[mn] = seen.get(mn, 0) + c
                missing.update(unsupported(kernel))
            print(f"{arch} {unit}: {len(names)} kernels, {len(seen)} mnemonics, "
                  f"{len(missing)} not modelled")
            if args.verbose:
                print("   " + " ".join(sorted(seen)))
            for mn, msg in sorted(missing.items()):
                print(f"   NOT MODELLED {mn}: {msg}")
            bad += len(missing)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
