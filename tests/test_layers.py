"""Structure of the gcbench package, read from its source (pure AST: nothing of gcbench is
imported, so this runs in well under a second).

The import graph has one node per module (file) of `gcbench/` and one edge per import
statement that names a gcbench module, wherever the statement stands: at module level,
inside a function (lazy imports), in a `try`. Rules of resolution, as grimp (the graph
of import-linter) has them:

- `import gcbench.a.b` and `from gcbench.a import b` (b a submodule) are edges to
  `gcbench.a.b`; `from gcbench.a import name` (name not a submodule) is an edge to
  `gcbench.a` (its `__init__.py`). Importing `gcbench.a.b` also runs `gcbench/a/__init__`,
  but that implicit edge to a parent package is not counted (it would turn every package
  that re-exports its submodules into a cycle).
- Imports under `if TYPE_CHECKING:` never execute and are NOT edges of the graph that
  the cycle rule checks; `typing_edges()` keeps them apart (the cycle report of
  `python tests/test_layers.py` gives the counts with and without them).
- `importlib.import_module(...)` is not followed (the two uses, in `compress/__init__`
  and `compress/registry`, load modules of their own package).

The rules (each failure lists every offender as `file:line`):

- no cycle between modules: the strongly connected components of the graph, each with
  the import lines that lie inside it;
- no module over MAX_MODULE_LINES physical lines;
- no function over MAX_FUNCTION_LINES lines. A function's length is counted from its
  first body statement (docstring included) to its last line: the signature and the
  decorators are not counted, which is what exempts the typer option declarations of
  the commands in `gcbench/cli.py` (they are all in signatures); a nested function's
  lines count towards the function that holds it, too;
- no private name crosses a module: no `from m import _x` and no `m._x` (m bound to a
  gcbench module by an import) outside m. Dunder names (`__version__`) are public. A
  private module (a path component `_x`, e.g. `gcbench.compress._threelc_jit`) may be
  imported only by modules of the package that holds it (`gcbench.compress.*`).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gcbench"

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name (a gcbench module)
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`
    names: tuple[str, ...]  # the names of `from imported import ...`, else ()

    def where(self) -> str:
        return f"{rel(self.importer)}:{self.line}"


@cache
def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of gcbench."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def rel(module: str) -> str:
    return modules()[module].relative_to(ROOT).as_posix()


def is_package(module: str) -> bool:
    return modules()[module].name == "__init__.py"


@cache
def tree(module: str) -> ast.Module:
    path = modules()[module]
    return ast.parse(path.read_text(), filename=str(path))


def _known(dotted: str) -> str | None:
    """The longest prefix of `dotted` that is a gcbench module."""
    parts = dotted.split(".")
    while parts:
        name = ".".join(parts)
        if name in modules():
            return name
        parts.pop()
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module = module
        self.found: list[Import] = []
        self.typing = False

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            was, self.typing = self.typing, True
            for child in node.body:
                self.visit(child)
            self.typing = was
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def add(self, target: str | None, line: int, names: tuple[str, ...] = ()) -> None:
        if target is not None and target != self.module:
            self.found.append(Import(self.module, target, line, self.typing, names))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == "gcbench":
                self.add(_known(alias.name), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            anchor = self.module.split(".")
            if not is_package(self.module):
                anchor.pop()
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if base.split(".")[0] != "gcbench":
            return
        plain = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in modules():
                self.add(sub, node.lineno)
            else:
                plain.append(alias.name)
        if plain:
            self.add(_known(base), node.lineno, tuple(plain))


@cache
def imports() -> tuple[Import, ...]:
    """Every import of a gcbench module by a gcbench module, lazy ones included."""
    found: list[Import] = []
    for module in modules():
        visitor = _Imports(module)
        visitor.visit(tree(module))
        found += visitor.found
    return tuple(found)


def runtime_edges() -> list[Import]:
    return [i for i in imports() if not i.typing_only]


def typing_edges() -> list[Import]:
    return [i for i in imports() if i.typing_only]


def cycles(edges: list[Import]) -> list[tuple[list[str], list[Import]]]:
    """Strongly connected components of more than one module (Tarjan), each with the
    edges inside it, largest first."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[e.importer].add(e.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[list[str]] = []

    def connect(v: str) -> None:  # recursion depth <= number of modules (~110)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
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
                comps.append(sorted(comp))

    for v in sorted(modules()):
        if v not in index:
            connect(v)
    out = []
    for comp in sorted(comps, key=lambda c: (-len(c), c)):
        members = set(comp)
        inside = [e for e in edges if e.importer in members and e.imported in members]
        out.append((comp, sorted(inside, key=lambda e: (e.importer, e.line))))
    return out


