"""Which hosts are this machine: their ranks run as local processes, not over SSH."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Collection, Iterable

from gcurun.hosts.api import HostSpec

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost",
                            "ip6-loopback"})
"""Names that mean this machine wherever they are resolved."""


def locality_key(name: str) -> str:
    """The form in which names are compared for locality: IP addresses in standard form
    without an IPv6 zone (``fe80::1%eth0`` -> ``fe80::1``) and with IPv4-mapped IPv6
    addresses as IPv4; other names without case, brackets or a trailing dot."""
    text = name.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return text.lower().rstrip(".")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def is_local_host(name: str, local_names: Collection[str]) -> bool:
    """Whether ``name`` is this machine.

    True for loopback addresses (127.0.0.0/8, ::1), the names in :data:`LOOPBACK_NAMES`,
    and any name or address in ``local_names`` (as from :func:`probe_local_names`),
    compared by :func:`locality_key`. Pure: names are not resolved.
    """
    return locality_test(local_names)(name)


def locality_test(local_names: Collection[str]) -> Callable[[str], bool]:
    """:func:`is_local_host` with ``local_names`` prepared once, for many names."""
    keys = frozenset(locality_key(known) for known in local_names)

    def is_local(name: str) -> bool:
        key = locality_key(name)
        if key in LOOPBACK_NAMES or key in keys:
            return True
        try:
            return ipaddress.ip_address(key).is_loopback
        except ValueError:
            return False

    return is_local


def local_hosts(hosts: Iterable[HostSpec], local_names: Collection[str]) -> tuple[str, ...]:
    """The names of those ``hosts`` that are this machine, in order."""
    keys = {locality_key(known) for known in local_names}
    return tuple(h.name for h in hosts if is_local_host(h.name, keys))


def local_names_from(hostname: str, fqdn: str, addresses: Iterable[str]) -> frozenset[str]:
    """The names and addresses of this machine, built from what the system reports.

    Holds the loopback names and addresses, ``hostname`` and ``fqdn`` with their first
    labels (``node01`` for ``node01.cluster``), and every address in ``addresses``, each
    in :func:`locality_key` form.
    """
    names = set(LOOPBACK_NAMES) | {"127.0.0.1", "::1"}
    for full in (hostname, fqdn):
        if not full:
            continue
        names.add(locality_key(full))
        if not _is_ip(full):
            names.add(locality_key(full.split(".", 1)[0]))
    names.update(locality_key(address) for address in addresses if address)
    names.discard("")
    return frozenset(names)


def probe_local_names() -> frozenset[str]:
    """Ask the system for this machine's names and the addresses of all its interfaces.

    Uses ``socket.gethostname``, ``socket.getfqdn`` (which may wait on the resolver) and
    ``psutil.net_if_addrs``; see :func:`local_names_from` for what the set holds.
    """
    import psutil

    families = (socket.AF_INET, socket.AF_INET6)
    addresses = [entry.address
                 for entries in psutil.net_if_addrs().values()
                 for entry in entries if entry.family in families]
    return local_names_from(socket.gethostname(), socket.getfqdn(), addresses)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    return True
