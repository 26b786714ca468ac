"""The package's import graph has no cycle: every module of pkg/fusedgemm, its module-level AND function-level
imports (relative ones resolved), read with `ast` -- nothing is imported. A cycle fails the test and is printed
module -> module, so the module that imports back can be moved or split (each op module registers its own
torch.library op; shared helpers live below the modules that use them)."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "pkg" / "fusedgemm"


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (a package is its __init__.py)."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict) -> set[str]:
    """The package modules `name` imports anywhere in its file. `from X import y` is an edge to X.y when that is a
    module, else to X; `import a.b.c` to a.b.c (its parents are not counted: a submodule's import runs them
    first, but they are not what the code depends on)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in known else mod for alias in node.names]
        else:
            continue
        edges.update(t for t in targets if t in known and t != name)
    return edges


def cycles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """The strongly connected components of more than one module (Tarjan): (its modules, one cycle through it)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append((sorted(comp), _one_cycle(graph, set(comp))))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _one_cycle(graph, comp: set) -> list[str]:
    """A path start -> ... -> start inside one component (breadth first, so it is a short one)."""
    start = min(comp)
    prev, queue = {start: None}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & comp):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return sorted(comp)


def test_the_package_has_no_import_cycle():
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    found = cycles(graph)
    assert not found, "import cycles (function-level imports included):\n" + "\n".join(
        f"  {len(members)} modules import each other: {', '.join(members)}; one cycle: {' -> '.join(cycle)}"
        for members, cycle in found)


def test_the_checker_finds_a_cycle_and_resolves_relative_imports(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [(["a", "b", "c"], ["a", "b", "c", "a"])]
    assert cycles({"a": {"b"}, "b": set()}) == []
    known = {"fusedgemm": 0, "fusedgemm.matmul": 0, "fusedgemm.plan": 0, "fusedgemm.plan.call": 0,
             "fusedgemm.epilogue": 0, "fusedgemm.epilogue.ir": 0}
    src = tmp_path / "call.py"
    src.write_text("from ..epilogue.ir import operands\nfrom . import plan_for\n\ndef f():\n"
                   "    from ..matmul import matmul_fused\n    import fusedgemm.epilogue\n")
    assert imports_of("fusedgemm.plan.call", src, known) == {"fusedgemm.epilogue.ir", "fusedgemm.plan",
                                                              "fusedgemm.matmul", "fusedgemm.epilogue"}
