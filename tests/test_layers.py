"""The layers of harness/: a subpackage imports only from the layers below it, never upward, never a sibling
of its own layer, so no import cycle can form between subpackages. Every import counts, module-level and
in-function alike (an in-function import is a deferred one, not an exempt one).

    spec, data  <  core  <  backends  <  run  <  report, bench, codegen  <  pytest_plugin, cli

spec: the spec model and files; data: package data; core: cases, tensors, comparison; backends: the
adapters; run: the engine and what a run writes; report, bench, codegen: consumers of runs and specs;
pytest_plugin and cli: the two front ends.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "harness"

LAYERS: list[set[str]] = [
    {"spec", "data"},
    {"core"},
    {"backends"},
    {"run"},
    {"report", "bench", "codegen"},
    {"model"},  # opconform model: runs the cases (run) and writes its page (report)
    {"pytest_plugin", "cli"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}

# Known exceptions, (importing subpackage, imported subpackage), each with the reason it is not fixed yet.
# Keep this short: a new upward import fails the test.
ALLOWED: dict[tuple[str, str], str] = {}


def subpackage(module: str) -> str | None:
    """harness.run.engine -> run; harness.cli -> cli; anything outside harness -> None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 else None


def imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in the file, at any depth (functions, classes, try blocks)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # `from harness import run` imports the subpackage run
            if module == "harness":
                found += [(node.lineno, f"harness.{alias.name}") for alias in node.names]
    return found


