from __future__ import annotations

import os
from pathlib import Path

import pytest

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.hostfile import parse_hostfile, read_hostfile

MIXED = """\
# two GPU nodes and a login host
node01 slots=8 max_slots=16
node02:8

alice@node[03-04] slots=4   # same user on both
[fe80::1]:2
login
10.0.0.[1-2] max-slots=3
"""


def test_parse_mixed_hostfile() -> None:
    assert parse_hostfile(MIXED) == (
        HostSpec("node01", slots=8, max_slots=16),
        HostSpec("node02", slots=8),
        HostSpec("node03", slots=4, user="alice"),
        HostSpec("node04", slots=4, user="alice"),
        HostSpec("fe80::1", slots=2),
        HostSpec("login", slots=1),
        HostSpec("10.0.0.1", slots=1, max_slots=3),
        HostSpec("10.0.0.2", slots=1, max_slots=3),
    )


@pytest.mark.parametrize(("text", "hosts"), [
    ("a", (HostSpec("a"),)),
    ("a slots=2", (HostSpec("a", 2),)),
    ("a\tslots=2\tmax_slots=2", (HostSpec("a", 2, max_slots=2),)),
    ("a max_slots=5 slots=3", (HostSpec("a", 3, max_slots=5),)),
    ("a:3 max_slots=4", (HostSpec("a", 3, max_slots=4),)),
    ("a max_slots=4", (HostSpec("a", 1, max_slots=4),)),
    ("u@a:2", (HostSpec("a", 2, user="u"),)),
    ("[::1] slots=2", (HostSpec("::1", 2),)),
    ("node[01-02,07]:8", tuple(HostSpec(f"node{n}", 8) for n in ("01", "02", "07"))),
    ("a\r\nb\r\n", (HostSpec("a"), HostSpec("b"))),
    ("  a:2  \n\n\n   # only a comment\n#b\nc#comment", (HostSpec("a", 2), HostSpec("c"))),
])
def test_parse_hostfile_forms(text: str, hosts: tuple[HostSpec, ...]) -> None:
    assert parse_hostfile(text) == hosts


@pytest.mark.parametrize(("text", "message"), [
    ("a slots=0", "hostfile 'hosts' line 1 'a slots=0': slots must be at least 1, got 0; "
                  "write slots=N with N at least 1"),
    ("a\nb slots=-3", "hostfile 'hosts' line 2 'b slots=-3': slots must be at least 1, "
                      "got -3; write slots=N with N at least 1"),
    ("a slots=two", "hostfile 'hosts' line 1 'a slots=two': slots must be a whole number, "
                    "got 'two'; write slots=N with N at least 1"),
    ("a slots=", "hostfile 'hosts' line 1 'a slots=': no slots given; "
                 "write slots=N with N at least 1"),
    ("a:0", "hostfile 'hosts' line 1 'a:0': slots must be at least 1, got 0; "
            "write a:N with N at least 1"),
    ("a max_slots=0", "hostfile 'hosts' line 1 'a max_slots=0': max_slots must be at least "
                      "1, got 0; write max_slots=N with N at least 1"),
    ("a max-slots=x", "hostfile 'hosts' line 1 'a max-slots=x': max_slots must be a whole "
                      "number, got 'x'; write max-slots=N with N at least 1"),
    ("a slots=4 max_slots=2", "hostfile 'hosts' line 1 'a slots=4 max_slots=2': max_slots=2 "
                              "is less than slots=4; raise max_slots to at least 4 or lower "
                              "slots"),
    ("a:4 max_slots=2", "hostfile 'hosts' line 1 'a:4 max_slots=2': max_slots=2 is less than "
                        "slots=4; raise max_slots to at least 4 or lower slots"),
    ("a max_slots=0 slots=1", "hostfile 'hosts' line 1 'a max_slots=0 slots=1': max_slots "
                              "must be at least 1, got 0; write max_slots=N with N at least 1"),
    ("a:4 slots=8", "hostfile 'hosts' line 1 'a:4 slots=8': slots are given twice, in 'a:4' "
                    "and 'slots=8'; keep one"),
    ("a slots=1 slots=2", "hostfile 'hosts' line 1 'a slots=1 slots=2': slots is given twice; "
                          "keep one"),
    ("a max_slots=3 max-slots=3", "hostfile 'hosts' line 1 'a max_slots=3 max-slots=3': "
                                  "max_slots is given twice; keep one"),
    ("a slots = 2", "hostfile 'hosts' line 1 'a slots = 2': 'slots' is not a setting; after "
                    "the host write slots=N and/or max_slots=M, without spaces around '='"),
    ("a cpus=2", "hostfile 'hosts' line 1 'a cpus=2': unknown setting 'cpus'; a hostfile "
                 "line takes slots=N and max_slots=M"),
    ("a,b slots=2", "hostfile 'hosts' line 1 'a,b slots=2': a line holds one host or "
                    "hostlist, not a comma-separated list; put each host on its own line"),
    ("# header\n\nnode[3-1] slots=8", "hostfile 'hosts' line 3 'node[3-1] slots=8': range 3-1 "
                                      "runs backwards; write node[1-3]"),
    ("node[1-2 slots=8", "hostfile 'hosts' line 1 'node[1-2 slots=8': '[' is never closed; "
                         "add the missing ']'"),
    ("fe80::1 slots=2", "hostfile 'hosts' line 1 'fe80::1 slots=2': an IPv6 address must be "
                        "in brackets; write [fe80::1] or [fe80::1]:N"),
    ("[fe80::g]", "hostfile 'hosts' line 1 '[fe80::g]': 'fe80::g' is not a valid IPv6 "
                  "address; check it, or write a host name or IPv4 address without brackets"),
    ("a\nb\na slots=2 # again", "hostfile 'hosts' line 3 'a slots=2': host 'a' is listed on "
                                "lines 1 and 3; list each host once"),
    ("n[1-3,3]", "hostfile 'hosts' line 1 'n[1-3,3]': host 'n3' is listed twice on line 1; "
                 "list each host once"),
    ("node[01-04]\nNODE02.", "hostfile 'hosts' line 2 'NODE02.': host 'NODE02.' (also "
                             "written 'node02') is listed on lines 1 and 2; list each host once"),
    ("", "hostfile 'hosts' lists no hosts; write one host a line, e.g. 'node01 slots=8'"),
    ("# nothing\n\n   \n", "hostfile 'hosts' lists no hosts; write one host a line, "
                            "e.g. 'node01 slots=8'"),
])
def test_parse_hostfile_errors(text: str, message: str) -> None:
    with pytest.raises(HostSpecError) as caught:
        parse_hostfile(text, source="hosts")
    assert str(caught.value) == message
    assert caught.value.exit_code == 2


