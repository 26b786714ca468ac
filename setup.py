"""setuptools hook: the wheel carries the kernel sources (hip_src/, cuda_src/) as fusedgemm/_src/, so an installed
package builds any code object just in time without a source checkout (runtime/build.py source_root()).
Everything else is in pyproject.toml. An editable install reads the trees in place and copies nothing."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
KERNEL_SOURCE_TREES = ("hip_src", "cuda_src")


class build_py_with_kernel_sources(build_py):
    def _kernel_source_files(self):
        for tree in KERNEL_SOURCE_TREES:
            src = ROOT / tree
            if not src.is_dir():
                raise FileNotFoundError(f"{src}: the kernel sources must be beside setup.py")
            for f in sorted(src.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    yield f, Path(self.build_lib) / "fusedgemm" / "_src" / tree / f.relative_to(src)

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for src, dst in self._kernel_source_files():
            self.mkpath(str(dst.parent))
            self.copy_file(str(src), str(dst), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs += [str(dst) for _, dst in self._kernel_source_files()]
        return outputs


setup(cmdclass={"build_py": build_py_with_kernel_sources})
