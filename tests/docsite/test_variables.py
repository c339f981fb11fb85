"""Every ``GCURUN_*`` variable the documentation names is one the code reads or sets: a
settings key's variable, or a name in gcurun's (or the test suite's) source."""

from __future__ import annotations

import re

from docsite.pages import DOCS, ROOT
from gcurun.config.schema import KEYS

_NAME = re.compile(r"\bGCURUN_[A-Z0-9_]*[A-Z0-9]\b")


def _known() -> set[str]:
    names = {key.environ_name for key in KEYS if key.environ_name}
    for folder in ("gcurun", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            names.update(_NAME.findall(path.read_text(errors="replace")))
    return names


def test_documented_variables_exist() -> None:
    documented = {}
    for path in [*DOCS.glob("*.md"), *ROOT.glob("README*.md")]:
        for name in _NAME.findall(path.read_text()):
            documented.setdefault(name, path.name)
    known = _known()
    unknown = {name: page for name, page in documented.items() if name not in known}
    assert not unknown, f"variables the docs name but the code does not know: {unknown}"
