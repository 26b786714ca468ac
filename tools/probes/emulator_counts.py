#!/usr/bin/env python3
"""What the emulator suite executes, per AMD arch: README's "executed (emulated)" column.

Runs the emulator tests with FUSEDGEMM_EMULATOR_LOG (one line per emulated launch: arch, kernel, grid, block,
seconds), then counts per arch the distinct kernels executed -- shipped (in the arch's code objects) and generated
just in time (expression epilogues) -- and the launches (the cases the tests check against their oracles). The
planted-bug tests (test_emulator_hazards.py) run mutated code objects and are left out of the counts.

    python tools/probes/emulator_counts.py            # runs the tests (a few minutes on 2 cores)
    python tools/probes/emulator_counts.py LOG        # counts an existing log of the suite without the hazards file
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_suite(log: Path) -> None:
    tests = sorted(str(p) for p in (ROOT / "tests").glob("test_emulator_*.py") if p.name != "test_emulator_hazards.py")
    env = dict(os.environ, FUSEDGEMM_EMULATOR_LOG=str(log))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=ROOT, env=env,
                   check=True)


def shipped(arch: str) -> set[str]:
    from fusedgemm.runtime.build import units_for
    from fusedgemm.runtime.codeobject import hsaco_kernels
    from fusedgemm.testing.emulator.runner import CodeObject

    return {name for unit in units_for(arch) for name in hsaco_kernels(CodeObject.build(unit, arch).data)}


def main(argv: list[str]) -> int:
    if argv:
        log = Path(argv[0])
    else:
        log = Path(tempfile.mkdtemp()) / "emulator.log"
        run_suite(log)
    launches: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in log.read_text().splitlines():
        arch, name = line.split("\t")[:2]
        if name.startswith("fg_"):  # the package's kernels (not the tests' hand-written snippets)
            launches[arch][name] += 1
    for arch in ("gfx942", "gfx950"):
        ran, ship = launches[arch], shipped(arch)
        n_ship = len(set(ran) & ship)
        print(f"{arch}: {len(ran)} kernels executed ({n_ship} of the {len(ship)} shipped, {len(ran) - n_ship} "
              f"generated just in time), {sum(ran.values())} launches")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
