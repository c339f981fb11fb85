"""SSH launch on namespace hosts: real sshd, real connections, real remote processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psutil
import pytest

from tests.cluster.driver import run_in_process
from tests.helpers import ROOT, rank_reports, run_gcurun, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

HERE = Path(__file__).resolve().parent
RANK = str(HERE / "rank_report.py")
DRIVER = str(HERE / "driver.py")


def spec(cluster, hosts, argv, **extra):
    return {"ssh_config": str(cluster.ssh_config), "hosts": hosts, "argv": argv,
            "workdir": str(ROOT), **extra}


def processes_with(token: str) -> list[psutil.Process]:
    """Live processes (on every namespace host: they share our pid namespace) whose
    command line or environment mentions ``token``."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
            continue
        try:
            if token in " ".join(p.info["cmdline"] or ()) or token in p.environ().get(
                    "TEST_TOKEN", ""):
                found.append(p)
        except psutil.Error:
            continue
    return found


def bootstraps(cluster, *, guards: bool = True) -> list[psutil.Process]:
    """gcurun bootstraps running on the hosts of ``cluster``, with their guards (forks of
    theirs named gcurun-guard) unless ``guards`` is False."""
    inodes = {h.net_namespace_inode() for h in cluster.hosts}
    found = []
    for p in psutil.process_iter(["cmdline", "name"]):
        try:
            if "gcurun.launch.remote.bootstrap" in " ".join(p.info["cmdline"] or ()) and \
                    os.stat(f"/proc/{p.pid}/ns/net").st_ino in inodes and \
                    (guards or p.info["name"] != "gcurun-guard"):
                found.append(p)
        except OSError:
            continue
    return found


def test_ranks_get_their_environment_and_run_inside_their_hosts(netns_cluster, tmp_path):
    token = uuid.uuid4().hex
    result, out, err = run_in_process(spec(
        netns_cluster, [["h1", 2], ["h2", 2]], [sys.executable, RANK], np=4,
        env={"TEST_TOKEN": token}, secrets={"GCURUN_SECRET": "s3cret-" + token},
        output_dir=str(tmp_path)))
    assert result == {"error": None}, err
    got = rank_reports(out)
    assert sorted(got) == [0, 1, 2, 3]
    for rank, r in got.items():
        host = netns_cluster.host("h1" if rank < 2 else "h2")
        assert r["hostname"] == host.name
        assert r["netns"] == host.net_namespace_inode()
        assert r["netns"] != os.stat("/proc/self/ns/net").st_ino
        assert r["cwd"] == str(ROOT)
        assert r["pid"] == r["pgid"] == r["sid"]  # its own session and process group
        env = r["env"]
        assert env["GCURUN_RANK"] == env["HOROVOD_RANK"] == env["RANK"] == str(rank)
        assert env["GCURUN_SIZE"] == env["WORLD_SIZE"] == "4"
        assert env["GCURUN_LOCAL_RANK"] == env["LOCAL_RANK"] == str(rank % 2)
        assert env["GCURUN_CROSS_RANK"] == str(rank // 2)
        assert env["GCURUN_HOSTNAME"] == host.name
        assert env["TEST_TOKEN"] == token
        assert env["GCURUN_SECRET"] == "s3cret-" + token
        assert env["HOME"] == "/root"  # the login environment is kept
        log = (tmp_path / f"rank-{rank}.stdout.log").read_text()
        assert json.loads(log) == r


def test_a_mixed_plan_runs_the_launchers_own_ranks_locally(netns_cluster):
    result, out, err = run_in_process(spec(
        netns_cluster, [["localhost", 1], ["h2", 1]], [sys.executable, RANK]))
    assert result == {"error": None}, err
    got = rank_reports(out)
    assert got[0]["netns"] == os.stat("/proc/self/ns/net").st_ino
    assert got[1]["hostname"] == "h2"
    assert got[1]["netns"] == netns_cluster.host("h2").net_namespace_inode()


@pytest.mark.parametrize("how, expected", [
    ("exit 7", {"exit_code": 7, "signal": None}),
    ("kill -SEGV $$", {"exit_code": None, "signal": signal.SIGSEGV}),
])
def test_a_remote_failure_comes_back_exactly_and_stops_every_host(netns_cluster, how,
                                                                  expected):
    token = uuid.uuid4().hex
    script = f'if [ "$GCURUN_RANK" = 3 ]; then sleep 0.3; {how}; fi; exec sleep 300 # {token}'
    result, _, err = run_in_process(spec(
        netns_cluster, [["h1", 2], ["h2", 2]], ["sh", "-c", script], np=4))
    assert result["error"] == "RanksFailedError", err
    assert (result["rank"], result["host"]) == (3, "h2")
    assert {k: result[k] for k in expected} == expected
    wait_for("no rank process left on any host", lambda: not processes_with(token), 10)
    wait_for("every bootstrap to exit", lambda: not bootstraps(netns_cluster), 10)


def test_preflight_failures_name_each_host_and_cause_and_start_nothing(netns_cluster,
                                                                       tmp_path):
    net, key = netns_cluster.subnet_prefix, netns_cluster.identity_file
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)],
                   check=True)
    (tmp_path / "empty_known_hosts").write_text("")
    lines = netns_cluster.known_hosts.read_text().splitlines()
    h2_key = lines[1].split(" ", 1)[1]
    (tmp_path / "changed_known_hosts").write_text(f"{net}.2 {h2_key}\n")
    entries = {
        "unreachable": (f"{net}.250", key, netns_cluster.known_hosts, 22),
        "refused": (f"{net}.3", key, netns_cluster.known_hosts, 2222),
        "wrongkey": (f"{net}.2", wrong, netns_cluster.known_hosts, 22),
        "unknownkey": (f"{net}.3", key, tmp_path / "empty_known_hosts", 22),
        "changedkey": (f"{net}.2", key, tmp_path / "changed_known_hosts", 22),
    }
    config = tmp_path / "ssh_config"
    config.write_text("".join(
        f"Host {alias}\n  HostName {addr}\n  Port {port}\n  User root\n  IdentityFile {ident}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n  GlobalKnownHostsFile /dev/null\n"
        for alias, (addr, ident, kh, port) in entries.items()))
    marker = tmp_path / "ran"
    result, _, _ = run_in_process({
        "ssh_config": str(config), "hosts": [[a, 1] for a in entries],
        "argv": ["touch", str(marker)], "timeout": 2.0})
    assert result["error"] == "SSHConnectError"
    f = result["failures"]
    assert sorted(f) == sorted(entries)
    assert f"no answer from {net}.250 port 22 within 2 s" in f["unreachable"] or \
        f"no route to {net}.250" in f["unreachable"]
    assert f"connection refused by {net}.3 port 2222" in f["refused"]
    assert f"authentication as 'root' on {net}.2 failed; keys tried: {wrong} (ssh-ed25519" \
        in f["wrongkey"] and "(rejected)" in f["wrongkey"]
    assert f"host key of {net}.3 is unknown" in f["unknownkey"]
    assert f"HOST KEY CHANGED for {net}.2" in f["changedkey"]
    assert f"{tmp_path / 'changed_known_hosts'}:1 holds another key" in f["changedkey"]
    assert not marker.exists()


