"""MkDocs hook (mkdocs.yml ``hooks:``): fills the CLI reference page from gcurun's click
commands, so the reference is never written by hand and always matches ``--help``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The docs build imports this checkout's gcurun. MkDocs restores sys.path after loading a
# hook, so everything the hook needs is imported now.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gcurun.cli.main  # noqa: E402, F401
from docsite.cli_reference import MARKER, command_records, render_markdown  # noqa: E402


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render_markdown(command_records()))
