"""One host item, as written in ``-H`` or at the start of a hostfile line.

The grammar is ``[USER@]HOST[:SLOTS]`` where HOST is a host name, an IPv4 address, a
hostlist (``node[01-04]``) or an IPv6 literal in brackets (``[fe80::1]``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from gcurun.hosts.hostlist import Problem, expand_name

_USER = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]*")
_INTEGER = re.compile(r"[+-]?\d+")

Where = TypeVar("Where")


@dataclass(frozen=True)
class HostItem:
    """A parsed item: the host names it expands to, its user and its slots if given."""

    names: tuple[str, ...]
    user: str | None
    slots: int | None


def parse_item(text: str) -> HostItem:
    """Parse ``[USER@]HOST[:SLOTS]``; ``text`` is one stripped, non-empty item.

    Raises :class:`Problem` saying what is wrong and how to write it instead.
    """
    user, host = _split_user(text)
    colons = [pos for pos in _outside_brackets(host) if host[pos] == ":"]
    if len(colons) > 1:
        raise Problem(_too_many_colons(host))
    name, slots_text = (host[:colons[0]], host[colons[0] + 1:]) if colons else (host, None)
    if not name:
        raise Problem("no host name before ':'; write HOST:SLOTS, e.g. node01:8")
    slots = None
    if slots_text is not None:
        slots = parse_count(slots_text, "slots", f"{text[:len(text) - len(slots_text)]}N")
    if _is_ipv6_literal(name):
        return HostItem((_parse_ipv6(name),), user, slots)
    return HostItem(tuple(expand_name(name)), user, slots)


def check_user_name(user: str) -> str:
    """``user`` if it is a user name as ``USER@HOST`` accepts it (letters, digits, '.',
    '_' and '-', not first); raises :class:`Problem` saying the rule otherwise."""
    if not _USER.fullmatch(user):
        raise Problem(f"'{user}' is not a user name; a user name holds letters, digits, "
                      "'.', '_' and '-' and does not start with '-'")
    return user


def check_host_name(name: str) -> str:
    """``name`` if it is one host as ``-H`` accepts it (a name, an IPv4 address, or an
    IPv6 address, bare or in brackets; no ranges), the IPv6 address without brackets;
    raises :class:`Problem` with the rule it breaks otherwise."""
    if _is_ipv6_literal(name):
        return _parse_ipv6(name)
    if name.count(":") > 1:
        return _parse_ipv6(f"[{name}]")
    if "[" in name or "]" in name:
        raise Problem("'[' and ']' cannot appear in one host's name; give one name or "
                      "address (ranges like node[1-4] are for the 'node1:8' string form)")
    (host,) = expand_name(name)
    return host


def parse_count(text: str, key: str, example: str) -> int:
    """Parse a positive whole number given for ``key``; ``example`` shows the fix (``a:N``).

    Raises :class:`Problem` for anything but a whole number of at least 1.
    """
    if not text:
        raise Problem(f"no {key} given; write {example} with N at least 1")
    if not _INTEGER.fullmatch(text):
        raise Problem(f"{key} must be a whole number, got '{text}'; "
                      f"write {example} with N at least 1")
    value = int(text)
    if value < 1:
        raise Problem(f"{key} must be at least 1, got {text}; write {example} with N at least 1")
    return value


def canonical_host(name: str) -> str:
    """The identity of a host name for comparisons: IP addresses in their standard form,
    other names without case and without a trailing dot.

    ``canonical_host("Node01.") == canonical_host("node01")`` and
    ``canonical_host("fe80:0::1") == canonical_host("FE80::1")``.
    """
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name.lower().rstrip(".")


def first_duplicate(
        entries: Iterable[tuple[str, Where]]) -> tuple[str, Where, str, Where] | None:
    """Find the first host listed twice among ``(name, where)`` pairs.

    Returns ``(first_name, first_where, second_name, second_where)`` or None; names are
    compared by :func:`canonical_host`.
    """
    seen: dict[str, tuple[str, Where]] = {}
    for name, where in entries:
        key = canonical_host(name)
        if key in seen:
            first_name, first_where = seen[key]
            return first_name, first_where, name, where
        seen[key] = (name, where)
    return None


def _split_user(text: str) -> tuple[str | None, str]:
    if "@" not in text:
        return None, text
    user, host = text.split("@", 1)
    if "@" in host:
        raise Problem("more than one '@'; write USER@HOST")
    if not user:
        raise Problem("no user name before '@'; write USER@HOST, or leave out '@'")
    check_user_name(user)
    if not host:
        raise Problem("no host after '@'; write USER@HOST")
    return user, host


def _outside_brackets(text: str) -> list[int]:
    """Positions in ``text`` outside brackets (brackets are known to balance and not nest
    when the caller got text from ``split_items``; here they are checked again)."""
    positions = []
    depth = 0
    for pos, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif depth == 0:
            positions.append(pos)
    return positions


def _too_many_colons(host: str) -> str:
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return ("more than one ':'; write HOST:SLOTS, and put an IPv6 address in brackets, "
                "e.g. [fe80::1]:2")
    return f"an IPv6 address must be in brackets; write [{address}] or [{address}]:N"


def _is_ipv6_literal(name: str) -> bool:
    """A name that opens with a bracket group holding ':' is an IPv6 literal."""
    closing = name.find("]")
    return name.startswith("[") and ":" in name[1:closing if closing != -1 else len(name)]


def _parse_ipv6(name: str) -> str:
    closing = name.find("]")
    if closing == -1:
        raise Problem("'[' is never closed; add the missing ']'")
    address = name[1:closing]
    if closing != len(name) - 1:
        raise Problem(f"unexpected '{name[closing + 1:]}' after '[{address}]'; "
                      f"write [{address}] or [{address}]:N")
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise Problem(f"'{address}' is not a valid IPv6 address; check it, or write a host "
                      "name or IPv4 address without brackets") from None
    return address
