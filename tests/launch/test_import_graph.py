"""The launch layer's imports point down: nothing that prepare or execute use imports
them back, and no module of gcurun imports itself round a circle (every import counts,
those inside functions and under TYPE_CHECKING too)."""

from __future__ import annotations

import ast
from pathlib import Path

import gcurun

PACKAGE = Path(gcurun.__file__).parent
# The pipelines above prepare and execute: they call them, as the CLI does.
CALLERS = {"gcurun.launch.library", "gcurun.launch.elastic"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the gcurun modules it imports (``from a import b`` names a.b where that
    is a module, else a)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules
                              else base)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                found.add(frozenset(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_nothing_below_prepare_and_execute_imports_them():
    top = {"gcurun.launch.prepare", "gcurun.launch.execute"}
    back = sorted(f"{m} -> {t}" for m, targets in import_graph().items()
                  if m.startswith("gcurun.launch.") and m not in top
                  and not any(m == c or m.startswith(c + ".") for c in CALLERS)
                  for t in targets & top)
    assert back == []


def test_no_import_cycle_anywhere_in_gcurun():
    assert cycles(import_graph()) == set()


def test_no_import_cycle_in_the_launch_layer():
    launch = {m: {t for t in ts if t.startswith("gcurun.launch")}
              for m, ts in import_graph().items() if m.startswith("gcurun.launch")}
    assert cycles(launch) == set()