def edges(root: Path = HARNESS) -> list[tuple[str, str, str, int, str]]:
    """(importer subpackage, imported subpackage, file, line, module) for every import across subpackages."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if "templates" in rel.parts:
            continue
        importer = rel.parts[0].removesuffix(".py")
        package = ".".join(("harness",) + rel.parts[:-1])  # the package a relative import starts from
        for line, module in imports(path, package):
            imported = subpackage(module)
            if imported and imported != importer:
                out.append((importer, imported, str(path.relative_to(root.parent)), line, module))
    return out


def violations(root: Path = HARNESS) -> list[str]:
    problems = []
    for importer, imported, file, line, module in edges(root):
        if (importer, imported) in ALLOWED:
            continue
        if importer not in RANK or imported not in RANK:
            unknown = importer if importer not in RANK else imported
            problems.append(f"{file}:{line}: imports {module}; subpackage '{unknown}' has no layer: add it to LAYERS")
        elif RANK[imported] > RANK[importer]:
            problems.append(f"{file}:{line}: imports {module}: {importer} (layer {RANK[importer]}) must not import "
                            f"{imported} (layer {RANK[imported]}), an upward import")
        elif RANK[imported] == RANK[importer]:
            problems.append(f"{file}:{line}: imports {module}: {importer} and {imported} are siblings in one layer")
    return problems


def graph_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle of a directed graph found by a depth-first walk, as the path that closes it."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return found


def cycles(root: Path = HARNESS) -> list[list[str]]:
    """Cycles in the subpackage graph, allowed exceptions included (an allowed edge must not close a circle)."""
    graph: dict[str, set[str]] = {}
    for importer, imported, *_ in edges(root):
        graph.setdefault(importer, set()).add(imported)
    return graph_cycles(graph)


def test_no_upward_or_sideways_import():
    problems = violations()
    assert not problems, "imports against the layers (tests/test_layers.py):\n" + "\n".join(problems)


def test_no_import_cycle_between_subpackages():
    assert not cycles(), cycles()


def test_every_subpackage_has_a_layer():
    names = {p.name for p in HARNESS.iterdir() if p.is_dir() and not p.name.startswith("__")
             and any(p.rglob("*.py"))} | {p.stem for p in HARNESS.glob("*.py") if p.stem != "__init__"}
    assert names <= set(RANK), sorted(names - set(RANK))


def test_allowed_exceptions_are_still_needed():
    seen = {(importer, imported) for importer, imported, *_ in edges()}
    assert set(ALLOWED) <= seen, f"allowed but no longer imported, remove them: {sorted(set(ALLOWED) - seen)}"


@pytest.mark.parametrize("planted, expect", [
    ("def f():\n    from harness.run.engine import run_cases\n", "upward import"),  # in-function
    ("from harness import report\n", "upward import"),
    ("from ..report import model\n", "upward import"),  # relative
])
def test_a_planted_upward_import_fails(tmp_path, planted, expect):
    root = tmp_path / "harness"
    (root / "core").mkdir(parents=True)
    (root / "report").mkdir()
    (root / "run").mkdir()
    (root / "core" / "__init__.py").write_text("")
    (root / "core" / "planted.py").write_text("import os\n\n" + planted)
    (root / "report" / "model.py").write_text("from harness.core import planted\n")
    problems = violations(root)
    assert len(problems) == 1 and expect in problems[0] and "harness/core/planted.py:" in problems[0], problems


# An in-function import of a project module says why it is not at the top: `# lazy: <reason>` on its line, the
# reason being start-up time (what --help, a warm run or a worker would load for nothing) or an import cycle.
LAZY_REASON = re.compile(r"#\s*lazy:\s*\S.{4,}")


def unexplained_lazy_imports(source: str, module: str) -> list[str]:
    """'module:line import' for each import of harness or reference inside a function without a `# lazy:` reason."""
    comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [child.module or ""] if isinstance(child, ast.ImportFrom) else [a.name for a in child.names]
                project = getattr(child, "level", 0) or any(n.split(".")[0] in ("harness", "reference") for n in names)
                lines = range(child.lineno, (child.end_lineno or child.lineno) + 1)
                if project and not any(LAZY_REASON.search(comments.get(n, "")) for n in lines):
                    found.append(f"{module}:{child.lineno} {ast.unparse(child)}: hoist it to the top of the module, "
                                 "or say why not (# lazy: <reason>)")
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source), False)
    return found


def test_every_in_function_import_of_the_project_says_why_it_is_lazy():
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        found += unexplained_lazy_imports(path.read_text(), str(path.relative_to(HARNESS.parent)))
    assert not found, "\n".join(found)


def test_a_planted_unexplained_lazy_import_fails():
    planted = ("import json\nfrom harness.core import cases\n\n\ndef f():\n    from harness.run import gate\n"
               "    from harness.run import rundir  # lazy: reading a run loads no specs\n    from . import sibling\n"
               "    import numpy\n    from harness.core import dtypes  # see above\n")
    found = unexplained_lazy_imports(planted, "harness/x.py")
    assert [f.split(" ")[0] for f in found] == ["harness/x.py:6", "harness/x.py:8", "harness/x.py:10"], found


def module_cycles(root: Path = HARNESS) -> list[list[str]]:
    """Cycles between harness modules through their module-level imports (those under `if TYPE_CHECKING:` left
    out): a cycle there makes import order matter (cases and tensors once needed an in-function import for it)."""
    modules = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in root.rglob("*.py") if "templates" not in p.parts}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            for child in ast.walk(node):
                if isinstance(child, ast.Import):
                    graph[name] |= {a.name for a in child.names if a.name in modules}
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        base = ".".join(package.split(".")[: len(package.split(".")) - child.level + 1]
                                        + ([child.module] if child.module else []))
                    for alias in child.names:  # `from pkg import sub` imports the submodule pkg.sub
                        target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                        if target in modules and target != name:
                            graph[name].add(target)
    return graph_cycles(graph)


def test_no_import_cycle_between_modules():
    assert not module_cycles(), module_cycles()


def test_a_planted_module_cycle_is_found(tmp_path):
    root = tmp_path / "harness"
    (root / "core").mkdir(parents=True)
    (root / "core" / "__init__.py").write_text("")
    (root / "core" / "cases.py").write_text("from harness.core.tensors import make\n")
    (root / "core" / "tensors.py").write_text("from harness.core import cases\n")
    (root / "core" / "shapes.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.core import cases\n")
    assert module_cycles(root) == [["harness.core.cases", "harness.core.tensors", "harness.core.cases"]]


def test_a_planted_cycle_is_found(tmp_path):
    root = tmp_path / "harness"
    for name, target in (("core", "backends"), ("backends", "core")):
        (root / name).mkdir(parents=True)
        (root / name / "m.py").write_text(f"from harness.{target} import m\n")
    assert cycles(root) == [["backends", "core", "backends"]]
