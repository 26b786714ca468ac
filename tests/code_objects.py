"""Reading built code objects in tests: the SASS of a cubin, whole or per kernel (cuobjdump from PyPI)."""
import re
import subprocess

from fusedgemm.runtime.compilers import find_nvidia_tool


def sass(path) -> str:
    """cuobjdump -sass of the cubin at `path`."""
    return subprocess.run([find_nvidia_tool("cuobjdump"), "-sass", str(path)], check=True, capture_output=True,
                          text=True).stdout


def sass_functions(path) -> dict:
    """{kernel name: its SASS} of the cubin at `path`."""
    funcs, cur = {}, None
    for line in sass(path).splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
        elif cur:
            funcs[cur].append(line)
    return {k: "\n".join(v) for k, v in funcs.items()}
