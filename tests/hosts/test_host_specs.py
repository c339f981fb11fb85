from __future__ import annotations

import pytest

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.item import canonical_host
from gcurun.hosts.specs import parse_host_specs, total_slots


def H(name: str, slots: int = 1, user: str | None = None) -> HostSpec:  # noqa: N802
    return HostSpec(name=name, slots=slots, user=user)


@pytest.mark.parametrize(("text", "hosts"), [
    ("a", (H("a"),)),
    ("a:8,b:8", (H("a", 8), H("b", 8))),
    ("a,b", (H("a"), H("b"))),
    ("a:2,b", (H("a", 2), H("b"))),
    ("localhost:4", (H("localhost", 4),)),
    ("user@host:4", (H("host", 4, "user"),)),
    ("alice@a,bob@b:2", (H("a", 1, "alice"), H("b", 2, "bob"))),
    ("first.last@node-1.example.org:3", (H("node-1.example.org", 3, "first.last"),)),
    ("_svc@a", (H("a", 1, "_svc"),)),
    ("10.0.0.1:2", (H("10.0.0.1", 2),)),
    ("[fe80::1]:2", (H("fe80::1", 2),)),
    ("[::1]", (H("::1"),)),
    ("[::1]:3,[2001:db8::7]", (H("::1", 3), H("2001:db8::7"))),
    ("root@[fe80::1%eth0]:2", (H("fe80::1%eth0", 2, "root"),)),
    ("[::ffff:10.0.0.1]", (H("::ffff:10.0.0.1"),)),
    ("node[01-04,07]:8", tuple(H(f"node{n}", 8) for n in ("01", "02", "03", "04", "07"))),
    ("u@node[1-2]", (H("node1", 1, "u"), H("node2", 1, "u"))),
    ("rack[1-2]-n[01-02]:2",
     (H("rack1-n01", 2), H("rack1-n02", 2), H("rack2-n01", 2), H("rack2-n02", 2))),
    ("node[01-02]:4,login:1,[::1]:2",
     (H("node01", 4), H("node02", 4), H("login", 1), H("::1", 2))),
    ("10.0.0.[1-2]:4", (H("10.0.0.1", 4), H("10.0.0.2", 4))),
    (" a:8 , b:8 ", (H("a", 8), H("b", 8))),
    ("a:08", (H("a", 8),)),
    ("a:+2", (H("a", 2),)),
    ("a:1000000", (H("a", 1000000),)),
])
def test_parse_host_specs(text: str, hosts: tuple[HostSpec, ...]) -> None:
    assert parse_host_specs(text) == hosts


