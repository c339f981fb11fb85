"""Slurm-style hostlists: ``node[01-04,07]`` names node01..node04 and node07.

A name may hold several bracket groups (``rack[1-2]-n[01-02]``); they expand like nested
loops, the last group fastest. A range keeps the zero padding of its lower end. The
functions here that raise :class:`Problem` leave it to their callers to say where the text
came from (a host spec, a hostfile line); :func:`expand_hostlist` is the public entry.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gcurun.errors import HostSpecError

MAX_HOSTS = 65536
"""The most hosts one name may expand to; more is surely a typo in a range."""

_NAME_CHAR = re.compile(r"[A-Za-z0-9._-]")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_DOTTED_QUAD = re.compile(r"\d+\.\d+\.\d+\.\d+")
_TRAILING_NUMBER = re.compile(r"(.*?)(\d+)")


class Problem(Exception):
    """What is wrong with a piece of host text, without saying where that text came from.

    The public parsers catch it and raise :class:`HostSpecError` with their context
    (``host spec 'a:0'``, ``hostfile 'hosts' line 3 ...``) in front of the message.
    """


@dataclass(frozen=True)
class _Range:
    low: str
    high: str

    @property
    def count(self) -> int:
        return int(self.high) - int(self.low) + 1

    def numbers(self) -> Iterable[str]:
        width = len(self.low)
        return (str(n).zfill(width) for n in range(int(self.low), int(self.high) + 1))


_Group = tuple[_Range, ...]


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Expand a comma-separated hostlist (``node[01-04,07],gpu1``) to host names, in order.

    Repeated names are kept (this only expands; the spec parsers reject duplicates).
    Raises :class:`HostSpecError` for empty entries, unbalanced brackets, bad or backwards
    ranges, characters a host name cannot hold, and lists of more than ``MAX_HOSTS`` names.
    """
    try:
        items = split_items(text)
        names: list[str] = []
        for index, item in enumerate(items, 1):
            if not item.strip():
                raise Problem(empty_item(text, index))
            names.extend(expand_name(item.strip()))
            if len(names) > MAX_HOSTS:
                raise Problem(f"expands to more than {MAX_HOSTS} hosts; check the ranges")
    except Problem as problem:
        raise HostSpecError(f"hostlist '{text}': {problem}") from None
    return tuple(names)


def empty_item(text: str, index: int) -> str:
    """The message for an empty entry of a comma-separated list."""
    if not text.strip():
        return "no hosts given; write them as a:8,b:8"
    return f"item {index} is empty; remove the extra ','"


def split_items(text: str) -> list[str]:
    """Split ``text`` at the commas outside brackets; items are returned unstripped.

    Raises :class:`Problem` for a ``[`` never closed, a ``]`` never opened or nested brackets.
    """
    items: list[str] = []
    start = 0
    inside = False
    for pos, char in enumerate(text):
        if char == "[":
            if inside:
                raise Problem(_NESTED)
            inside = True
        elif char == "]":
            if not inside:
                raise Problem(_STRAY)
            inside = False
        elif char == "," and not inside:
            items.append(text[start:pos])
            start = pos + 1
    if inside:
        raise Problem(_UNCLOSED)
    items.append(text[start:])
    return items


_NESTED = "brackets cannot nest; close each '[' with ']' before opening another"
_STRAY = "']' has no matching '['; remove it or add the missing '['"
_UNCLOSED = "'[' is never closed; add the missing ']'"


def expand_name(name: str) -> list[str]:
    """Expand one host name that may hold bracket groups (``rack[1-2]-n[01-02]``).

    Raises :class:`Problem` when the name cannot be expanded or names a bad host.
    """
    parts = _template(name)
    _check_literals(name, [p for p in parts if isinstance(p, str)])
    total = 1
    for part in parts:
        if not isinstance(part, str):
            total *= sum(r.count for r in part)
            if total > MAX_HOSTS:
                raise Problem(f"expands to more than {MAX_HOSTS} hosts; check the ranges")
    choices = [[p] if isinstance(p, str) else _numbers(p) for p in parts]
    names = ["".join(combo) for combo in itertools.product(*choices)]
    for host in names:
        _check_dotted_quad(host)
    return names


def _numbers(group: _Group) -> list[str]:
    return [number for rng in group for number in rng.numbers()]