def format_cycles(found: list[tuple[list[str], list[Import]]]) -> str:
    lines = []
    for comp, inside in found:
        lines.append(f"cycle of {len(comp)} modules: {', '.join(comp)}")
        lines += [f"  {e.where()}: imports {e.imported}" for e in inside]
    return "\n".join(lines)


def long_modules() -> list[str]:
    found = []
    for module, path in modules().items():
        n = len(path.read_text().splitlines())
        if n > MAX_MODULE_LINES:
            found.append(f"{rel(module)}:1: {n} lines (max {MAX_MODULE_LINES})")
    return found


def function_lengths() -> list[tuple[str, int, str, int]]:
    """(file, line of `def`, qualified name, length as defined above) of every function."""
    found = []

    def walk(node: ast.AST, prefix: str, file: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                length = child.end_lineno - child.body[0].lineno + 1
                found.append((file, child.lineno, name, length))
                walk(child, f"{name}.", file)
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.", file)
            else:
                walk(child, prefix, file)

    for module in modules():
        walk(tree(module), "", rel(module))
    return found


def long_functions() -> list[str]:
    return [
        f"{file}:{line}: {name} is {n} lines (max {MAX_FUNCTION_LINES})"
        for file, line, name, n in sorted(function_lengths(), key=lambda f: -f[3])
        if n > MAX_FUNCTION_LINES
    ]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module_owner(module: str) -> str | None:
    """The package whose modules alone may import `module`, if `module` is private."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[:i])
    return None


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """`a.b.c` as a module name, its first name resolved through `bound`."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value, bound)
        return None if head is None else f"{head}.{node.attr}"
    return None


def private_crossings() -> list[str]:
    found = []
    for e in imports():
        owner = _private_module_owner(e.imported)
        if owner is not None and e.importer != owner and not e.importer.startswith(owner + "."):
            found.append(f"{e.where()}: imports private module {e.imported}")
        for name in e.names:
            if _private(name):
                found.append(f"{e.where()}: imports {e.imported}.{name}")
    # `m._x` where m names a gcbench module: bound by `import gcbench.a.m as m` or
    # `from gcbench.a import m`, or spelled out after `import gcbench...`
    for module in modules():
        bound: dict[str, str] = {}
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in modules():
                        bound[alias.asname] = alias.name
                    elif not alias.asname and alias.name.split(".")[0] == "gcbench":
                        bound["gcbench"] = "gcbench"
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    if sub in modules():
                        bound[alias.asname or alias.name] = sub
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                target = _dotted(node.value, bound)
                if target in modules() and target != module:
                    found.append(f"{rel(module)}:{node.lineno}: reads {target}.{node.attr}")
    return sorted(set(found))


def test_no_cycles_between_modules():
    found = cycles(runtime_edges())
    if found:
        pytest.fail(f"{len(found)} import cycles:\n{format_cycles(found)}", pytrace=False)


def test_no_module_over_800_lines():
    found = long_modules()
    if found:
        pytest.fail("\n".join(found), pytrace=False)


def test_no_function_over_120_lines():
    found = long_functions()
    if found:
        pytest.fail("\n".join(found), pytrace=False)


def test_no_private_name_read_outside_its_module():
    found = private_crossings()
    if found:
        pytest.fail("\n".join(found), pytrace=False)


def test_the_graph_is_read():
    """The rules above would pass vacuously if the graph were empty."""
    edges = runtime_edges()
    assert len(modules()) > 50 and len(edges) > 100
    assert any(e.importer == "gcbench.backends.simulate" for e in edges)


def test_cycles_finds_a_component_and_its_edges():
    a, b, c = "gcbench.errors", "gcbench.files", "gcbench.cli"
    edges = [Import(a, b, 1, False, ()), Import(b, a, 2, False, ()), Import(c, a, 3, False, ())]
    assert cycles(edges) == [([a, b], edges[:2])]


if __name__ == "__main__":  # the full report: python tests/test_layers.py
    runtime, typing = runtime_edges(), imports()
    print(
        f"{len(modules())} modules, {len(runtime)} runtime import edges, "
        f"{len(typing_edges())} under TYPE_CHECKING"
    )
    for label, edges in (("runtime", runtime), ("runtime + TYPE_CHECKING", list(typing))):
        found = cycles(edges)
        print(f"\n== cycles, {label} imports: {len(found)}")
        print(format_cycles(found))
    print("\n== long modules\n" + "\n".join(long_modules()))
    print("\n== long functions\n" + "\n".join(long_functions()))
    print("\n== private crossings\n" + "\n".join(private_crossings()))
