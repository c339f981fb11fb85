"""No process of a local job outlives it: a SIGKILLed launcher, a killed bootstrap, a
failure while ranks start, a signal while thousands of ranks start."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from gcurun.hosts.api import HostSpec
from gcurun.launch.execute import _run_groups
from tests.helpers import RANKS, ROOT, all_pids, gcurun_cmd, read_ranks, survivors, wait_for

pytestmark = pytest.mark.integration

WORKER = str(RANKS / "worker.py")


def start_gcurun(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(gcurun_cmd(*args), cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def local_bootstrap(launcher: int) -> psutil.Process:
    """The bootstrap gcurun ``launcher`` started for its local ranks."""
    for child in psutil.Process(launcher).children():
        if "gcurun.launch.remote.bootstrap" in " ".join(child.cmdline()):
            return child
    raise AssertionError("gcurun started no bootstrap")


def test_ranks_and_their_children_do_not_outlive_a_sigkilled_launcher(tmp_path):
    proc = start_gcurun("-np", "3", "--grace-seconds", "1", sys.executable, WORKER,
                        str(tmp_path), "--grandchild")
    try:
        wait_for("every rank ready", lambda: all(
            (tmp_path / f"rank-{r}.json").exists() for r in range(3)))
        proc.kill()
        proc.wait(10)
        pids = all_pids(read_ranks(tmp_path, 3))
        assert len(pids) == 6
        assert survivors(pids, timeout=15) == []
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_bootstrap_takes_every_rank_and_child_and_fails_the_job(tmp_path, signum):
    proc = start_gcurun("-np", "2", "--grace-seconds", "1", sys.executable, WORKER,
                        str(tmp_path), "--grandchild")
    try:
        wait_for("every rank ready", lambda: all(
            (tmp_path / f"rank-{r}.json").exists() for r in range(2)))
        local_bootstrap(proc.pid).send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 255, err
    name = signal.Signals(signum).name
    how = f"was killed by {name} without reporting" if signum == signal.SIGKILL else \
        f"received {name} and stopped its ranks"
    assert ("gcurun: job failed: rank 0 on localhost exited with code 255 (root cause)"
            in err), err
    assert f"gcurun's bootstrap on localhost {how}" in err, err
    assert survivors(all_pids(read_ranks(tmp_path, 2)), timeout=15) == []


class Started:
    """A fake group whose start works or raises, and which records its stop."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail, self.stopped = fail, 0

    def start(self, events: queue.Queue) -> None:
        if self.fail is not None:
            raise self.fail

    def terminate(self, grace_seconds: float) -> None:
        self.stopped += 1

    def pids(self) -> dict[int, int]:
        return {}


def test_any_error_while_starting_stops_every_group_the_failing_one_too(monkeypatch):
    from gcurun.config.api import Settings
    from gcurun.launch import execute
    from gcurun.launch.planning.plan import build_plan
    from gcurun.launch.prepare import PreparedJob

    groups = [Started(), Started(RuntimeError("can't start new thread")), Started()]
    monkeypatch.setattr(execute, "group_factory", lambda launcher: lambda job, s: groups)
    job = PreparedJob(build_plan([HostSpec("localhost", 1)], ["true"]), Settings())
    with pytest.raises(RuntimeError, match="can't start new thread"):
        _run_groups(job, None, {})  # type: ignore[arg-type]
    assert [g.stopped for g in groups] == [1, 1, 1]


def pids_cgroup(limit: int) -> Path | None:
    """A new cgroup (v1 or v2) that allows ``limit`` tasks, or None where none can be made."""
    v1, v2 = Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")
    if (v1 / "cgroup.procs").exists():
        base = v1
    elif "pids" in (v2 / "cgroup.subtree_control").read_text(errors="replace") \
            if (v2 / "cgroup.subtree_control").exists() else False:
        base = v2
    else:
        return None
    group = base / f"gcurun-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(limit))
    except OSError:
        return None
    return group


def test_running_out_of_processes_while_starting_leaves_nothing_behind(tmp_path):
    """A pids limit makes process creation fail mid-start: the job fails naming the rank
    that could not start, and every task of the job is gone (the cgroup is empty)."""
    if os.geteuid() != 0:
        pytest.skip("a pids cgroup needs root")
    group = pids_cgroup(24)
    if group is None:
        pytest.skip("no pids cgroup controller to limit the job's processes with")

    def enter() -> None:
        (group / "cgroup.procs").write_text(str(os.getpid()))

    try:
        proc = subprocess.Popen(
            gcurun_cmd("-np", "40", "--oversubscribe", "--grace-seconds", "1",
                       "sleep", "60"), cwd=ROOT, text=True, preexec_fn=enter,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 1, err
        assert "(root cause)" in err and "Resource temporarily unavailable; the host's " \
            "limit on processes or open files" in err, err
        wait_for("every task of the job to end", lambda: not (
            group / "cgroup.procs").read_text().split(), 15)
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        wait_for("the cgroup to empty", lambda: not (group / "cgroup.procs").read_text()
                 .split(), 10)
        group.rmdir()


def test_a_signal_stops_a_start_of_thousands_of_ranks(tmp_path):
    """SIGINT while 20,000 ranks start: gcurun exits 130 long before they all began (the
    time it takes is printed; benchmarks/launch_scale.py measures it)."""
    began = tmp_path / "began"
    proc = start_gcurun("-np", "20000", "--oversubscribe", "sh", "-c",
                        f"echo $GCURUN_RANK >> {began}")
    try:
        wait_for("the first ranks to begin", lambda: began.exists() and
                 len(began.read_text().split()) >= 10, 120)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    count = len(began.read_text().split())
    print(f"SIGINT to exit: {took:.2f} s, {count} of 20000 ranks had begun")
    assert proc.returncode == 130, err
    assert "gcurun: interrupted by SIGINT; stopped every rank" in err, err
    assert count < 20000


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_ssh_preflight_ends_gcurun_as_during_the_run(tmp_path, signum):
    """A host that accepts the connection but never answers keeps the preflight waiting:
    a signal then ends gcurun at once with 128+N and its one-line message."""
    import socket

    silent = socket.create_server(("127.0.0.1", 0))
    config = tmp_path / "ssh_config"
    config.write_text(f"Host silent\n  HostName 127.0.0.1\n  Port {silent.getsockname()[1]}\n")
    try:
        proc = start_gcurun("-H", "silent:1", "--ssh-config", str(config), "--ssh-timeout",
                            "60", "true")
        wait_for("gcurun to connect", lambda: _accepted(silent), 60)
        sent = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        print(f"{signal.Signals(signum).name} to exit: {time.monotonic() - sent:.2f} s")
    finally:
        silent.close()
    assert proc.returncode == 128 + signum, err
    assert err == f"gcurun: interrupted by {signal.Signals(signum).name}; stopped every rank\n"


def _accepted(server) -> bool:
    server.settimeout(0.05)
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return False
    _accepted.held = conn   # type: ignore[attr-defined]  # kept open, never answered
    return True
