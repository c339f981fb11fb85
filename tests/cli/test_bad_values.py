"""Every bad value is refused before anything starts: exit 2 and a message quoting it,
whether it comes from the command line, a profile or the environment."""

from __future__ import annotations

import os

import pytest

from gcurun.cli.main import main


def gcurun(capsys, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run gcurun in this process; (exit code, stderr)."""
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        with pytest.raises(SystemExit) as done:
            main(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return done.value.code, capsys.readouterr().err


@pytest.mark.parametrize("option, value, rule", [
    ("--grace-seconds", "nan", "a number from 0 to 86400"),
    ("--grace-seconds", "inf", "a number from 0 to 86400"),
    ("--grace-seconds", "-5", "a number from 0 to 86400"),
    ("--cycle-time-ms", "0", "a number above 0 and at most 60000"),
    ("--cycle-time-ms", "-3", "a number above 0 and at most 60000"),
    ("--fusion-threshold-mb", "-1", "a number from 0 to 65536"),
    ("--stall-check-warning-seconds", "-1", "a number from 0 to 604800"),
    ("--stall-check-shutdown-seconds", "nan", "a number from 0 to 604800"),
    ("--master-port", "70000", "an integer from 1 to 65535"),
    ("--ssh-port", "0", "an integer from 1 to 65535"),
    ("--ssh-port", "99999", "an integer from 1 to 65535"),
    ("--ssh-timeout", "0", "a number above 0 and at most 86400"),
    ("--liveness-timeout", "0", "a number above 0 and at most 86400"),
    ("--liveness-timeout", "-3", "a number above 0 and at most 86400"),
    ("-np", "0", "an integer from 1 to 1048576"),
])
def test_a_number_out_of_range_on_the_command_line(capsys, option, value, rule):
    ranks = () if option == "-np" else ("-np", "1")
    code, err = gcurun(capsys, option, value, *ranks, "true")
    assert code == 2
    assert err == (f"gcurun: error: {option} {value}: expected {rule}; give {option} a "
                   "value in that range\n")


@pytest.mark.parametrize("variable, value, rule", [
    ("GCURUN_GRACE_SECONDS", "inf", "a number from 0 to 86400"),
    ("GCURUN_SSH_PORT", "0", "an integer from 1 to 65535"),
    ("GCURUN_SSH_TIMEOUT", "0", "a number above 0 and at most 86400"),
    ("GCURUN_CYCLE_TIME_MS", "-3", "a number above 0 and at most 60000"),
    ("GCURUN_LIVENESS_TIMEOUT", "0", "a number above 0 and at most 86400"),
])
def test_the_same_bounds_for_environment_variables(capsys, variable, value, rule):
    code, err = gcurun(capsys, "-np", "1", "true", env={variable: value})
    assert code == 2
    assert err == (f"gcurun: error: {variable}={value!r}: expected {rule}; fix the value or "
                   f"unset {variable}\n")


@pytest.mark.parametrize("text, message", [
    ("grace_seconds: .nan", "grace_seconds: expected a number, got '.nan'"),
    ("ssh:\n  port: 0", "ssh.port: expected an integer from 1 to 65535, got '0'"),
    ("ssh:\n  timeout: 0", "ssh.timeout: expected a number above 0 and at most 86400, got '0'"),
    ("liveness_timeout: 0",
     "liveness_timeout: expected a number above 0 and at most 86400, got '0'"),
    ("runtime:\n  cycle_time_ms: -3",
     "runtime.cycle_time_ms: expected a number above 0 and at most 60000, got '-3'"),
])
def test_the_same_bounds_for_profiles(capsys, tmp_path, text, message):
    profile = tmp_path / "p.yaml"
    profile.write_text(text + "\n")
    code, err = gcurun(capsys, "--profile", str(profile), "-np", "1", "true")
    assert code == 2
    line = text.count("\n") + 1
    assert err == f"gcurun: error: {profile}:{line}: {message}\n"


@pytest.mark.parametrize("args, message", [
    (("--output-dir", "/proc/nope"), "--output-dir '/proc/nope': cannot create it in '/proc' "
     "(No such file or directory); give a directory this host can write"),
    (("--output-dir", "/etc/passwd/logs"), "--output-dir '/etc/passwd/logs': '/etc/passwd' is "
     "not a directory; give a directory this host can write"),
    (("--timeline-filename", "/proc/nope/x"), "--timeline-filename '/proc/nope/x': the "
     "directory '/proc/nope' does not exist; give a file path in a directory the ranks can "
     "write"),
])
def test_places_this_host_cannot_write_are_refused_before_the_start(capsys, tmp_path, args,
                                                                      message):
    marker = tmp_path / "ran"
    code, err = gcurun(capsys, *args, "-np", "1", "touch", str(marker))
    assert code == 2
    assert err == f"gcurun: error: {message}\n"
    assert not marker.exists()


def test_places_from_the_environment_are_quoted_with_their_variable(capsys):
    code, err = gcurun(capsys, "-np", "1", "true", env={"HOROVOD_TIMELINE": "/proc/nope/t"})
    assert code == 2
    assert err == ("gcurun: error: HOROVOD_TIMELINE='/proc/nope/t': the directory '/proc/nope' "
                   "does not exist; give a file path in a directory the ranks can write\n")


@pytest.mark.parametrize("option", ["--hostfile", "--profile"])
def test_an_endless_file_is_read_only_up_to_a_cap(capsys, option):
    code, err = gcurun(capsys, option, "/dev/zero", "-np", "1", "true")
    assert code == 2
    kind, cap = ("hostfile", 8) if option == "--hostfile" else ("profile", 4)
    assert err.startswith(f"gcurun: error: {kind} '/dev/zero' is larger than {cap} MiB")


def test_more_local_ranks_than_four_per_usable_cpu_need_oversubscribe(capsys):
    cpus = len(os.sched_getaffinity(0))
    many = str(4 * cpus + 1)
    code, err = gcurun(capsys, "-np", many, "--dry-run", "true")
    assert code == 2
    assert err == (f"gcurun: error: {many} ranks on this host are more than 4 x the {cpus} "
                   f"CPUs this process may use ({many} > {4 * cpus}); lower -np, add hosts, "
                   "or pass --oversubscribe\n")
    code, err = gcurun(capsys, "-np", many, "--oversubscribe", "--dry-run", "true")
    assert code == 0
    assert err == (f"gcurun: warning: {many} ranks on this host are more than 4 x the {cpus} "
                   f"CPUs this process may use ({many} > {4 * cpus}) (allowed by "
                   "--oversubscribe)\n")


USER_RULE = ("is not a user name; a user name holds letters, digits, '.', '_' and '-' and "
             "does not start with '-'")


@pytest.mark.parametrize("text, message", [
    ('hosts:\n  - name: "bad$host"', "2: hosts[0].name: host name 'bad$host': '$' cannot "
     "appear in a host name; use letters, digits, '-', '.' and '_'"),
    ('hosts:\n  - name: "-oProxyCommand=x"', "2: hosts[0].name: host name "
     "'-oProxyCommand=x': a host name cannot start with '-'; check the spelling"),
    ('hosts:\n  - name: "10.0.0.256"', "2: hosts[0].name: host name '10.0.0.256': "
     "'10.0.0.256' is not a valid IPv4 address; each of its four parts is a number from 0 "
     "to 255 without leading zeros"),
    ('hosts:\n  - name: a\n    user: "us$er"', f"3: hosts[0].user: 'us$er' {USER_RULE}"),
    ('ssh:\n  user: "-oProxyCommand=x"', f"2: ssh.user: '-oProxyCommand=x' {USER_RULE}"),
    ('ssh:\n  user: "a b"', f"2: ssh.user: 'a b' {USER_RULE}"),
])
def test_profile_hosts_and_users_follow_the_rules_of_dash_h(capsys, tmp_path, text, message):
    profile = tmp_path / "p.yaml"
    profile.write_text(text + "\n")
    code, err = gcurun(capsys, "--profile", str(profile), "--dry-run", "true")
    assert (code, err) == (2, f"gcurun: error: {profile}:{message}\n")


def test_profile_ipv6_hosts_bare_or_in_brackets_are_accepted(capsys, tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text('hosts:\n  - name: "[fe80::1]"\n  - name: "fe80::2"\n'
                       'ssh:\n  user: deploy.user_1\n')
    code, err = gcurun(capsys, "--profile", str(profile), "--dry-run", "true")
    assert (code, err) == (0, "")


def test_ssh_user_on_the_command_line_follows_the_rule_of_dash_h(capsys):
    code, err = gcurun(capsys, "--ssh-user", "-oProxyCommand=x", "-H", "a:1", "--dry-run",
                       "true")
    assert (code, err) == (2, "gcurun: error: --ssh-user '-oProxyCommand=x': "
                              f"'-oProxyCommand=x' {USER_RULE}\n")


def test_ssh_user_in_the_environment_follows_the_rule_of_dash_h(capsys):
    code, err = gcurun(capsys, "-H", "a:1", "--dry-run", "true",
                       env={"GCURUN_SSH_USER": "a b"})
    assert (code, err) == (2, f"gcurun: error: GCURUN_SSH_USER='a b': 'a b' {USER_RULE}; fix "
                              "the value or unset GCURUN_SSH_USER\n")
