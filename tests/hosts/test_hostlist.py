from __future__ import annotations

import pytest

from gcurun.errors import HostSpecError, UsageError
from gcurun.hosts.hostlist import MAX_HOSTS, collapse_hostlist, expand_hostlist


@pytest.mark.parametrize(("text", "names"), [
    ("node01", ("node01",)),
    ("a,b", ("a", "b")),
    ("node[1-3]", ("node1", "node2", "node3")),
    ("node[01-04,07]", ("node01", "node02", "node03", "node04", "node07")),
    ("node[001-003]", ("node001", "node002", "node003")),
    ("n[8-11]", ("n8", "n9", "n10", "n11")),
    ("n[08-11]", ("n08", "n09", "n10", "n11")),
    ("n[098-101]", ("n098", "n099", "n100", "n101")),
    ("n[01-100]", tuple(f"n{i:02d}" for i in range(1, 101))),
    ("n[0-2]", ("n0", "n1", "n2")),
    ("n[5]", ("n5",)),
    ("n[5-5]", ("n5",)),
    ("n[3,1]", ("n3", "n1")),
    ("n[1-2]x", ("n1x", "n2x")),
    ("[1-2]n", ("1n", "2n")),
    ("rack[1-2]-n[01-02]", ("rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02")),
    ("r[1-2]n[1,3]g[7]", ("r1n1g7", "r1n3g7", "r2n1g7", "r2n3g7")),
    ("node[01-02],gpu[1-2],login", ("node01", "node02", "gpu1", "gpu2", "login")),
    ("10.0.0.[1-3]", ("10.0.0.1", "10.0.0.2", "10.0.0.3")),
    ("host_a.example-1.org", ("host_a.example-1.org",)),
    (" a , b ", ("a", "b")),
    ("n[1-2],n1", ("n1", "n2", "n1")),
])
def test_expand_hostlist(text: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize(("text", "message"), [
    ("node[3-1]", "hostlist 'node[3-1]': range 3-1 runs backwards; write node[1-3]"),
    ("node[1,5-3]x", "hostlist 'node[1,5-3]x': range 5-3 runs backwards; write node[1,3-5]x"),
    ("n[10-09]", "hostlist 'n[10-09]': range 10-09 runs backwards; write n[09-10]"),
    ("r[1-2]-n[2-1]", "hostlist 'r[1-2]-n[2-1]': range 2-1 runs backwards; write r[1-2]-n[1-2]"),
    ("n[]", "hostlist 'n[]': '[]' is empty; put numbers or ranges inside, e.g. n[1-4]"),
    ("n[]x", "hostlist 'n[]x': '[]' is empty; put numbers or ranges inside, e.g. n[1-4]x"),
    ("n[1,,3]", "hostlist 'n[1,,3]': '[1,,3]' has an empty entry; remove the extra ','"),
    ("n[1,]", "hostlist 'n[1,]': '[1,]' has an empty entry; remove the extra ','"),
    ("n[1-a]", "hostlist 'n[1-a]': '1-a' in '[1-a]' is not a number or a range like 1-4; "
               "brackets hold numbers and ranges, e.g. n[1-4,7]"),
    ("n[1-]", "hostlist 'n[1-]': '1-' in '[1-]' is not a number or a range like 1-4; "
              "brackets hold numbers and ranges, e.g. n[1-4,7]"),
    ("n[-3]", "hostlist 'n[-3]': '-3' in '[-3]' is not a number or a range like 1-4; "
              "brackets hold numbers and ranges, e.g. n[1-4,7]"),
    ("n[1-010]", "hostlist 'n[1-010]': the ends of range 1-010 are zero-padded to different "
                 "widths; write n[001-010]"),
    ("n[001-10]", "hostlist 'n[001-10]': the ends of range 001-10 are zero-padded to different "
                  "widths; write n[001-010]"),
    ("n[1-3", "hostlist 'n[1-3': '[' is never closed; add the missing ']'"),
    ("n1-3]", "hostlist 'n1-3]': ']' has no matching '['; remove it or add the missing '['"),
    ("n[1[2]]", "hostlist 'n[1[2]]': brackets cannot nest; close each '[' with ']' before "
                "opening another"),
    ("a,,b", "hostlist 'a,,b': item 2 is empty; remove the extra ','"),
    ("a,", "hostlist 'a,': item 2 is empty; remove the extra ','"),
    ("", "hostlist '': no hosts given; write them as a:8,b:8"),
    ("a b", "hostlist 'a b': a host name cannot contain spaces; separate hosts with ','"),
    ("-n1", "hostlist '-n1': a host name cannot start with '-'; check the spelling"),
    ("a/b", "hostlist 'a/b': '/' cannot appear in a host name; use letters, digits, '-', '.' "
            "and '_'"),
    ("n[1-2]$x", "hostlist 'n[1-2]$x': '$' cannot appear in a host name; use letters, digits, "
                 "'-', '.' and '_'"),
    ("10.0.0.[250-256]", "hostlist '10.0.0.[250-256]': '10.0.0.256' is not a valid IPv4 "
                         "address; each of its four parts is a number from 0 to 255 without "
                         "leading zeros"),
    ("10.0.0.01", "hostlist '10.0.0.01': '10.0.0.01' is not a valid IPv4 address; each of its "
                  "four parts is a number from 0 to 255 without leading zeros"),
    ("n[1-99999999999]", f"hostlist 'n[1-99999999999]': expands to more than {MAX_HOSTS} "
                         "hosts; check the ranges"),
    ("n[1-300]m[1-300]", f"hostlist 'n[1-300]m[1-300]': expands to more than {MAX_HOSTS} "
                         "hosts; check the ranges"),
])
def test_expand_hostlist_errors(text: str, message: str) -> None:
    with pytest.raises(HostSpecError) as caught:
        expand_hostlist(text)
    assert str(caught.value) == message
    assert isinstance(caught.value, UsageError)
    assert caught.value.exit_code == 2


def test_many_names_across_items_are_capped() -> None:
    half = f"n[1-{MAX_HOSTS // 2 + 1}]"
    with pytest.raises(HostSpecError, match="expands to more than"):
        expand_hostlist(f"{half},m[1-{MAX_HOSTS // 2 + 1}]")


def test_exactly_max_hosts_expand() -> None:
    assert len(expand_hostlist(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS


@pytest.mark.parametrize(("names", "text"), [
    (["node01"], "node01"),
    (["node01", "node02", "node03", "node04", "node07"], "node[01-04,07]"),
    (["n8", "n9", "n10", "n11"], "n[8-11]"),
    (["n09", "n10"], "n[09-10]"),
    (["n3", "n1", "n2"], "n[1-3]"),
    (["gpu1", "login", "node01", "node02"], "gpu1,login,node[01-02]"),
    (["a", "a", "b"], "a,b"),
    (["fe80::1", "::1"], "fe80::1,::1"),
    (["10.0.0.1", "10.0.0.2"], "10.0.0.[1-2]"),
    (["n1", "n01", "n02"], "n[1,01-02]"),
    ([], ""),
])
def test_collapse_hostlist(names: list[str], text: str) -> None:
    assert collapse_hostlist(names) == text


@pytest.mark.parametrize("names", [
    ["node01", "node02", "node03", "node07", "node10", "node100"],
    ["n1", "n01", "n001", "n2", "n02", "n9", "n10", "n010"],
    ["r1-n01", "r1-n02", "r2-n01", "x", "y7", "y8", "y9", "y10"],
    [f"c{i:03d}" for i in range(0, 300, 3)],
])
def test_collapse_round_trips(names: list[str]) -> None:
    assert sorted(expand_hostlist(collapse_hostlist(names))) == sorted(set(names))