def _template(name: str) -> list[str | _Group]:
    """Cut ``name`` into literal text and parsed bracket groups."""
    parts: list[str | _Group] = []
    pos = 0
    while pos < len(name):
        opening = name.find("[", pos)
        closing = name.find("]", pos)
        if closing != -1 and (opening == -1 or closing < opening):
            raise Problem(_STRAY)
        if opening == -1:
            parts.append(name[pos:])
            break
        parts.append(name[pos:opening])
        if closing == -1:
            raise Problem(_UNCLOSED)
        if "[" in name[opening + 1:closing]:
            raise Problem(_NESTED)
        parts.append(_parse_group(name, opening, closing))
        pos = closing + 1
    return parts


def _parse_group(name: str, opening: int, closing: int) -> _Group:
    """Parse the ranges between ``name[opening]`` (``[``) and ``name[closing]`` (``]``)."""
    inner = name[opening + 1:closing]
    before, after = name[:opening], name[closing + 1:]
    if not inner:
        raise Problem(f"'[]' is empty; put numbers or ranges inside, e.g. {before}[1-4]{after}")
    entries = inner.split(",")
    ranges = []
    for index, entry in enumerate(entries):
        if not entry:
            raise Problem(f"'[{inner}]' has an empty entry; remove the extra ','")
        match = _RANGE.fullmatch(entry)
        if match is None:
            raise Problem(f"'{entry}' in '[{inner}]' is not a number or a range like 1-4; "
                          f"brackets hold numbers and ranges, e.g. {before}[1-4,7]{after}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            fix = _replace_entry(name, opening, closing, index, f"{high}-{low}")
            raise Problem(f"range {entry} runs backwards; write {fix}")
        if (_padded(high) and len(high) != len(low)) or (_padded(low) and len(high) < len(low)):
            width = max(len(low), len(high))
            fix = _replace_entry(name, opening, closing, index,
                                 f"{low.zfill(width)}-{high.zfill(width)}")
            raise Problem(f"the ends of range {entry} are zero-padded to different widths; "
                          f"write {fix}")
        ranges.append(_Range(low, high))
    return tuple(ranges)


def _replace_entry(name: str, opening: int, closing: int, index: int, entry: str) -> str:
    """``name`` with entry ``index`` of the bracket group at ``opening`` replaced."""
    entries = name[opening + 1:closing].split(",")
    entries[index] = entry
    return f"{name[:opening]}[{','.join(entries)}]{name[closing + 1:]}"


def _padded(number: str) -> bool:
    return len(number) > 1 and number.startswith("0")


def _check_literals(name: str, literals: list[str]) -> None:
    if name.startswith("-"):
        raise Problem("a host name cannot start with '-'; check the spelling")
    for literal in literals:
        for char in literal:
            if char.isspace():
                raise Problem("a host name cannot contain spaces; separate hosts with ','")
            if not _NAME_CHAR.fullmatch(char):
                raise Problem(f"'{char}' cannot appear in a host name; "
                              "use letters, digits, '-', '.' and '_'")


def _check_dotted_quad(host: str) -> None:
    """Reject names that look like IPv4 addresses but are not (``10.0.0.256``)."""
    if _DOTTED_QUAD.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise Problem(f"'{host}' is not a valid IPv4 address; each of its four parts "
                          "is a number from 0 to 255 without leading zeros") from None


def collapse_hostlist(names: Iterable[str]) -> str:
    """The shortest hostlist this function finds for ``names``, for display.

    ``expand_hostlist(collapse_hostlist(names))`` gives the same set of names (order
    aside: numbers are sorted within a prefix; prefixes keep the order they first appear
    in). Names with no trailing number, or holding ``:`` (IPv6), are listed as they are.
    """
    by_prefix: dict[str, list[str]] = {}
    plain: dict[str, None] = {}
    order: list[str] = []
    for host in dict.fromkeys(names):
        match = _TRAILING_NUMBER.fullmatch(host)
        if match is None or ":" in host:
            plain[host] = None
            order.append(host)
            continue
        prefix, digits = match.groups()
        if prefix not in by_prefix:
            by_prefix[prefix] = []
            order.append("\0" + prefix)
        by_prefix[prefix].append(digits)
    out = []
    for key in order:
        if key.startswith("\0"):
            prefix = key[1:]
            out.append(_collapse_numbers(prefix, by_prefix[prefix]))
        else:
            out.append(key)
    return ",".join(out)


def _collapse_numbers(prefix: str, numbers: list[str]) -> str:
    if len(numbers) == 1:
        return prefix + numbers[0]
    runs: list[list[str]] = []
    for digits in sorted(numbers, key=lambda d: (int(d), len(d))):
        last = runs[-1] if runs else None
        if last and digits == str(int(last[-1]) + 1).zfill(len(last[0])):
            last.append(digits)
        else:
            runs.append([digits])
    entries = [run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]
    return f"{prefix}[{','.join(entries)}]"