@pytest.mark.parametrize(("text", "message"), [
    # empty specs and items
    ("", "host spec '': no hosts given; write them as a:8,b:8"),
    ("  ", "host spec '  ': no hosts given; write them as a:8,b:8"),
    ("a,,b", "host spec 'a,,b': item 2 is empty; remove the extra ','"),
    ("a,b,", "host spec 'a,b,': item 3 is empty; remove the extra ','"),
    (",a", "host spec ',a': item 1 is empty; remove the extra ','"),
    ("a, ,b", "host spec 'a, ,b': item 2 is empty; remove the extra ','"),
    # slots
    ("a:0", "host spec 'a:0': slots must be at least 1, got 0; write a:N with N at least 1"),
    ("a:8,b:-2",
     "host spec 'b:-2': slots must be at least 1, got -2; write b:N with N at least 1"),
    ("a:x", "host spec 'a:x': slots must be a whole number, got 'x'; "
            "write a:N with N at least 1"),
    ("a:1.5", "host spec 'a:1.5': slots must be a whole number, got '1.5'; "
              "write a:N with N at least 1"),
    ("a: 2", "host spec 'a: 2': slots must be a whole number, got ' 2'; "
             "write a:N with N at least 1"),
    ("a:", "host spec 'a:': no slots given; write a:N with N at least 1"),
    ("u@a:0", "host spec 'u@a:0': slots must be at least 1, got 0; "
              "write u@a:N with N at least 1"),
    ("node[1-2]:0", "host spec 'node[1-2]:0': slots must be at least 1, got 0; "
                    "write node[1-2]:N with N at least 1"),
    ("[::1]:0", "host spec '[::1]:0': slots must be at least 1, got 0; "
                "write [::1]:N with N at least 1"),
    ("a:2:3", "host spec 'a:2:3': more than one ':'; write HOST:SLOTS, and put an IPv6 "
              "address in brackets, e.g. [fe80::1]:2"),
    (":4", "host spec ':4': no host name before ':'; write HOST:SLOTS, e.g. node01:8"),
    # users
    ("@a", "host spec '@a': no user name before '@'; write USER@HOST, or leave out '@'"),
    ("u@", "host spec 'u@': no host after '@'; write USER@HOST"),
    ("u@:2", "host spec 'u@:2': no host name before ':'; write HOST:SLOTS, e.g. node01:8"),
    ("a@b@c", "host spec 'a@b@c': more than one '@'; write USER@HOST"),
    ("-u@a", "host spec '-u@a': '-u' is not a user name; a user name holds letters, digits, "
             "'.', '_' and '-' and does not start with '-'"),
    ("u$r@a", "host spec 'u$r@a': 'u$r' is not a user name; a user name holds letters, "
              "digits, '.', '_' and '-' and does not start with '-'"),
    # IPv6
    ("fe80::1", "host spec 'fe80::1': an IPv6 address must be in brackets; "
                "write [fe80::1] or [fe80::1]:N"),
    ("::1", "host spec '::1': an IPv6 address must be in brackets; write [::1] or [::1]:N"),
    ("[fe80::zz]:2", "host spec '[fe80::zz]:2': 'fe80::zz' is not a valid IPv6 address; "
                     "check it, or write a host name or IPv4 address without brackets"),
    ("[1:2]", "host spec '[1:2]': '1:2' is not a valid IPv6 address; "
              "check it, or write a host name or IPv4 address without brackets"),
    ("[fe80::1]x:2", "host spec '[fe80::1]x:2': unexpected 'x' after '[fe80::1]'; "
                     "write [fe80::1] or [fe80::1]:N"),
    ("[fe80::1", "host spec '[fe80::1': '[' is never closed; add the missing ']'"),
    ("[fe80::1]:2:3", "host spec '[fe80::1]:2:3': more than one ':'; write HOST:SLOTS, and "
                      "put an IPv6 address in brackets, e.g. [fe80::1]:2"),
    # hostlists
    ("node[3-1]:8", "host spec 'node[3-1]:8': range 3-1 runs backwards; write node[1-3]"),
    ("a:8,node[3-1]:8", "host spec 'node[3-1]:8': range 3-1 runs backwards; write node[1-3]"),
    ("node[01-04:8", "host spec 'node[01-04:8': '[' is never closed; add the missing ']'"),
    ("a,node]:8", "host spec 'a,node]:8': ']' has no matching '['; remove it or add the "
                  "missing '['"),
    ("n[]:2", "host spec 'n[]:2': '[]' is empty; put numbers or ranges inside, e.g. n[1-4]"),
    ("n[a]", "host spec 'n[a]': 'a' in '[a]' is not a number or a range like 1-4; brackets "
             "hold numbers and ranges, e.g. n[1-4,7]"),
    # names
    ("a b", "host spec 'a b': a host name cannot contain spaces; separate hosts with ','"),
    ("-oProxyCommand=x", "host spec '-oProxyCommand=x': a host name cannot start with '-'; "
                         "check the spelling"),
    ("a/b:2", "host spec 'a/b:2': '/' cannot appear in a host name; use letters, digits, '-', "
              "'.' and '_'"),
    ("10.0.0.300", "host spec '10.0.0.300': '10.0.0.300' is not a valid IPv4 address; each of "
                   "its four parts is a number from 0 to 255 without leading zeros"),
    # duplicates
    ("a:8,b:8,a:2", "host spec 'a:8,b:8,a:2': host 'a' is listed in item 1 'a:8' and "
                    "item 3 'a:2'; list each host once"),
    ("a,a", "host spec 'a,a': host 'a' is listed in item 1 'a' and item 2 'a'; "
            "list each host once"),
    ("node[1-3,2]", "host spec 'node[1-3,2]': host 'node2' is listed twice in item 1 "
                    "'node[1-3,2]'; list each host once"),
    ("node[01-04]:8,node03", "host spec 'node[01-04]:8,node03': host 'node03' is listed in "
                             "item 1 'node[01-04]:8' and item 2 'node03'; list each host once"),
    ("Node1,node1.", "host spec 'Node1,node1.': host 'node1.' (also written 'Node1') is "
                     "listed in item 1 'Node1' and item 2 'node1.'; list each host once"),
    ("alice@a,bob@a", "host spec 'alice@a,bob@a': host 'a' is listed in item 1 'alice@a' and "
                      "item 2 'bob@a'; list each host once"),
    ("[fe80::1],[FE80:0::1]:2", "host spec '[fe80::1],[FE80:0::1]:2': host 'FE80:0::1' (also "
                                "written 'fe80::1') is listed in item 1 '[fe80::1]' and item 2 "
                                "'[FE80:0::1]:2'; list each host once"),
])
def test_parse_host_specs_errors(text: str, message: str) -> None:
    with pytest.raises(HostSpecError) as caught:
        parse_host_specs(text)
    assert str(caught.value) == message
    assert caught.value.exit_code == 2


def test_different_hosts_with_one_prefix_are_not_duplicates() -> None:
    assert [h.name for h in parse_host_specs("node1,node01,node001")] == [
        "node1", "node01", "node001"]


@pytest.mark.parametrize(("hosts", "total"), [
    ((), 0),
    ((H("a", 8),), 8),
    ((H("a", 8), H("b", 3), H("c")), 12),
])
def test_total_slots(hosts: tuple[HostSpec, ...], total: int) -> None:
    assert total_slots(hosts) == total


def test_total_slots_of_parsed_hostlist() -> None:
    assert total_slots(parse_host_specs("node[01-04,07]:8,login")) == 41


@pytest.mark.parametrize(("a", "b"), [
    ("node01", "NODE01"),
    ("node01.", "node01"),
    ("fe80:0:0::1", "FE80::1"),
    ("fe80::1%eth0", "fe80:0::1%eth0"),
    ("10.0.0.1", "10.0.0.1"),
])
def test_canonical_host_same(a: str, b: str) -> None:
    assert canonical_host(a) == canonical_host(b)


@pytest.mark.parametrize(("a", "b"), [
    ("node1", "node01"),
    ("fe80::1%eth0", "fe80::1%eth1"),
    ("fe80::1", "fe80::2"),
])
def test_canonical_host_different(a: str, b: str) -> None:
    assert canonical_host(a) != canonical_host(b)


def test_display_round_trips_through_the_parser() -> None:
    hosts = parse_host_specs("u@[fe80::1]:2,v@a:3,b")
    assert [h.display for h in hosts] == ["u@[fe80::1]", "v@a", "b"]
    again = parse_host_specs(",".join(f"{h.display}:{h.slots}" for h in hosts))
    assert again == hosts
