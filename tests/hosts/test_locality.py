from __future__ import annotations

import socket

import psutil
import pytest

from gcurun.hosts.api import HostSpec
from gcurun.hosts.locality import (
    is_local_host,
    local_hosts,
    local_names_from,
    locality_key,
    probe_local_names,
)

KNOWN = local_names_from("gpu7.cluster.example", "gpu7.cluster.example",
                         ["192.0.2.10", "fe80::a1%eth0", "2001:db8::10", "127.0.0.1", "::1"])


@pytest.mark.parametrize("name", [
    "localhost", "LOCALHOST", "localhost.", "localhost.localdomain", "ip6-localhost",
    "127.0.0.1", "127.0.1.1", "127.255.255.254", "::1", "0:0:0:0:0:0:0:1", "[::1]",
    "::ffff:127.0.0.1",
    "gpu7", "GPU7", "gpu7.cluster.example", "gpu7.cluster.example.",
    "192.0.2.10", "::ffff:192.0.2.10", "fe80::a1", "fe80::a1%eth1", "2001:db8:0::10",
])
def test_local(name: str) -> None:
    assert is_local_host(name, KNOWN)


@pytest.mark.parametrize("name", [
    "gpu8", "gpu7.other.example", "gpu", "192.0.2.11", "10.0.0.1", "fe80::a2",
    "2001:db8::11", "cluster", "example", "128.0.0.1", "::2",
])
def test_not_local(name: str) -> None:
    assert not is_local_host(name, KNOWN)


def test_loopback_is_local_without_any_names() -> None:
    assert is_local_host("127.0.0.5", frozenset())
    assert is_local_host("localhost", ())
    assert not is_local_host("gpu7", ())


def test_raw_names_are_normalised_too() -> None:
    assert is_local_host("node01", ["NODE01."])
    assert is_local_host("fe80::1", ["fe80:0::1%eth0"])


@pytest.mark.parametrize(("name", "key"), [
    ("Node01.", "node01"),
    ("[fe80::1]", "fe80::1"),
    ("FE80:0::1%eth0", "fe80::1"),
    ("::ffff:10.0.0.1", "10.0.0.1"),
    (" 10.0.0.1 ", "10.0.0.1"),
])
def test_locality_key(name: str, key: str) -> None:
    assert locality_key(name) == key


def test_local_names_from() -> None:
    assert local_names_from("gpu7", "gpu7.cluster.example", ["10.1.2.3", "FE80::1%lo"]) == {
        "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback",
        "127.0.0.1", "::1", "gpu7", "gpu7.cluster.example", "10.1.2.3", "fe80::1"}


def test_local_names_from_an_address_hostname_keeps_it_whole() -> None:
    names = local_names_from("10.1.2.3", "", [])
    assert "10.1.2.3" in names
    assert "10" not in names
    assert "" not in names


def test_local_hosts_keeps_order() -> None:
    hosts = (HostSpec("b"), HostSpec("localhost", 2), HostSpec("gpu7"), HostSpec("192.0.2.10"))
    assert local_hosts(hosts, KNOWN) == ("localhost", "gpu7", "192.0.2.10")


def test_probe_local_names_sees_this_machine() -> None:
    names = probe_local_names()
    assert is_local_host(socket.gethostname(), names)
    assert is_local_host(socket.getfqdn(), names)
    assert is_local_host("localhost", names)
    assert is_local_host("127.0.0.1", names)
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                assert is_local_host(entry.address, names), entry.address
    assert not is_local_host("gcurun-no-such-host.invalid", names)
