"""Reading remote topologies: failures name their host (the real path runs in
tests/cluster against namespace hosts)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gcurun.errors import SSHConnectError
from gcurun.launch.ssh.remote_topology import probe_command, read_remote_topologies


class BrokenTransport:
    def open_session(self, timeout=None):
        raise OSError("channel refused")


def session():
    return SimpleNamespace(connection=SimpleNamespace(transport=BrokenTransport()),
                           hello=SimpleNamespace(python="/usr/bin/python3"))


def test_failures_are_reported_per_host():
    with pytest.raises(SSHConnectError) as info:
        read_remote_topologies({"a": session(), "b": session()}, timeout=5)
    assert info.value.failures == {
        "a": "reading its CPU/NUMA topology failed: channel refused",
        "b": "reading its CPU/NUMA topology failed: channel refused"}


def test_probe_command_quotes_the_interpreter():
    assert probe_command("/opt/my python/bin/python3") == \
        "exec '/opt/my python/bin/python3' - /sys"
