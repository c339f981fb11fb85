"""The CLI reference page is generated from the click commands and says what
``gcurun ... --help`` says: the same commands, the same options, the same help texts."""

from __future__ import annotations

import functools
import html
import re
import subprocess
import sys
from pathlib import Path

from docsite.cli_reference import command_records, render_markdown
from docsite.pages import ROOT


@functools.cache
def _help(path: str) -> str:
    args = path.split()[1:]
    done = subprocess.run([sys.executable, "-m", "gcurun", *args, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                               "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _words(text: str) -> str:
    """``text`` with its whitespace flattened (click wraps lines, also after a hyphen)."""
    return re.sub(r"- ", "-", " ".join(text.split()))


_OPTION = re.compile(r"^  (-{1,2}[\w-]+(?:[ ,/]+-{1,2}[\w-]+)*)", re.M)


def _options_in_help(text: str) -> set[str]:
    """Every option spelling on the option lines of a --help text, in any of its sections
    (``Options:``, or the grouped sections of the run command)."""
    section = text.split("\nCommands:\n", 1)[0]
    return {spelling for line in _OPTION.findall(section)
            for spelling in re.findall(r"-{1,2}[\w-]+", line)}


def test_every_command_of_the_help_is_in_the_reference() -> None:
    records = command_records()
    paths = [r.path for r in records]
    assert paths[:4] == ["gcurun", "gcurun check", "gcurun bench", "gcurun timeline"] or \
        {"gcurun", "gcurun check", "gcurun bench", "gcurun timeline"} <= set(paths)
    for record in records:
        text = _help(record.path)
        listed = re.findall(r"^  (\w[\w-]*)  ", text.split("\nCommands:\n", 1)[-1], re.M) \
            if "\nCommands:\n" in text else []
        assert list(record.subcommands) == listed, record.path


def test_the_reference_has_the_options_and_texts_of_each_help() -> None:
    for record in command_records():
        text = _help(record.path)
        in_reference = {s for row in record.options for s in re.findall(r"-{1,2}[\w-]+",
                                                                         row.names.split(" ")[0]
                                                                         + " " + row.names)}
        assert _options_in_help(text) <= in_reference, record.path
        flat = _words(text)
        for row in record.options:
            assert _words(row.help) in flat, (record.path, row.names)
        assert record.usage.split(" [")[0] in flat
        if record.text:
            assert _words(record.text) in flat, record.path


def test_the_built_page_lists_every_option(built_site: Path) -> None:
    for page in ("cli/index.html", "zh/cli/index.html"):
        shown = _words(html.unescape(re.sub(r"<[^>]+>", "", (built_site / page).read_text())))
        for record in command_records():
            assert record.path in shown
            for row in record.options:
                assert _words(row.names) in shown, (page, row.names)


def test_the_markdown_escapes_what_markdown_would_read() -> None:
    markdown = render_markdown(command_records())
    assert "GCURUN\\_\\*/HOROVOD\\_\\*" in markdown
    assert "<!--" not in markdown