def test_default_source_name() -> None:
    with pytest.raises(HostSpecError) as caught:
        parse_hostfile("a:0")
    assert str(caught.value).startswith("hostfile '<hostfile>' line 1 'a:0': ")


def test_read_hostfile(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(MIXED, encoding="utf-8")
    assert read_hostfile(path) == parse_hostfile(MIXED)
    assert read_hostfile(str(path)) == parse_hostfile(MIXED)


def test_read_hostfile_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("a\nb:zero\n", encoding="utf-8")
    with pytest.raises(HostSpecError) as caught:
        read_hostfile(path)
    assert str(caught.value) == (f"hostfile '{path}' line 2 'b:zero': slots must be a whole "
                                 "number, got 'zero'; write b:N with N at least 1")


def test_read_hostfile_expands_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "hosts").write_text("a:2\n", encoding="utf-8")
    assert read_hostfile("~/hosts") == (HostSpec("a", 2),)


def test_read_missing_hostfile(tmp_path: Path) -> None:
    path = tmp_path / "nope"
    with pytest.raises(HostSpecError) as caught:
        read_hostfile(path)
    assert str(caught.value) == f"hostfile '{path}' does not exist; check the path"
    assert caught.value.exit_code == 2


def test_read_directory_as_hostfile(tmp_path: Path) -> None:
    with pytest.raises(HostSpecError) as caught:
        read_hostfile(tmp_path)
    assert str(caught.value) == (f"hostfile '{tmp_path}' is a directory; give the path of a "
                                 "file that lists one host a line")


def test_read_hostfile_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_bytes(b"a\n\xff\xfe\n")
    with pytest.raises(HostSpecError) as caught:
        read_hostfile(path)
    assert str(caught.value) == (f"hostfile '{path}' is not UTF-8 text (byte 2); "
                                 "save it as plain UTF-8 text")


def test_read_unreadable_hostfile(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("a\n", encoding="utf-8")
    path.chmod(0)
    if os.access(path, os.R_OK):
        # root reads any file; a dangling path component fails the same way for everyone
        path = tmp_path / "hosts" / "inner"
        reason = "Not a directory"
    else:
        reason = "Permission denied"
    with pytest.raises(HostSpecError) as caught:
        read_hostfile(path)
    assert str(caught.value) == (f"hostfile '{path}' cannot be read: {reason}; "
                                 "check the path and its permissions")


@pytest.mark.parametrize("text", [
    # What Kubeflow's MPI Operator mounts at /etc/mpi/hostfile for an MPIJob named
    # "train" with 2 workers of 4 slots: Open MPI's form, and MPICH's and Intel MPI's.
    "train-worker-0.train-worker.default.svc slots=4\n"
    "train-worker-1.train-worker.default.svc slots=4\n",
    "train-worker-0.train-worker.default.svc:4\ntrain-worker-1.train-worker.default.svc:4\n",
])
def test_the_mpi_operators_hostfile(text: str) -> None:
    assert parse_hostfile(text) == (
        HostSpec("train-worker-0.train-worker.default.svc", slots=4),
        HostSpec("train-worker-1.train-worker.default.svc", slots=4))
