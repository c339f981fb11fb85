"""The CLI reference, rendered from gcurun's click commands (never written by hand).

:func:`command_records` walks the ``gcurun`` command and every subcommand (and their own
subcommands) and returns, for each, its usage, its text and the option rows exactly as
``--help`` formats them (click's ``get_help_record``); :func:`render_markdown` turns the
records into the page's Markdown. The MkDocs hook puts that Markdown where a page says
``<!-- gcurun-cli-reference -->``; a test compares the records with ``gcurun ... --help``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import click

MARKER = "<!-- gcurun-cli-reference -->"


@dataclass(frozen=True)
class OptionRow:
    """One row of a command's options, as ``--help`` shows it."""

    names: str  # "-np, --num-proc N"
    help: str
    group: str = ""  # the --help section it is listed under, where the command has sections


@dataclass(frozen=True)
class CommandRecord:
    """One command: its name as typed (``gcurun``, ``gcurun timeline summary``), usage line,
    help text, option rows and the names of its subcommands."""

    path: str
    usage: str
    text: str
    options: tuple[OptionRow, ...]
    subcommands: tuple[str, ...]


def top_commands() -> Iterator[tuple[str, click.Command]]:
    """``gcurun`` (the run command) and each subcommand, as the entry point dispatches them."""
    from gcurun.cli import main

    yield "gcurun", main.load_command([])[0]
    for name in main.SUBCOMMANDS:
        yield f"gcurun {name}", main.load_command([name])[0]


def command_records() -> list[CommandRecord]:
    """Every command gcurun has, parents before their subcommands."""
    records: list[CommandRecord] = []
    for path, command in top_commands():
        records.extend(_walk(path, command, None))
    return records


def _walk(path: str, command: click.Command, parent: click.Context | None
          ) -> Iterator[CommandRecord]:
    name = path if parent is None else path.split()[-1]
    ctx = click.Context(command, info_name=name, parent=parent, **command.context_settings)
    rows = _grouped(tuple(OptionRow(*record, group=_group_title(param.name))
                          for param in command.get_params(ctx)
                          if (record := param.get_help_record(ctx)) is not None)
                    if parent is None and path == "gcurun" else
                    tuple(OptionRow(*record) for param in command.get_params(ctx)
                          if (record := param.get_help_record(ctx)) is not None))
    subcommands: dict[str, click.Command] = {}
    if isinstance(command, click.Group):
        subcommands = {name: command.commands[name] for name in command.list_commands(ctx)}
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    yield CommandRecord(path, usage, inspect_text(command), rows, tuple(subcommands))
    for name, sub in subcommands.items():
        yield from _walk(f"{path} {name}", sub, ctx)


def _groups() -> tuple[Any, ...]:
    """The run command's option sections (``gcurun.cli.help.GROUPS``: title, topic,
    params), where gcurun groups its ``--help``; none where it does not."""
    try:
        from gcurun.cli import help as grouping  # type: ignore[attr-defined]
    except ImportError:
        return ()
    return tuple(getattr(grouping, "GROUPS", ()))


def _group_title(name: str | None) -> str:
    for group in _groups():
        if name in group.params:
            return f"{group.title} (gcurun help {group.topic})"
    return ""


def _grouped(rows: tuple[OptionRow, ...]) -> tuple[OptionRow, ...]:
    """``rows`` in the order of the sections, as --help lists them (ungrouped last)."""
    order = [f"{g.title} (gcurun help {g.topic})" for g in _groups()]
    return tuple(sorted(rows, key=lambda row: order.index(row.group) if row.group in order
                        else len(order)))


def inspect_text(command: click.Command) -> str:
    """The command's help text as ``--help`` shows it before the options (click's
    ``\\b`` no-rewrap markers and ``\\f`` truncation applied)."""
    text = command.help or ""
    text = text.split("\f", 1)[0]
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b").strip()


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


def escape(text: str) -> str:
    """``text`` as literal Markdown (no emphasis, links or HTML from its characters)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def anchor(path: str) -> str:
    return path.replace(" ", "-")


def render_markdown(records: list[CommandRecord]) -> str:
    """The reference: a section per command, with its usage, text and a definition list of
    its options."""
    parts: list[str] = []
    for record in records:
        depth = min(2 + record.path.count(" "), 4)
        parts.append(f"{'#' * depth} `{record.path}` {{ #{anchor(record.path)} }}\n")
        parts.append(f"```text\n{record.usage}\n```\n")
        if record.text:
            parts.append("\n\n".join(escape(" ".join(paragraph.split()))
                                     for paragraph in record.text.split("\n\n")) + "\n")
        if record.subcommands:
            links = ", ".join(f"[`{name}`](#{anchor(record.path + ' ' + name)})"
                              for name in record.subcommands)
            parts.append(f"Subcommands: {links}.\n")
        group = ""
        for row in record.options:
            if row.group and row.group != group:
                group = row.group
                parts.append(f"**{escape(group)}**\n")
            parts.append(f"`{row.names}`\n:   {escape(' '.join(row.help.split())) or '-'}\n")
    return "\n".join(parts)
