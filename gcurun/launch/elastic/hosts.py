"""The elastic driver's hosts: the ones discovery listed, their blacklisting and cooldown.

Functions over the driver's ``dict[str, HostRecord]`` (first-seen order); those that
change records return the actions that stop a host and log each change.
"""

from __future__ import annotations

import math
import random

from gcurun.launch.elastic.config import ElasticConfig
from gcurun.launch.elastic.events import Action, Record, StopHost
from gcurun.launch.elastic.records import HostRecord


def cooldown_seconds(count: int, low: int, high: int, uniform: float) -> float:
    """Horovod's cooldown of a host's ``count``-th blacklisting (``uniform`` in [0, 1))."""
    delay = low * (1 << count) + uniform * low
    return float(max(low, min(high, delay)))


def update_hosts(hosts: dict[str, HostRecord],
                 listed: tuple[tuple[str, int], ...]) -> list[Action]:
    """Apply a discovery result (``listed``: (host, slots) in the script's order): new
    hosts are added, changed ones updated, missing ones marked unlisted (never dropped)."""
    out: list[Action] = []
    names = dict(listed)
    for name, slots in listed:
        record = hosts.get(name)
        if record is None:
            hosts[name] = HostRecord(name, slots)
            out.append(Record("host_added", {"host": name, "slots": slots}))
        elif record.slots != slots or not record.listed:
            record.slots, record.listed = slots, True
            out.append(Record("host_changed", {"host": name, "slots": slots}))
    for record in hosts.values():
        if record.name not in names and record.listed:
            record.listed = False
            out.append(Record("host_removed", {"host": record.name}))
    return out


def eligible(hosts: dict[str, HostRecord]) -> list[HostRecord]:
    """The hosts a generation may use: listed and not blacklisted, in first-seen order."""
    return [h for h in hosts.values() if h.listed and not h.blacklisted]


def blacklist(record: HostRecord, now: float, reason: str,
              cooldown: tuple[int, int] | None, rng: random.Random) -> list[Action]:
    """Blacklist ``record`` for ``reason``: for good when ``cooldown`` is None, else
    until Horovod's cooldown (one draw from ``rng``) has passed."""
    record.blacklisted = True
    record.blacklist_count += 1
    record.reason = reason
    if cooldown is None:
        record.cooldown_until = math.inf
    else:
        low, high = cooldown
        record.cooldown_until = now + cooldown_seconds(
            record.blacklist_count, low, high, rng.uniform(0, 1))
    return [StopHost(record.name, reason), Record("blacklist", {
        "host": record.name, "reason": reason, "count": record.blacklist_count,
        "cooldown": None if cooldown is None else record.cooldown_until - now})]


def readmit(hosts: dict[str, HostRecord], now: float) -> list[Action]:
    """Lift the blacklisting of listed hosts whose cooldown has passed by ``now``."""
    out: list[Action] = []
    for record in hosts.values():
        if record.blacklisted and record.listed and now >= record.cooldown_until:
            record.blacklisted = False
            out.append(Record("readmit", {"host": record.name}))
    return out


def min_np_message(config: ElasticConfig, hosts: dict[str, HostRecord], first: bool) -> str:
    """Why the job ends when too few slots stayed available for the whole
    --elastic-timeout (``first``: no generation has formed yet), and how to fix it."""
    usable = eligible(hosts)
    have = sum(h.slots for h in usable)
    shown = ", ".join(f"{h.name}:{h.slots}" for h in usable) or "none"
    black = [f"{h.name} blacklisted ({h.reason})" for h in hosts.values() if h.blacklisted]
    extra = f"; {', '.join(black)}" if black else ""
    need = config.first_np if first else config.min_np
    flag = "-np" if first and config.start_np is not None else "--min-np"
    return (f"timed out waiting for the minimum number of slots: only {have} "
            f"available ({shown}{extra}) but {flag} is {need}, for the whole "
            f"--elastic-timeout of {config.elastic_timeout:g} s; add hosts, lower "
            f"{flag} or raise --elastic-timeout")
