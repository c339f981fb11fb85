"""``-H`` host specs: ``a:8,b:8``, ``user@host:4``, ``[fe80::1]:2``, ``node[01-04,07]:8``."""

from __future__ import annotations

from collections.abc import Iterable

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.hostlist import Problem, empty_item, split_items
from gcurun.hosts.item import first_duplicate, parse_item


def parse_host_specs(text: str) -> tuple[HostSpec, ...]:
    """Parse a comma-separated host spec into one :class:`HostSpec` per host, in order.

    Each item is ``[USER@]HOST[:SLOTS]``; a missing slot count means 1 slot. HOST may be a
    hostlist, which gives every host it expands to the same user and slots
    (``node[01-02]:8`` is ``node01:8,node02:8``), or a bracketed IPv6 literal. Items may be
    surrounded by spaces.

    Raises :class:`HostSpecError` for an empty spec or item, bad syntax, slot counts that
    are not whole numbers of at least 1, and any host listed twice.
    """
    if not text.strip():
        raise HostSpecError(f"host spec '{text}': {empty_item(text, 1)}")
    try:
        items = split_items(text)
    except Problem as problem:
        raise HostSpecError(f"host spec '{text}': {problem}") from None
    hosts: list[HostSpec] = []
    origins: list[int] = []
    for index, raw in enumerate(items, 1):
        item_text = raw.strip()
        if not item_text:
            raise HostSpecError(f"host spec '{text}': {empty_item(text, index)}")
        try:
            item = parse_item(item_text)
        except Problem as problem:
            raise HostSpecError(f"host spec '{item_text}': {problem}") from None
        for name in item.names:
            hosts.append(HostSpec(name=name, slots=item.slots or 1, user=item.user))
            origins.append(index)
    _reject_duplicates(text, [raw.strip() for raw in items], hosts, origins)
    return tuple(hosts)


def _reject_duplicates(text: str, items: list[str], hosts: list[HostSpec],
                       origins: list[int]) -> None:
    repeat = first_duplicate(zip((h.name for h in hosts), origins, strict=True))
    if repeat is None:
        return
    first_name, first_item, name, item = repeat
    also = f" (also written '{first_name}')" if first_name != name else ""
    if first_item == item:
        where = f"twice in item {item} '{items[item - 1]}'"
    else:
        where = (f"in item {first_item} '{items[first_item - 1]}' "
                 f"and item {item} '{items[item - 1]}'")
    raise HostSpecError(f"host spec '{text}': host '{name}'{also} is listed {where}; "
                        "list each host once")


def total_slots(hosts: Iterable[HostSpec]) -> int:
    """The number of slots of all ``hosts`` together."""
    return sum(host.slots for host in hosts)
