"""The documentation site builds with strict link checking, in both languages, and every
page has a place in its navigation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docsite.pages import ROOT, TRANSLATED, english_pages, nav_pages


def test_build_is_strict_and_has_both_languages(built_site: Path) -> None:
    for page in ("index.html", "cli/index.html", "getting-started/index.html",
                 "zh/index.html", "zh/cli/index.html", "zh/getting-started/index.html"):
        assert (built_site / page).is_file(), page
    assert "快速上手" in (built_site / "zh/getting-started/index.html").read_text()
    assert (built_site / "search/search_index.json").is_file()


def test_every_page_is_in_the_navigation() -> None:
    missing = sorted(set(english_pages()) - set(nav_pages()))
    assert not missing, f"pages in no section of mkdocs.yml's nav: {missing}"
    unknown = sorted(set(nav_pages()) - set(english_pages()))
    assert not unknown, f"nav names pages that do not exist: {unknown}"


def test_the_scale_model_plot_is_on_the_performance_page(built_site: Path) -> None:
    assert (built_site / "scaling.png").stat().st_size > 1000
    assert 'src="../scaling.png"' in (built_site / "scaling/index.html").read_text()


def test_pages_without_a_translation_say_so_on_the_chinese_site(built_site: Path) -> None:
    assert "本页尚未翻译" in (built_site / "zh/engine/index.html").read_text()
    assert "本页尚未翻译" not in (built_site / "zh/launching/index.html").read_text()
    assert "本页尚未翻译" not in (built_site / "engine/index.html").read_text()


@pytest.mark.parametrize("page", [p for p in TRANSLATED if p != "index"])
def test_translated_pages_are_rendered_in_chinese(built_site: Path, page: str) -> None:
    html = (built_site / "zh" / page / "index.html").read_text()
    assert '<html lang="zh"' in html
    assert "本页尚未翻译" not in html, f"zh/{page}/ shows the English page"
    title = re.search(r"<h1[^>]*>(.*?)</h1>", html, re.S)
    assert title and re.search(r"[\u4e00-\u9fff]", title.group(1)), \
        f"zh/{page}/'s title is not Chinese: {title and title.group(1)!r}"


def test_the_scale_model_plot_is_on_the_chinese_performance_page(built_site: Path) -> None:
    assert 'src="../../scaling.png"' in (built_site / "zh/scaling/index.html").read_text()


def test_the_readmes_link_to_files_that_exist() -> None:
    for readme in ("README.md", "README.zh-CN.md"):
        text = (ROOT / readme).read_text()
        targets = [t for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
                   if "://" not in t]
        assert targets, readme
        missing = [t for t in targets if not (ROOT / t).exists()]
        assert not missing, f"{readme} links to missing files: {missing}"
