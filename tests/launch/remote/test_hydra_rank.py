"""The shim's way of running a rank under Hydra, on real processes without Hydra: whole
output lines, the failure marker, signals passed on, and the marker's parser."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from gcurun.launch.remote.hydra_rank import parse_exit_marker
from tests.helpers import ROOT, wait_for

# A rank started the way Hydra's proxy starts one: rank variables, no group of its own.
RUN = """
import os, sys
from gcurun.launch.remote.hydra_rank import run_hydra_rank
from gcurun.launch.remote.bind_exec import exec_command
run_hydra_rank(int(sys.argv[1]), lambda: exec_command(sys.argv[2:]))
"""


def hydra_rank(rank: int, *command: str, **kw) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", RUN, str(rank), *command], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def test_output_written_in_pieces_comes_out_in_whole_lines():
    # Every os.write is one piece; Hydra would tag each of them.
    pieces = ("import os, time\n"
              "for piece in (b'rank', b' 1', b' of 2\\n', b'tail without newline'):\n"
              "    os.write(1, piece); time.sleep(0.05)\n"
              "os.write(2, b'err'); os.write(2, b'or\\n')")
    proc = hydra_rank(1, sys.executable, "-c", pieces)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out == b"rank 1 of 2\ntail without newline"
    assert err == b"error\n"


def test_a_failing_command_is_marked_and_its_code_kept():
    proc = hydra_rank(3, "sh", "-c", "echo bye >&2; exit 7")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 7
    assert err == b"bye\ngcurun-rank-exit: 3 7\n"


def test_a_command_killed_by_a_signal_is_marked_and_the_shim_dies_the_same_way():
    proc = hydra_rank(0, "sh", "-c", "kill -KILL $$")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert err == b"gcurun-rank-exit: 0 signal 9\n"


def test_signals_reach_the_command_and_success_is_not_marked(tmp_path):
    ready = tmp_path / "ready"
    script = f"trap 'exit 0' TERM; touch {ready}; while :; do sleep 0.05; done"
    proc = hydra_rank(2, "sh", "-c", script)
    wait_for("the command to run", ready.exists)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (0, b"", b"")


def test_the_marker_parser():
    assert parse_exit_marker(b"gcurun-rank-exit: 3 7\n") == (3, 7, None)
    assert parse_exit_marker(b"gcurun-rank-exit: 0 signal 9") == (0, None, 9)
    assert parse_exit_marker(b"gcurun-rank-exit: x 7") is None
    assert parse_exit_marker(b"rank 3 exited") is None
