"""Resolving SSH targets: ssh config, settings and per-host values, in their precedence."""

from __future__ import annotations

import sys

import pytest

from gcurun.config.api import SSHSettings
from gcurun.errors import UsageError
from gcurun.hosts.api import HostSpec
from gcurun.launch.ssh.sshconfig import (
    Hop,
    parse_hop,
    parse_proxy_jump,
    parse_ssh_config,
    read_ssh_config,
    resolve_target,
    resolve_targets,
)

CONFIG = """\
Host gpu*
    HostName %h.cluster.example
    User trainer
    Port 2200
    IdentityFile ~/.ssh/cluster_key
    UserKnownHostsFile /etc/cluster/known_hosts ~/.ssh/known_hosts
    IdentitiesOnly yes
    StrictHostKeyChecking accept-new
Host behind
    HostName 10.9.0.5
    ProxyJump ops@bastion:2222,gate
Host *
    IdentityFile ~/.ssh/id_ed25519
"""


DEFAULTS = SSHSettings()


def resolve(name, settings=DEFAULTS, text=CONFIG, **kw):
    return resolve_target(HostSpec(name, **kw.pop("host", {})), settings,
                          parse_ssh_config(text), local_user="me", **kw)


def test_config_values_apply_to_matching_hosts(monkeypatch):
    monkeypatch.setenv("HOME", "/home/me")
    t = resolve("gpu01")
    assert (t.alias, t.hostname, t.port, t.user) == ("gpu01", "gpu01.cluster.example", 2200,
                                                     "trainer")
    assert t.identity_files == ("/home/me/.ssh/cluster_key", "/home/me/.ssh/id_ed25519")
    assert t.identities_only
    assert t.known_hosts_files == ("/etc/cluster/known_hosts", "/home/me/.ssh/known_hosts")
    assert t.known_hosts_name == "[gpu01.cluster.example]:2200"
    assert t.display == "gpu01 (gpu01.cluster.example:2200)"
    assert t.python == sys.executable
    assert t.host_key_policy == "strict"   # given by the user: the config does not decide


def test_config_decides_the_host_key_policy_only_when_the_user_did_not():
    assert resolve("gpu01", policy_given=False).host_key_policy == "accept-new"
    assert resolve("other", policy_given=False).host_key_policy == "strict"
    assert resolve("other", text="StrictHostKeyChecking no\n",
                   policy_given=False).host_key_policy == "off"


def test_host_entry_beats_settings_beat_config():
    settings = SSHSettings(user="cli", port=2022, identity_file="/keys/cli", python="/py3")
    t = resolve("gpu01", settings)
    assert (t.user, t.port, t.python) == ("cli", 2022, "/py3")
    assert t.identity_files[0] == "/keys/cli"
    t = resolve("gpu01", settings, host={"user": "root", "port": 22, "python": "/opt/py"})
    assert (t.user, t.port, t.python) == ("root", 22, "/opt/py")
    assert t.known_hosts_name == "gpu01.cluster.example"


def test_defaults_without_a_config(monkeypatch):
    monkeypatch.setenv("HOME", "/home/me")
    t = resolve_target(HostSpec("node7"), SSHSettings(known_hosts="/extra/kh"), None,
                       local_user="me")
    assert (t.hostname, t.port, t.user, t.identity_files) == ("node7", 22, "me", ())
    assert t.known_hosts_files == ("/home/me/.ssh/known_hosts", "/home/me/.ssh/known_hosts2",
                                   "/extra/kh")
    assert t.global_known_hosts_files[0] == "/etc/ssh/ssh_known_hosts"
    assert t.proxy_jump == () and t.proxy_command is None


@pytest.mark.parametrize("text, hop", [
    ("bastion", Hop("bastion")),
    ("ops@bastion:2222", Hop("bastion", "ops", 2222)),
    ("ssh://ops@bastion:2222", Hop("bastion", "ops", 2222)),
    ("[fe80::1]:22", Hop("fe80::1", None, 22)),
    ("fe80::1", Hop("fe80::1")),
])
def test_proxy_jump_hops(text, hop):
    assert parse_hop(text) == hop


def test_proxy_jump_errors_and_none():
    with pytest.raises(UsageError, match="ProxyJump 'gate:ssh': port 'ssh' is not a number"):
        parse_hop("gate:ssh")
    assert parse_proxy_jump("none") == ()
    assert parse_proxy_jump(None) == ()


def test_proxy_jump_chain_resolves_each_hop_through_the_config(tmp_path):
    path = tmp_path / "config"
    path.write_text(CONFIG + "Host gate\n    HostName 10.9.0.1\n    User gw\n")
    (target,) = resolve_targets([HostSpec("behind")], SSHSettings(config_file=str(path)),
                                {"ssh.config_file": "cli"})
    assert target.proxy_jump == (Hop("bastion", "ops", 2222), Hop("gate"))
    assert [(h.hostname, h.port, h.user) for h in target.via] == [("bastion", 2222, "ops"),
                                                                 ("10.9.0.1", 22, "gw")]


def test_a_bad_port_in_the_config_names_host_and_value():
    with pytest.raises(UsageError, match="Port 'twenty' for host 'x' is not a port number"):
        resolve("x", text="Host x\n    Port twenty\n")


def test_a_missing_config_is_an_error_only_when_named(tmp_path):
    assert read_ssh_config(str(tmp_path / "none"), explicit=False) is None
    with pytest.raises(UsageError, match=r"--ssh-config '.*none': no such file"):
        read_ssh_config(str(tmp_path / "none"), explicit=True)