def test_preflight_reports_a_missing_interpreter_and_a_version_mismatch(netns_cluster,
                                                                         tmp_path):
    fake = tmp_path / "fakegc" / "gcurun"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "0.0.7"\n')
    python = tmp_path / "python-with-old-gcurun"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={fake.parent} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    result, _, _ = run_in_process(spec(
        netns_cluster, [["h1", 1, str(python)], ["h2", 1, "/no/such/python3"]], ["true"]))
    assert result["error"] == "SSHConnectError"
    f = result["failures"]
    assert f["h1"].startswith(f"gcurun 0.0.7 is what {python} imports on h1, but this "
                              "launcher is gcurun ")
    assert f["h2"].startswith("remote interpreter '/no/such/python3' not found on h2")


def test_accept_new_records_an_unknown_host_key(netns_cluster, tmp_path):
    known = tmp_path / "known_hosts"
    config = tmp_path / "ssh_config"
    config.write_text(netns_cluster.ssh_config.read_text().replace(
        str(netns_cluster.known_hosts), str(known)))
    job = {"ssh_config": str(config), "hosts": [["h3", 1]], "argv": ["true"]}
    strict, _, _ = run_in_process(job)
    assert "host key of" in strict["failures"]["h3"]
    accepted, _, err = run_in_process({**job, "policy": "accept-new"})
    assert accepted == {"error": None}, err
    assert known.read_text().split()[0] == netns_cluster.host("h3").address
    again, _, err = run_in_process(job)
    assert again == {"error": None}, err


