"""Connections, the preflight and the SSH executor against a paramiko SSH server on
127.0.0.1 (no root needed): each failure with its own message, and a whole job."""

from __future__ import annotations

import getpass
import io
import os
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gcurun import __version__
from gcurun.config.api import Settings, SSHSettings
from gcurun.errors import RanksFailedError, SSHConnectError
from gcurun.hosts.api import HostSpec
from gcurun.launch.execute import run_job
from gcurun.launch.planning.plan import build_plan
from gcurun.launch.ssh import preflight as preflight_module
from gcurun.launch.ssh.api import Deadline, HostFailure
from gcurun.launch.ssh.connect import connect
from gcurun.launch.ssh.preflight import bootstrap_command, preflight
from gcurun.launch.ssh.sshconfig import SSHTarget
from gcurun.launch.supervision.output import OutputSink
from tests.helpers import ROOT, wait_for
from tests.launch.ssh.ssh_server import SSHTestServer, write_key

pytestmark = pytest.mark.integration


@dataclass
class Env:
    server: SSHTestServer
    key: Path
    known_hosts: Path
    tmp: Path

    def target(self, **overrides) -> SSHTarget:
        base = SSHTarget(
            alias="node", hostname="127.0.0.1", port=self.server.port, user=getpass.getuser(),
            identity_files=(str(self.key),), identities_only=True,
            known_hosts_files=(str(self.known_hosts),), global_known_hosts_files=(),
            host_key_policy="strict", timeout=5.0)
        return replace(base, **overrides)

    def connect(self, target: SSHTarget):
        from gcurun.launch.ssh.hostkeys import read_known_hosts

        known = read_known_hosts(target.known_hosts_files)
        return connect(target, known, Deadline(target.timeout))


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    key = write_key(tmp_path / "id_test")
    server = SSHTestServer(getpass.getuser(), {key.asbytes()},
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, home=str(tmp_path))
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line())
    yield Env(server, tmp_path / "id_test", known, tmp_path)
    server.close()


def failure(call) -> str:
    with pytest.raises(HostFailure) as info:
        call()
    return str(info.value)


# -- connect -----------------------------------------------------------------------------

def test_connects_with_a_known_host_key_and_an_authorized_key(env):
    conn = env.connect(env.target())
    assert conn.transport.is_authenticated()
    assert conn.notes == []
    conn.close()


def test_unknown_host_key_is_refused_by_default_and_recorded_by_accept_new(env):
    env.known_hosts.write_text("")
    name = f"[127.0.0.1]:{env.server.port}"
    msg = failure(lambda: env.connect(env.target()))
    assert msg.startswith(f"host key of {name} is unknown: it offered ecdsa-sha2-nistp256 "
                          "key SHA256:")
    assert f"ssh-keyscan -p {env.server.port} 127.0.0.1 >> {env.known_hosts}" in msg
    conn = env.connect(env.target(host_key_policy="accept-new"))
    assert conn.notes[0].startswith(f"node (127.0.0.1:{env.server.port}): added "
                                    "ecdsa-sha2-nistp256 key SHA256:")
    conn.close()
    assert env.known_hosts.read_text() == env.server.known_hosts_line()


def test_changed_host_key_is_refused_even_by_accept_new(env):
    import paramiko

    env.known_hosts.write_text(env.server.known_hosts_line(paramiko.ECDSAKey.generate()))
    for policy in ("strict", "accept-new"):
        msg = failure(lambda p=policy: env.connect(env.target(host_key_policy=p)))
        assert msg.startswith(f"HOST KEY CHANGED for [127.0.0.1]:{env.server.port}: ")
        assert f"{env.known_hosts}:1 holds another key" in msg


def test_policy_off_connects_anyway_and_says_so(env):
    env.known_hosts.write_text("")
    conn = env.connect(env.target(host_key_policy="off"))
    assert "host key not checked (--host-key-policy off)" in conn.notes[0]
    conn.close()


