"""The runtime's modules import one another one way: no import cycle, lazy imports inside
functions included (a cycle hidden in a function is still two modules that need each
other)."""

from __future__ import annotations

import ast
from pathlib import Path

import gcurun.runtime

ROOT = Path(gcurun.runtime.__file__).parent
PACKAGE = "gcurun.runtime"


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The runtime modules that ``path`` imports, anywhere in it (``if TYPE_CHECKING``
    blocks aside: they never run)."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name in modules}


def test_no_import_cycle_among_the_runtime_modules() -> None:
    paths = {_module_of(p): p for p in ROOT.rglob("*.py")}
    modules = set(paths)
    graph = {name: _imports(path, modules) - {name} for name, path in paths.items()}

    # A package's __init__ importing its own submodules is how packages are made;
    # only cycles between modules that are not a package and its own members count.
    def edges(name: str) -> set[str]:
        return {m for m in graph[name] if not m.startswith(name + ".")}

    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for nxt in sorted(edges(name)):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert cycles == []