def test_proxy_jump_and_command_reach_a_host_only_through_another(netns_cluster, tmp_path):
    # 127.0.0.1 inside h1's namespace is h1's own sshd: only reachable through h1.
    h1_key = netns_cluster.known_hosts.read_text().splitlines()[0].split(" ", 1)[1]
    known = tmp_path / "known_hosts"
    known.write_text(netns_cluster.known_hosts.read_text() + f"127.0.0.1 {h1_key}\n")
    config = tmp_path / "ssh_config"
    through = (f"  User root\n  IdentityFile {netns_cluster.identity_file}\n"
               f"  UserKnownHostsFile {known}\n\n")
    config.write_text(
        "Host inner\n  HostName 127.0.0.1\n  ProxyJump h1\n" + through
        + f"Host inner2\n  HostName 127.0.0.1\n  ProxyCommand ssh -F {config} -W %h:%p h1\n"
        + through + netns_cluster.ssh_config.read_text())
    result, out, err = run_in_process({"ssh_config": str(config),
                                       "hosts": [["inner", 1], ["inner2", 1]],
                                       "argv": [sys.executable, RANK], "workdir": "/"})
    assert result == {"error": None}, err
    got = rank_reports(out)
    assert got[0]["hostname"] == got[1]["hostname"] == "h1"
    assert got[0]["netns"] == netns_cluster.host("h1").net_namespace_inode()


def start_driver(netns_cluster, tmp_path, token, go_file):
    job = spec(netns_cluster, [["h1", 2], ["h2", 2]], [sys.executable, RANK], np=4,
               env={"TEST_TOKEN": token, "GO_FILE": str(go_file)},
               secrets={"GCURUN_SECRET": "secret-" + token}, grace=2.0)
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    proc = subprocess.Popen([sys.executable, DRIVER, str(job_file)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines: list[str] = []

    def read():
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    wait_for("all 4 ranks to report", lambda: len(rank_reports("".join(lines))) == 4, 30)
    return proc, lines


def test_no_rank_environment_shows_on_any_command_line(netns_cluster, tmp_path):
    token = uuid.uuid4().hex
    go = tmp_path / "go"
    proc, lines = start_driver(netns_cluster, tmp_path, token, go)
    try:
        ranks = processes_with(token)
        assert len(ranks) == 4  # found by their environment ...
        for p in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(p.info["cmdline"] or ())
            assert token not in cmdline, cmdline  # ... but no command line holds it
        assert len(bootstraps(netns_cluster, guards=False)) == 2
    finally:
        go.touch()
        proc.wait(30)
    assert lines[-1] == 'RESULT {"error": null}\n'


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_or_interrupted_launcher_leaves_no_rank_alive(netns_cluster, tmp_path,
                                                                signum):
    token = uuid.uuid4().hex
    proc, lines = start_driver(netns_cluster, tmp_path, token, tmp_path / "never")
    assert len(processes_with(token)) == 4
    proc.send_signal(signum)
    proc.wait(30)
    wait_for("every rank on every host to be gone", lambda: not processes_with(token), 15)
    wait_for("every bootstrap to exit", lambda: not bootstraps(netns_cluster), 10)
    if signum == signal.SIGINT:
        assert json.loads(lines[-1].removeprefix("RESULT "))["error"] == "JobInterrupted"


def test_the_cli_exits_with_a_remote_ranks_code(netns_cluster):
    done = run_gcurun("-np", "4", "-H", "h1:2,h2:2", "--ssh-config",
                      str(netns_cluster.ssh_config), "-x", "EXIT_CODE=5",
                      sys.executable, RANK, timeout=60)
    assert done.returncode == 5, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("gcurun: job failed: rank ")
    assert first.endswith("exited with code 5 (root cause); every other rank was stopped")
    rank, host = int(first.split()[4]), first.split()[6]
    assert rank_reports(done.stdout)[rank]["hostname"] == host  # its output came back first


def test_the_cli_reports_preflight_failures_and_exits_1(netns_cluster, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host ghost\n  HostName {netns_cluster.subnet_prefix}.251\n\n"
                      + netns_cluster.ssh_config.read_text())
    done = run_gcurun("-np", "2", "-H", "h1:1,ghost:1", "--ssh-config", str(config),
                      "--ssh-timeout", "1.5", "true", timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith(
        "gcurun: error: SSH preflight failed for 1 host; nothing was started:\n  ghost: ")
    assert done.stdout == ""


def test_a_dropped_connection_fails_the_job_and_leaves_no_rank(netns_cluster, tmp_path):
    token = uuid.uuid4().hex
    proc, lines = start_driver(netns_cluster, tmp_path, token, tmp_path / "never")
    h1 = netns_cluster.host("h1").net_namespace_inode()
    (boot,) = [b for b in bootstraps(netns_cluster, guards=False)
               if os.stat(f"/proc/{b.pid}/ns/net").st_ino == h1]
    boot.parent().kill()   # the sshd session process: the connection to h1 drops
    proc.wait(30)
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert (result["error"], result["host"], result["exit_code"]) == (
        "RanksFailedError", "h1", 255)
    assert result["error_text"] == ("lost the SSH connection to h1: the host closed it or "
                                    "went down")
    wait_for("every rank on every host to be gone", lambda: not processes_with(token), 15)
