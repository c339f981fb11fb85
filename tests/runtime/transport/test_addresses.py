"""Which addresses a tcp rank offers and in which order its peers try them (pure)."""

from __future__ import annotations

import pytest

from gcurun.runtime.transport.addresses import (
    host_interfaces,
    offered_addresses,
    parse_interface_choice,
    trial_order,
)

HOST = {"lo": ("127.0.0.1", "::1"), "eth0": ("10.1.0.5", "fd00::5", "fe80::1"),
        "docker0": ("172.17.0.1",), "ib0": ("192.168.7.5",)}


def test_choices_by_name_and_by_cidr() -> None:
    assert parse_interface_choice(" eth0 ") == ("name", "eth0")
    assert parse_interface_choice("10.1.0.77/16") == ("cidr", "10.1.0.0/16")
    with pytest.raises(ValueError, match="not a valid network"):
        parse_interface_choice("10.1.0.0/33")
    with pytest.raises(ValueError, match="not an interface name"):
        parse_interface_choice("eth 0")


def test_the_route_to_the_rendezvous_comes_first_then_the_rest_but_loopback() -> None:
    assert offered_addresses("192.168.7.5", HOST) == [
        "192.168.7.5", "10.1.0.5", "172.17.0.1", "fd00::5"]


def test_a_rendezvous_on_loopback_offers_the_other_addresses() -> None:
    """The launcher's own host reaches its rendezvous on 127.0.0.1; peers elsewhere
    cannot reach that."""
    assert offered_addresses("127.0.0.1", HOST) == ["10.1.0.5", "172.17.0.1",
                                                    "192.168.7.5", "fd00::5"]
    assert offered_addresses("127.0.0.1", {"lo": ("127.0.0.1",)}) == ["127.0.0.1"]


def test_a_chosen_interface_offers_only_its_addresses() -> None:
    assert offered_addresses("10.1.0.5", HOST, ("name", "ib0")) == ["192.168.7.5"]
    assert offered_addresses("10.1.0.5", HOST, ("cidr", "10.1.0.0/24")) == ["10.1.0.5"]
    assert offered_addresses("10.1.0.5", HOST, ("cidr", "fd00::/64")) == ["fd00::5"]


def test_a_choice_this_host_lacks_says_what_it_has() -> None:
    with pytest.raises(ValueError, match=r"no interface eth9 \(it has docker0 172.17.0.1, "
                                         r"eth0 10.1.0.5 fd00::5 fe80::1, ib0"):
        offered_addresses("10.1.0.5", HOST, ("name", "eth9"))
    with pytest.raises(ValueError, match="no address of this host is on 10.9.0.0/16"):
        offered_addresses("10.1.0.5", HOST, ("cidr", "10.9.0.0/16"))


def test_addresses_shared_by_hosts_or_this_hosts_own_are_tried_last() -> None:
    offers = [("a", ["10.1.0.5", "172.17.0.1"]), ("b", ["10.1.0.6", "172.17.0.1"]),
              ("b", ["10.1.0.6", "172.17.0.1"])]
    assert trial_order("b", ["172.17.0.1", "10.1.0.6"], offers, []) == [
        "10.1.0.6", "172.17.0.1"]
    assert trial_order("b", ["10.1.0.6", "192.168.0.1"], [], ["192.168.0.1"]) == [
        "10.1.0.6", "192.168.0.1"]
    assert trial_order("b", ["10.1.0.6", "10.2.0.6"], offers, []) == ["10.1.0.6", "10.2.0.6"]


def test_this_host_has_a_loopback_interface() -> None:
    found = host_interfaces()
    assert any("127.0.0.1" in addrs for addrs in found.values()), found
