"""The remote programs import only what their hosts are sure to have: the ones run by file
path (bind_exec, session_guard) nothing but the standard library, the others nothing beyond
it and gcurun's own stdlib-only modules (run_function may load cloudpickle for the
function it runs)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import gcurun.launch.remote as remote

HERE = Path(remote.__file__).parent
BY_PATH = ("bind_exec", "session_guard")
STDLIB_ONLY_GCURUN = ("gcurun", "gcurun.errors", "gcurun.hosts.slurm", "gcurun.launch",
                      "gcurun.launch.remote", "gcurun.rendezvous", "gcurun.rendezvous.wire")
EXTRA = {"run_function": {"cloudpickle"}}


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def allowed(name: str, program: str) -> bool:
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top == "__future__" or top in EXTRA.get(program, ()):
        return True
    if program in BY_PATH:
        return False
    return name in STDLIB_ONLY_GCURUN or name.startswith("gcurun.launch.remote.")


@pytest.mark.parametrize("path", sorted(HERE.glob("*.py")), ids=lambda p: p.stem)
def test_a_remote_program_imports_only_what_its_host_has(path):
    bad = sorted(name for name in imports(path) if not allowed(name, path.stem))
    assert bad == [], f"{path.name} imports {bad}"
