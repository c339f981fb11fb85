"""The guard that keeps an mpirun job from outliving gcurun, on plain processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from gcurun.launch.remote import session_guard
from tests.helpers import survivors, wait_for

GUARD = session_guard.__file__

# A stand-in for mpirun: starts a "rank" in its own process group that ignores SIGTERM
# and has a child of its own, records the pids, then waits.
FAKE_MPIRUN = r"""
import json, os, subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-c",
    "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
    "print(c.pid, flush=True); time.sleep(120)"],
    preexec_fn=os.setpgrp, stdout=subprocess.PIPE, text=True)
child = int(rank.stdout.readline())
open(sys.argv[1] + '.tmp', 'w').write(json.dumps([os.getpid(), rank.pid, child]))
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
time.sleep(120)
"""


def guard(*argv, grace="0.5", **kw):
    return subprocess.Popen([sys.executable, GUARD, grace, "--", *argv],
                            start_new_session=True, **kw)


def test_exit_code_and_signal_of_mpirun_come_through():
    assert guard("sh", "-c", "exit 7").wait(timeout=60) == 7
    assert guard("sh", "-c", "kill -9 $$").wait(timeout=60) == -signal.SIGKILL


def test_missing_program():
    proc = guard("no-such-mpirun-xyz", stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 127 and "cannot run 'no-such-mpirun-xyz'" in err


def pids_of(path):
    wait_for("the fake mpirun's pids", path.exists)
    return json.loads(path.read_text())


def test_stop_sweeps_the_whole_session(tmp_path):
    record = tmp_path / "pids.json"
    proc = guard(sys.executable, "-c", FAKE_MPIRUN, str(record))
    pids = pids_of(record)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert survivors(pids) == []


def test_a_dead_parent_stops_the_job(tmp_path):
    record = tmp_path / "pids.json"
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time; subprocess.Popen(sys.argv[1:], "
                               "start_new_session=True); time.sleep(120)",
                               sys.executable, GUARD, "0.5", "--", sys.executable, "-c",
                               FAKE_MPIRUN, str(record)])
    try:
        pids = pids_of(record)
        parent.kill()
        parent.wait(timeout=30)
    finally:
        parent.kill()
    assert survivors(pids, timeout=30) == []
