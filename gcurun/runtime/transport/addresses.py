"""Which addresses a ``tcp`` rank offers its peers on other hosts, and in which order a
peer tries them.

A rank offers every address of its host that might reach it (or, given a network
interface by name or CIDR, only that interface's addresses): first its address on the
route to the rendezvous (where the launcher reached it, usually the right network), then
the others. Loopback and IPv6 link-local addresses are never offered to other hosts
unless nothing else is left. A peer tries them in that order, but last the addresses
that are not one host's alone: an address that ranks on two hosts offer (every host's
docker0 has 172.17.0.1) or that the trying host has itself leads back to that host, not
to the peer. Trying an address that leads elsewhere is safe: the handshake names the
rank it wants, and anything else refuses it.

The functions here are pure but :func:`host_interfaces`, which reads this host's.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping, Sequence
from typing import Literal

Interfaces = Mapping[str, Sequence[str]]     # interface name -> its IP addresses
Choice = tuple[Literal["name", "cidr"], str]

_NAME = re.compile(r"[A-Za-z0-9_.@:-]{1,15}")


def parse_interface_choice(text: str) -> Choice:
    """``eth0`` -> ("name", "eth0"); ``10.0.0.7/24`` -> ("cidr", "10.0.0.0/24").
    Raises ValueError saying what to write instead."""
    value = text.strip()
    if "/" in value:
        try:
            return "cidr", str(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ValueError("not a valid network; write a CIDR like 10.0.0.0/24 or an "
                             "interface name like eth0") from None
    if not _NAME.fullmatch(value):
        raise ValueError("not an interface name (1-15 letters, digits, '_.-@:'); write "
                         "eth0 or a CIDR like 10.0.0.0/24")
    return "name", value


def host_interfaces() -> dict[str, tuple[str, ...]]:
    """This host's interfaces that are up, and their IPv4 and IPv6 addresses."""
    import psutil

    stats = psutil.net_if_stats()
    found: dict[str, tuple[str, ...]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        found[name] = tuple(a.address.split("%")[0] for a in addrs
                            if a.family in (socket.AF_INET, socket.AF_INET6))
    return found


def offered_addresses(route_ip: str, interfaces: Interfaces,
                      choice: Choice | None = None) -> list[str]:
    """The addresses a rank offers peers on other hosts, best first: ``route_ip`` (its
    address on the route to the rendezvous) and every other address of ``interfaces``,
    or only the chosen interface's. Raises ValueError when the choice matches nothing
    here, listing what there is."""
    if choice is not None:
        kind, value = choice
        if kind == "name":
            if value not in interfaces:
                raise ValueError(f"this host has no interface {value} (it has "
                                 f"{_listing(interfaces)})")
            chosen = [a for a in interfaces[value] if _usable(a)] or list(interfaces[value])
        else:
            network = ipaddress.ip_network(value)
            chosen = [a for addrs in interfaces.values() for a in addrs
                      if _inside(a, network)]
        if not chosen:
            raise ValueError(f"no address of this host is on {value} (it has "
                             f"{_listing(interfaces)})")
        return _unique(([route_ip] if route_ip in chosen else []) + chosen)
    every = [a for addrs in interfaces.values() for a in addrs]
    family = _family(route_ip)
    usable = [a for a in every if _usable(a)]
    usable.sort(key=lambda a: _family(a) != family)      # the route's family first
    offered = _unique(([route_ip] if _usable(route_ip) else []) + usable)
    return offered or _unique([route_ip, *every])


def trial_order(peer_host: str, offered: Sequence[str], offers: Sequence[tuple[str, Sequence[str]]],
                own: Sequence[str]) -> list[str]:
    """The order in which a rank tries a peer's ``offered`` addresses: as offered, but
    last those that another host also offers (``offers``: every rank's host and
    offered addresses) or that are this host's own (``own``)."""
    elsewhere = {a for host, addrs in offers if host != peer_host for a in addrs}
    elsewhere.update(own)
    return sorted(offered, key=lambda a: a in elsewhere)


def _usable(address: str) -> bool:
    """Whether an address can reach another host: not loopback, not link-local IPv6
    (which needs a scope that differs by host)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not ip.is_loopback and not (ip.version == 6 and ip.is_link_local) \
        and not ip.is_unspecified


def _inside(address: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(address) in network
    except ValueError:
        return False


def _family(address: str) -> int:
    return 6 if ":" in address else 4


def _unique(addresses: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(addresses))


def _listing(interfaces: Interfaces) -> str:
    return ", ".join(f"{name} {' '.join(addrs) or '(no address)'}"
                     for name, addrs in sorted(interfaces.items())) or "no interfaces"
