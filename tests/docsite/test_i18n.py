"""The Chinese pages keep step with the English: no page in one language only among the
translated ones, and the same code blocks (commands and programs; comments may be
translated) in both."""

from __future__ import annotations

import re

import pytest

from docsite.pages import (
    DOCS,
    ROOT,
    TRANSLATED,
    chinese_pages,
    code_blocks,
    english_pages,
    without_comments,
)


def test_every_chinese_page_has_its_english_page() -> None:
    orphans = sorted(set(chinese_pages()) - set(english_pages()))
    assert not orphans, f"Chinese pages without an English page: {orphans}"


def test_the_translated_pages_exist_in_both_languages() -> None:
    missing = sorted(set(TRANSLATED) - set(chinese_pages()))
    assert not missing, f"pages without their Chinese twin (docs/NAME.zh.md): {missing}"


def _blocks(path) -> list[str]:
    return [without_comments(block) for block in code_blocks(path.read_text())]


@pytest.mark.parametrize("page", chinese_pages())
def test_both_languages_have_the_same_code_blocks(page: str) -> None:
    english, chinese = _blocks(DOCS / f"{page}.md"), _blocks(DOCS / f"{page}.zh.md")
    assert chinese == english, f"docs/{page}.zh.md's code blocks differ from docs/{page}.md's"


def _indented_lines(path) -> list[str]:
    """Lines indented as code (4 spaces or more), inside list items too, as GitHub shows
    them: the README's nested commands, which Python-Markdown does not read as code."""
    lines = re.findall(r"^ {4,}(\S.*)$", path.read_text(), re.M)
    return [kept for line in lines if (kept := without_comments(line))]


def test_the_readmes_have_the_same_commands() -> None:
    english, chinese = ROOT / "README.md", ROOT / "README.zh-CN.md"
    assert _blocks(chinese) == _blocks(english)
    assert _indented_lines(chinese) == _indented_lines(english)
    assert "bash tests/setup-and-run.sh" in _indented_lines(english)


def test_comments_are_what_may_differ() -> None:
    assert without_comments("gcurun -np 2 python x.py   # two ranks\n# note\n") == \
        without_comments("gcurun -np 2 python x.py   # 两个 rank\n")
    assert without_comments("gcurun -H node[1-2]:8 x") == "gcurun -H node[1-2]:8 x"
