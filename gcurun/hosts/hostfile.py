"""Hostfiles: one host (or hostlist) a line, in Open MPI's or in ``-H``'s form, mixed::

    # comments and blank lines are ignored
    node01 slots=8 max_slots=16
    node02:8
    alice@node[03-04] slots=4
    [fe80::1]:2
"""

from __future__ import annotations

import os
from pathlib import Path

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.hostlist import Problem, split_items
from gcurun.hosts.item import first_duplicate, parse_count, parse_item

_KEYS = {"slots": "slots", "max_slots": "max_slots", "max-slots": "max_slots"}
# A hostfile of 100,000 hosts of 40 characters each fits with room to spare; anything
# larger is not a hostfile (/dev/zero, a log file given by mistake).
MAX_HOSTFILE_BYTES = 8 << 20


class TooLarge(Exception):
    """A file holds more than the limit its reader allows."""


def read_limited(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of ``path``, read up to ``limit``. Raises TooLarge beyond it, OSError as
    open/read do. Endless files (/dev/zero) are cut at the limit, not read to the end."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(path)
    return data


def parse_hostfile(text: str, source: str = "<hostfile>") -> tuple[HostSpec, ...]:
    """Parse the text of a hostfile into one :class:`HostSpec` per host, in order.

    A line is ``[USER@]HOST[:SLOTS] [slots=N] [max_slots=M]`` (``max-slots`` is accepted
    too); ``#`` starts a comment; a line without a slot count gives its host 1 slot.
    ``source`` names the file in error messages.

    Raises :class:`HostSpecError` naming ``source`` and the line for bad syntax, slot counts
    that are not whole numbers of at least 1, ``max_slots`` below ``slots``, a host listed
    twice, and a file that lists no host at all.
    """
    hosts: list[HostSpec] = []
    lines: list[int] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            found = _parse_line(line)
        except Problem as problem:
            raise HostSpecError(f"hostfile '{source}' line {number} '{line}': {problem}") from None
        hosts.extend(found)
        lines.extend([number] * len(found))
    if not hosts:
        raise HostSpecError(f"hostfile '{source}' lists no hosts; "
                            "write one host a line, e.g. 'node01 slots=8'")
    _reject_duplicates(source, text, hosts, lines)
    return tuple(hosts)


def read_hostfile(path: str | os.PathLike[str]) -> tuple[HostSpec, ...]:
    """Read and parse the hostfile at ``path`` (``~`` is expanded); see :func:`parse_hostfile`.

    Raises :class:`HostSpecError` when the file is missing, unreadable or not UTF-8 text.
    """
    shown = os.fspath(path)
    try:
        text = read_limited(Path(path).expanduser(), MAX_HOSTFILE_BYTES).decode("utf-8")
    except TooLarge:
        raise HostSpecError(f"hostfile '{shown}' is larger than {MAX_HOSTFILE_BYTES >> 20} "
                            "MiB, more than any list of hosts; check the path") from None
    except FileNotFoundError:
        raise HostSpecError(f"hostfile '{shown}' does not exist; check the path") from None
    except IsADirectoryError:
        raise HostSpecError(f"hostfile '{shown}' is a directory; give the path of a file "
                            "that lists one host a line") from None
    except UnicodeDecodeError as error:
        raise HostSpecError(f"hostfile '{shown}' is not UTF-8 text (byte {error.start}); "
                            "save it as plain UTF-8 text") from None
    except OSError as error:
        raise HostSpecError(f"hostfile '{shown}' cannot be read: {error.strerror}; "
                            "check the path and its permissions") from None
    return parse_hostfile(text, source=shown)


def _parse_line(line: str) -> list[HostSpec]:
    head, *settings = line.split()
    if len(split_items(head)) > 1:
        raise Problem("a line holds one host or hostlist, not a comma-separated list; "
                      "put each host on its own line")
    item = parse_item(head)
    values = _parse_settings(settings)
    if item.slots is not None and "slots" in values:
        given = next(s for s in settings if _KEYS.get(s.partition("=")[0]) == "slots")
        raise Problem(f"slots are given twice, in '{head}' and '{given}'; keep one")
    slots = values.get("slots", item.slots or 1)
    max_slots = values.get("max_slots")
    if max_slots is not None and max_slots < slots:
        raise Problem(f"max_slots={max_slots} is less than slots={slots}; "
                      f"raise max_slots to at least {slots} or lower slots")
    return [HostSpec(name=name, slots=slots, user=item.user, max_slots=max_slots)
            for name in item.names]


def _parse_settings(settings: list[str]) -> dict[str, int]:
    values: dict[str, int] = {}
    for setting in settings:
        key, equals, value = setting.partition("=")
        if not equals:
            raise Problem(f"'{setting}' is not a setting; after the host write "
                          "slots=N and/or max_slots=M, without spaces around '='")
        if key not in _KEYS:
            raise Problem(f"unknown setting '{key}'; a hostfile line takes slots=N "
                          "and max_slots=M")
        name = _KEYS[key]
        if name in values:
            raise Problem(f"{name} is given twice; keep one")
        values[name] = parse_count(value, name, f"{key}=N")
    return values


def _reject_duplicates(source: str, text: str, hosts: list[HostSpec],
                       lines: list[int]) -> None:
    repeat = first_duplicate(zip((h.name for h in hosts), lines, strict=True))
    if repeat is None:
        return
    first_name, first_line, name, line = repeat
    content = text.splitlines()[line - 1].split("#", 1)[0].strip()
    also = f" (also written '{first_name}')" if first_name != name else ""
    where = f"twice on line {line}" if first_line == line else f"on lines {first_line} and {line}"
    raise HostSpecError(f"hostfile '{source}' line {line} '{content}': host '{name}'{also} "
                        f"is listed {where}; list each host once")