def test_a_rejected_key_and_a_missing_one_are_both_listed(env):
    other = env.tmp / "id_other"
    write_key(other)
    missing = env.tmp / "id_missing"
    msg = failure(lambda: env.connect(env.target(identity_files=(str(missing), str(other)))))
    assert msg.startswith(f"authentication as '{getpass.getuser()}' on 127.0.0.1 failed; "
                          f"keys tried: {missing} (no such file); {other} "
                          "(ecdsa-sha2-nistp256 SHA256:")
    assert msg.endswith("(rejected). Add the public key to "
                        f"~{getpass.getuser()}/.ssh/authorized_keys there, or choose a key "
                        "with --ssh-identity-file")


def test_a_refused_port_says_so():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = SSHTarget("node", "127.0.0.1", port, "u", (), False, (), (), "strict")
    msg = failure(lambda: connect(target, [], Deadline(5)))
    assert msg == (f"connection refused by 127.0.0.1 port {port}: no SSH server listens "
                   "there; start sshd, or give the right port (--ssh-port, Port in the ssh "
                   "config)")


def fake_server(reply: bytes):
    """A TCP server on 127.0.0.1 that sends ``reply`` to each client and hangs up, or,
    with nothing to say, keeps the connection open in silence."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    held = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            if reply:
                conn.sendall(reply)
                conn.close()
            else:
                held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    return srv


@pytest.mark.parametrize("reply, expected", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "does not speak SSH"),
    (b"", "timed out after 1 s during the SSH handshake"),
], ids=["http", "silent"])
def test_a_server_that_is_not_ssh_or_says_nothing(reply, expected):
    srv = fake_server(reply)
    port = srv.getsockname()[1]
    target = SSHTarget("node", "127.0.0.1", port, "u", (), False, (), (), "strict")
    try:
        assert expected in failure(lambda: connect(target, [], Deadline(1.0)))
    finally:
        srv.close()


def test_a_name_that_does_not_resolve(monkeypatch):
    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    target = SSHTarget("node", "gpu-nine", 22, "u", (), False, (), (), "strict")
    assert failure(lambda: connect(target, [], Deadline(5))) == (
        "cannot resolve host name 'gpu-nine': Name or service not known; check the name, "
        "/etc/hosts or DNS, or set HostName for it in the ssh config")


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """A private ssh-agent; ``agent(path)`` adds a key to it."""
    if not (shutil.which("ssh-agent") and shutil.which("ssh-add")):
        pytest.skip("ssh-agent is not installed (openssh-client)")
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_for("the agent's socket", sock.exists, 10)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
    yield lambda key: subprocess.run(["ssh-add", "-q", str(key)], check=True,
                                     capture_output=True, env=dict(os.environ))
    proc.kill()
    proc.wait(10)


def test_agent_keys_log_in_and_are_listed_when_refused(env, agent):
    other = env.tmp / "id_other"
    write_key(other)
    agent(other)
    msg = failure(lambda: env.connect(env.target(identity_files=(), identities_only=False)))
    assert "keys tried: agent key ecdsa-sha2-nistp256 SHA256:" in msg
    assert "(rejected)" in msg
    agent(env.key)
    env.connect(env.target(identity_files=(), identities_only=False)).close()


def test_an_encrypted_identity_file_is_used_through_the_agent(env, agent):
    import paramiko

    locked = env.tmp / "id_locked"
    paramiko.ECDSAKey.from_private_key_file(str(env.key)).write_private_key_file(
        str(locked), password="pw")
    shutil.copy(f"{env.key}.pub", f"{locked}.pub")
    target = env.target(identity_files=(str(locked),), identities_only=True)
    msg = failure(lambda: env.connect(target))
    assert f"keys tried: {locked} (encrypted; load it into ssh-agent with ssh-add)" in msg
    agent(env.key)
    env.connect(target).close()


# -- preflight ---------------------------------------------------------------------------

def test_preflight_starts_a_waiting_bootstrap_and_reports_progress(env):
    seen = []
    result = preflight([env.target()], progress=seen.append)
    session = result.sessions["node"]
    assert session.hello.version == __version__
    assert env.server.commands == [bootstrap_command(sys.executable)]
    assert [(p.host, p.ok, p.done, p.total) for p in seen] == [("node", True, 1, 1)]
    result.close()


def test_preflight_reports_every_failure_and_closes_the_good_hosts(env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    fake = env.tmp / "fakegc" / "gcurun"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "0.0.1"\n')
    old = env.tmp / "old-python"
    old.write_text(f'#!/bin/sh\nPYTHONPATH={fake.parent} exec {sys.executable} "$@"\n')
    old.chmod(0o755)
    targets = [env.target(alias="good"), env.target(alias="refused", port=closed_port),
               env.target(alias="old", python=str(old)),
               env.target(alias="nopython", python="/no/python3")]
    with pytest.raises(SSHConnectError) as info:
        preflight(targets)
    f = info.value.failures
    assert sorted(f) == ["nopython", "old", "refused"]
    assert f["refused"].startswith(f"connection refused by 127.0.0.1 port {closed_port}")
    assert f["old"].startswith(f"gcurun 0.0.1 is what {old} imports on old, but this "
                               f"launcher is gcurun {__version__}")
    assert f["nopython"].startswith("remote interpreter '/no/python3' not found on nopython")
    assert str(info.value).startswith("SSH preflight failed for 3 hosts; nothing was started")


def test_a_host_stuck_past_its_deadline_is_given_up(env, monkeypatch):
    release = threading.Event()

    def stuck(target, known, deadline, hops):
        release.wait(30)
        raise HostFailure("released")

    monkeypatch.setattr(preflight_module, "connect", stuck)
    monkeypatch.setattr(preflight_module, "OVERDUE_SLACK", 0.1)
    try:
        with pytest.raises(SSHConnectError) as info:
            preflight([env.target(timeout=0.3)])
    finally:
        release.set()
    assert info.value.failures["node"].startswith(
        "timed out after 0.3 s connecting to node (127.0.0.1:")


# -- a whole job: prepare, then execute -------------------------------------------------

def job(env, argv, hosts=(("sshnode", 2),)):
    config = env.tmp / "ssh_config"
    config.write_text(f"Host sshnode\n  HostName 127.0.0.1\n  Port {env.server.port}\n"
                      f"  IdentityFile {env.key}\n  IdentitiesOnly yes\n"
                      f"  UserKnownHostsFile {env.known_hosts}\n")
    settings = Settings(ssh=SSHSettings(config_file=str(config)), grace_seconds=2.0,
                        sources={"ssh.config_file": "cli"})
    plan = build_plan(tuple(HostSpec(n, s) for n, s in hosts), argv, workdir=str(env.tmp),
                      local_names=frozenset({"localhost"}))
    out, err = io.StringIO(), io.StringIO()
    return plan, settings, OutputSink(out, err), out, err


def test_a_job_over_ssh_with_a_local_rank_beside(env):
    plan, settings, sink, out, _ = job(
        env, ["sh", "-c", 'echo "$GCURUN_RANK/$GCURUN_SIZE $GCURUN_SECRET"'],
        hosts=(("localhost", 1), ("sshnode", 2)))
    assert [r.is_local for r in plan.ranks] == [True, False, False]
    run_job(plan, settings, sink, secrets={"GCURUN_SECRET": "k"})
    assert sorted(out.getvalue().splitlines()) == ["[0] 0/3 k", "[1] 1/3 k", "[2] 2/3 k"]


def test_a_failing_remote_rank_stops_the_job_with_its_code(env):
    marker = env.tmp / "started"
    plan, settings, sink, _, _ = job(env, ["sh", "-c", (
        f'if [ "$GCURUN_RANK" = 1 ]; then exit 9; fi; echo $$ > {marker}; exec sleep 60')])
    with pytest.raises(RanksFailedError) as info:
        run_job(plan, settings, sink)
    assert (info.value.failure.rank, info.value.failure.exit_code) == (1, 9)
    assert info.value.exit_code == 9
    if marker.exists():
        pid = int(marker.read_text())
        wait_for("rank 0 to be stopped", lambda: not os.path.exists(f"/proc/{pid}/stat") or
                 open(f"/proc/{pid}/stat").read().split()[2] == "Z", 10)
