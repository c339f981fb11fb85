"""Which of the launcher's variables reach ranks on other hosts: the rules, pure."""

from __future__ import annotations

import pytest

from gcurun.launch.planning.forwarding import (
    LOGIN_VARIABLES,
    NEVER_FORWARDED,
    never_forwarded,
    plan_forwarding,
)

LAUNCHER = {
    "PATH": "/venv/bin:/usr/bin", "PYTHONPATH": "/x", "LD_LIBRARY_PATH": "/opt/lib",
    "MY_SETTING": "1", "HOROVOD_STALL_CHECK_DISABLE": "1", "GCURUN_NETWORK_INTERFACE": "eth1",
    "HOSTNAME": "launcher", "SSH_CONNECTION": "10.0.0.1 5 10.0.0.2 22",
    "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1", "SSH_TTY": "/dev/pts/1", "DISPLAY": ":0",
    "XAUTHORITY": "/home/u/.Xauthority", "PWD": "/home/u/job", "OLDPWD": "/home/u",
    "SHLVL": "2", "_": "/usr/bin/gcurun", "BASH_FUNC_module%%": "() { :; }",
    "_HOROVOD_SECRET_KEY": "k", "AWS_SECRET_KEY": "k", "TMPDIR": "/tmp/job.7",
    "XDG_RUNTIME_DIR": "/run/user/1000", "XDG_SESSION_ID": "3",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
    "CUDA_VISIBLE_DEVICES": "2,3", "GCURUN_SECRET": "00ff", "GCURUN_RENDEZVOUS": "a:1",
    "HOME": "/home/u", "USER": "u", "LOGNAME": "u", "SHELL": "/bin/bash", "TERM": "xterm",
    "LANG": "C.UTF-8",
}
HOST_BOUND = ["BASH_FUNC_module%%", "AWS_SECRET_KEY", "CUDA_VISIBLE_DEVICES",
              "DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "GCURUN_RENDEZVOUS", "GCURUN_SECRET",
              "HOSTNAME", "OLDPWD", "PWD", "SHLVL", "SSH_AUTH_SOCK", "SSH_CONNECTION",
              "SSH_TTY", "TMPDIR", "XAUTHORITY", "XDG_RUNTIME_DIR", "XDG_SESSION_ID", "_",
              "_HOROVOD_SECRET_KEY"]


def test_all_forwards_everything_but_this_hosts_login_and_shell_variables():
    got = plan_forwarding(LAUNCHER, "all")
    assert got.env == {
        "GCURUN_NETWORK_INTERFACE": "eth1", "HOROVOD_STALL_CHECK_DISABLE": "1",
        "LANG": "C.UTF-8", "LD_LIBRARY_PATH": "/opt/lib", "MY_SETTING": "1",
        "PATH": "/venv/bin:/usr/bin", "PYTHONPATH": "/x", "TERM": "xterm"}
    assert list(got.env) == sorted(got.env)
    assert got.left_out == tuple(sorted(HOST_BOUND + [n for n in LOGIN_VARIABLES if n in LAUNCHER]))


def test_srun_keeps_the_login_variables_it_starts_tasks_as_this_user_with():
    got = plan_forwarding(LAUNCHER, "all", login=True)
    assert {"HOME", "USER", "LOGNAME", "SHELL"} <= set(got.env)
    assert got.left_out == tuple(sorted(HOST_BOUND))


def test_listed_forwards_the_x_names_and_the_runtimes_own_variables_only():
    got = plan_forwarding(LAUNCHER, "listed", ("MY_SETTING",))
    assert got.env == {"GCURUN_NETWORK_INTERFACE": "eth1",
                       "HOROVOD_STALL_CHECK_DISABLE": "1", "MY_SETTING": "1"}
    assert "PYTHONPATH" in got.left_out and "HOSTNAME" in got.left_out


@pytest.mark.parametrize("mode", ["all", "listed"])
def test_a_name_given_with_x_crosses_whatever_the_rules_say(mode):
    got = plan_forwarding(LAUNCHER, mode, ("AWS_SECRET_KEY", "TMPDIR"))
    assert got.env["AWS_SECRET_KEY"] == "k" and got.env["TMPDIR"] == "/tmp/job.7"
    assert "AWS_SECRET_KEY" not in got.left_out


@pytest.mark.parametrize("name", ["SSH_ANYTHING", "MY_APP_SECRET_KEY", "ROCR_VISIBLE_DEVICES",
                                  "TOPS_VISIBLE_DEVICES", "BASH_FUNC_f%%", "XDG_SESSION_TYPE"])
def test_patterns_cover_whole_families(name):
    assert never_forwarded(name)


@pytest.mark.parametrize("name", ["PATH", "SSH", "SECRET_KEY_FILE", "MY_SSH_HOST", "TERM",
                                  "PYTHONPATH", "HOROVOD_GLOO_IFACE"])
def test_lookalikes_are_forwarded(name):
    assert not never_forwarded(name)


def test_a_name_no_shell_can_carry_stays_here():
    got = plan_forwarding({"A.B": "1", "1X": "2", "OK_1": "3"}, "all")
    assert got.env == {"OK_1": "3"} and got.left_out == ("1X", "A.B")


def test_every_rule_says_why():
    assert all(pattern and len(reason) > 8 for pattern, reason in NEVER_FORWARDED)
