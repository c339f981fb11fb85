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

UNTRANSLATED_NOTE = ('!!! note "本页尚未翻译"\n    本页暂时只有英文版；'
                     '[首页](index.md)列出了已有中文版的页面。\n\n')


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, render_markdown(command_records()))
    if _chinese_build(config) and not page.file.src_uri.endswith(".zh.md"):
        # The i18n plugin shows a page without a Chinese twin in English: say so.
        title, _, rest = markdown.partition("\n")
        markdown = f"{title}\n\n{UNTRANSLATED_NOTE}{rest}"
    return markdown


def _chinese_build(config: Any) -> bool:
    return str(config["theme"]["language"]).startswith("zh")
