"""Every profile shipped in configs/ loads and resolves; the documented ones say what they
promise."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcurun.config.profile import read_profile
from gcurun.config.resolve import resolve_settings
from gcurun.hosts.api import HostSpec

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PROFILES = sorted(CONFIGS.glob("*.yaml")) + sorted(CONFIGS.glob("*.yml"))
EIGHT = tuple(str(i) for i in range(8))


def load(name: str):
    profile = read_profile(CONFIGS / name)
    return profile, resolve_settings({}, profile, {})


def test_the_documented_profiles_are_shipped():
    assert {"one-node-8gcu.yaml", "two-nodes-ssh.yaml", "mpi-numa.yaml"} <= \
        {path.name for path in PROFILES}


@pytest.mark.parametrize("path", PROFILES, ids=[path.name for path in PROFILES])
def test_every_profile_loads_and_resolves(path):
    profile = read_profile(path)
    settings = resolve_settings({}, profile, {})
    assert profile.values, f"{path.name} sets nothing"
    for key in profile.values:
        assert settings.sources[key].startswith(f"profile:{path}:"), key
    if settings.hosts is not None and settings.np is not None:
        assert settings.np <= sum(host.slots for host in settings.hosts), \
            f"{path.name}: np {settings.np} is more than the slots of its hosts"


def test_one_node_with_8_gcus():
    _, settings = load("one-node-8gcu.yaml")
    assert settings.np == 8
    assert settings.accelerator == "gcu"
    assert settings.hosts == (HostSpec("localhost", slots=8, devices=EIGHT),)
    assert settings.launcher == "local"
    assert settings.env == {"OMP_NUM_THREADS": "4"}
    assert settings.runtime.fusion_threshold_mb == 64.0


def test_two_nodes_over_ssh():
    profile, settings = load("two-nodes-ssh.yaml")
    assert settings.np == 16
    assert settings.hosts == (HostSpec("gcu-node01", slots=8, user="train"),
                              HostSpec("gcu-node02", slots=8, user="train"))
    assert settings.devices == EIGHT
    assert settings.launcher is None          # chosen by the hosts: remote, so ssh
    assert (settings.ssh.user, settings.ssh.port, settings.ssh.host_key_policy) == \
        ("train", 22, "strict")
    assert settings.ssh.identity_file == "~/.ssh/id_ed25519"
    assert settings.sources["ssh.port"] == f"profile:{profile.source}:{profile.lines['ssh.port']}"


def test_mpi_job_with_numa_binding():
    _, settings = load("mpi-numa.yaml")
    assert (settings.launcher, settings.bind_to, settings.map_by) == ("mpi", "numa", "numa")
    assert settings.report_bindings is True
    assert [(host.name, host.slots, host.devices) for host in settings.hosts] == [
        ("gcu-node01", 8, EIGHT), ("gcu-node02", 8, EIGHT)]
    assert settings.mpi.args == ("--mca", "btl", "tcp,self", "--mca", "pml", "ob1")
    assert settings.mpi.network_interface == "10.0.0.0/24"
    assert settings.runtime.backend == "mpi"


def test_the_cli_still_wins_over_a_shipped_profile():
    profile = read_profile(CONFIGS / "mpi-numa.yaml")
    settings = resolve_settings({"bind_to": "core", "np": 4}, profile,
                                {"GCURUN_BIND_TO": "socket"})
    assert (settings.bind_to, settings.np, settings.map_by) == ("core", 4, "numa")


def test_an_elastic_job_from_a_discovery_script():
    profile, settings = load("elastic-discovery.yaml")
    assert settings.elastic.enabled
    assert (settings.elastic.min_np, settings.elastic.max_np, settings.elastic.slots) == \
        (2, 16, 8)
    assert settings.elastic.host_discovery_script == "./discover_hosts.sh"
    assert (settings.elastic.reset_limit, settings.elastic.timeout) == (20, 600.0)
    assert settings.elastic.blacklist_cooldown_range == (60, 600)
    assert settings.sources["elastic.min_np"] == profile.origin("elastic.min_np")
