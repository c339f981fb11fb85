"""The site's pages as data, for the tests: which pages exist in which language, their
code blocks, and the blocks marked to run."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

import markdown
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUNNABLE_MARK = "<!-- runnable -->"
# Pages the Chinese site must have (the rest may show in English there).
TRANSLATED = ("index", "getting-started", "launching", "profiles", "ssh", "mpi-options",
              "schedulers", "torch", "horovod-gcu-recipes", "troubleshooting",
              "migrating-from-horovodrun", "cli", "slurm", "mpi-and-binding", "clusters",
              "tensorflow", "elastic", "runtime", "configuration", "autotune",
              "frameworks", "library", "ray", "spark", "scaling", "benchmarks",
              "horovod-alias")


def english_pages() -> list[str]:
    """Names of the English pages (docs/NAME.md), sorted."""
    return sorted(p.stem for p in DOCS.glob("*.md") if not p.stem.endswith(".zh"))


def chinese_pages() -> list[str]:
    """Names of the pages with a Chinese twin (docs/NAME.zh.md), sorted."""
    return sorted(p.name.removesuffix(".zh.md") for p in DOCS.glob("*.zh.md"))


def nav_pages() -> list[str]:
    """The pages the site's navigation lists, in order."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_IgnoreTags)
    found: list[str] = []

    def walk(item: object) -> None:
        if isinstance(item, str):
            found.append(item.removesuffix(".md"))
        elif isinstance(item, dict):
            for value in item.values():
                walk(value)
        elif isinstance(item, list):
            for value in item:
                walk(value)

    walk(config["nav"])
    return found


class _IgnoreTags(yaml.SafeLoader):
    """mkdocs.yml may hold !!python tags; the nav needs none of them."""


_IgnoreTags.add_multi_constructor("", lambda loader, suffix, node: None)

_CODE = re.compile(r"<pre[^>]*><code[^>]*>(.*?)</code></pre>", re.S)


def code_blocks(text: str) -> list[str]:
    """The contents of every code block of a Markdown text (fenced or indented, in lists
    too), in order, as Python-Markdown reads them."""
    rendered = markdown.markdown(
        text, extensions=["pymdownx.superfences", "pymdownx.highlight", "tables", "def_list",
                          "attr_list", "admonition"],
        extension_configs={"pymdownx.highlight": {"use_pygments": False}})
    return [html.unescape(block) for block in _CODE.findall(rendered)]


_COMMENT = re.compile(r"(^|\s)#(?![\w\[-]*[:\]]).*$")


def without_comments(block: str) -> str:
    """``block`` without its ``#`` comments and trailing blanks: the part of a command or
    program that a translation keeps."""
    lines = [_COMMENT.sub("", line).rstrip() for line in block.splitlines()]
    return "\n".join(line for line in lines if line)


@dataclass(frozen=True)
class Runnable:
    """A block to run: ``bash`` or ``python`` code that must succeed, or a ``console``
    session of ``$ command`` lines, each followed by the first lines of its output."""

    page: str
    language: str  # "bash", "python" or "console"
    code: str

    def session(self) -> list[tuple[str, list[str]]]:
        """A console block's commands, each with the output lines shown after it."""
        steps: list[tuple[str, list[str]]] = []
        for line in self.code.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
        return steps


_RUNNABLE = re.compile(r"<!-- runnable(?:: output)? -->\n```(bash|python|console)\n(.*?)\n```",
                       re.S)


def runnable_blocks(page: str) -> list[Runnable]:
    """The blocks of docs/PAGE.md marked ``<!-- runnable -->`` (code that must succeed) or
    ``<!-- runnable: output -->`` (a console session whose output must match) on the line
    before."""
    text = (DOCS / f"{page}.md").read_text()
    return [Runnable(page, lang, code) for lang, code in _RUNNABLE.findall(text)]
