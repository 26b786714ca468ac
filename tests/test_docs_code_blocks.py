"""The code in README.md and docs/ stays true: every ```python block of README.md and docs/usage.md compiles and uses
no name it never defined (a file's blocks are one program, run in order), the README example runs on the CPU, and
every block of both runs on a GPU (blocks whose first line is `# gpu` run only there). Commands of
`python -m fusedgemm.bench` in the docs parse, and the repository paths the docs name exist."""
from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import sys
import types
import io
import re
import shlex
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ["README.md", "docs/usage.md"]  # files whose python blocks are checked and run
DOCS = ["README.md", "docs/usage.md", "docs/benchmarks.md", "docs/gpu-testing.md", "docs/results/README.md"]
HAS_GPU = torch.cuda.is_available()


def python_blocks(rel: str) -> list[tuple[int, str]]:
    """(first line number, code) of each ```python block of the file."""
    text = (ROOT / rel).read_text()
    return [(text[:m.start()].count("\n") + 2, m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def needs_gpu(code: str) -> bool:
    return code.lstrip().startswith("# gpu")


def needs_amd_compiler(code: str) -> bool:
    """A block that runs AMD code objects in the emulator: skipped where no clang for AMD targets is installed (the
    GPU machines; CI installs it with the [rocm,build] extras)."""
    return "emulate(" in code and not _amd_compiler()


def _amd_compiler() -> bool:
    from fusedgemm.runtime.compilers import BuildError, Clang

    try:
        Clang()
    except BuildError:
        return False
    return True


# ---- undefined names: a small, sequential pyflakes ------------------------------------------------------------

def _bound_in(node: ast.AST) -> set[str]:
    """Every name a node binds anywhere inside it (assignments, imports, defs, arguments, loop / with / except
    targets, comprehension variables, walrus)."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
    return names


def _loads(node: ast.AST) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def undefined_names(blocks: list[tuple[int, str]], where: str) -> list[str]:
    """Names a program reads before any statement of it (or the statement itself) binds them. A statement's own
    bindings count for it (a loop's target, a lambda's argument, a comprehension's variable)."""
    known = set(dir(builtins))
    missing = []
    for first_line, code in blocks:
        tree = ast.parse(code, filename=where)
        for stmt in tree.body:
            allowed = known | _bound_in(stmt)
            for name in _loads(stmt):
                if name.id not in allowed:
                    missing.append(f"{where}:{first_line + name.lineno - 1}: {name.id}")
            known |= _bound_in(stmt)
    return missing


@pytest.mark.parametrize("rel", PROGRAMS)
def test_python_blocks_compile_and_define_every_name(rel):
    blocks = python_blocks(rel)
    assert blocks, f"{rel} has no python block"
    for line, code in blocks:
        compile(code, f"{rel}:{line}", "exec")
    assert undefined_names(blocks, rel) == []


def test_the_checker_catches_what_the_old_readme_did():
    """The old Quick start used model, w8_gate_up and transformers without defining them."""
    blocks = [(1, "import torch\nx = torch.ones(2)\n"),
              (10, "y = model(x)\nz = [v for v in x]\nf = lambda t: t + w8_gate_up\nimport copy\nc = copy.copy(y)\n"),
              (20, "q = transformers.AutoModel\n")]
    assert undefined_names(blocks, "R") == ["R:10: model", "R:12: w8_gate_up", "R:20: transformers"]


# ---- running the blocks ----------------------------------------------------------------------------------------

def run_program(rel: str, gpu: bool) -> dict:
    # A real module in sys.modules: torch.compile (dynamo) imports a frame's module by its __name__.
    module = types.ModuleType(f"_docs_{Path(rel).stem}")
    sys.modules[module.__name__] = module
    ns = module.__dict__
    for line, code in python_blocks(rel):
        if (needs_gpu(code) and not gpu) or needs_amd_compiler(code):
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"{rel}:{line}", "exec"), ns)
    return ns


def test_readme_example_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the example picks its device with this
    ns = run_program("README.md", gpu=False)
    assert ns["device"] == "cpu"
    y, y8 = ns["y"], ns["y8"]
    assert y.shape == y8.shape == (16, 2048) and y.dtype == y8.dtype == torch.bfloat16
    assert ((y8.float() - y.float()).norm() / y.float().norm()).item() < 0.1  # fp8 rounding, not a wrong answer


def test_usage_blocks_run_on_the_cpu(monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ns = run_program("docs/usage.md", gpu=False)
    assert ns["device"] == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU")
@pytest.mark.parametrize("rel", PROGRAMS)
def test_every_block_runs_on_a_gpu(rel):
    pytest.importorskip("transformers")
    ns = run_program(rel, gpu=True)
    assert ns["device"] == "cuda"


# ---- commands and paths the docs name --------------------------------------------------------------------------

def bench_commands() -> list[tuple[str, list[str]]]:
    """Each `python -m fusedgemm.bench ...` command of the docs (inline code or a line of a code block), without
    comments and trailing shell redirections."""
    found = []
    for rel in DOCS:
        for m in re.finditer(r"python3? -m fusedgemm\.bench ([^`\n#|>]*)", (ROOT / rel).read_text()):
            if not re.search(r"[$\[]|\.\.\.", m.group(1)):  # not a template: "$BENCH_ARGS", "[--dtype X]", "..."
                found.append((rel, shlex.split(m.group(1))))
    return found


def test_the_docs_name_bench_commands():
    assert len(bench_commands()) >= 8


@pytest.mark.parametrize("rel, argv", bench_commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_bench_commands_in_the_docs_parse(rel, argv):
    """The subcommand exists and argparse takes its options (nothing runs: parse_args stops the program)."""
    import fusedgemm.bench.__main__ as bench_main

    if argv == ["--help"]:
        with contextlib.redirect_stdout(io.StringIO()):
            assert bench_main.main(argv) == 0
        return
    assert argv and argv[0] in bench_main.SUBCOMMANDS, f"{rel}: unknown subcommand in {argv}"
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, *a, **k):
        real(self, *a, **k)
        raise SystemExit(0)

    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        mp.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        with pytest.raises(SystemExit) as e:
            bench_main.main(argv)
    assert e.value.code == 0, f"{rel}: {' '.join(argv)}: {err.getvalue()}"


# A repository path; one after "<commit>:" names a file of that commit's tree (history), not of this one.
PATH_RE = re.compile(r"(?<![\w./:-])((?:docs|scripts|tools|tests|pkg|hip_src|cuda_src|ci|\.ci)/[\w./*-]*[\w/*])")


@pytest.mark.parametrize("rel", DOCS)
def test_paths_the_docs_name_exist(rel):
    text = (ROOT / rel).read_text()
    paths = {m.group(1).rstrip("/.") for m in PATH_RE.finditer(text)}
    missing = sorted(p for p in paths if not any(ROOT.glob(p)) and "*" not in p and "<" not in p)
    assert not missing, f"{rel} names paths that do not exist: {missing}"
