"""The remote bootstrap: its wire format (pure) and the real process driven over pipes."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import psutil
import pytest

from gcurun import __version__
from gcurun.launch.remote.bootstrap import (
    FENCED_EXIT_CODE,
    binding_argv,
    merged_environment,
    spawn_failure,
)
from gcurun.launch.remote.protocol import (
    ERROR,
    EXIT,
    STARTED,
    STDERR,
    STDOUT,
    FrameReader,
    MessageReader,
    hello_line,
    pack_frame,
    parse_hello,
)
from gcurun.rendezvous.wire import FRAME, FRAME_LIMIT, WireError
from gcurun.rendezvous.wire import encode_frame as encode_message
from tests.helpers import survivors, wait_for
from tests.launch.remote.bootstrap_pipe import PipeChannel, read_frames


def test_frames_survive_any_split_of_the_stream():
    frames = [(STARTED, 0, b"123"), (STDOUT, 1, b"x" * 70000), (STDERR, 1, b""),
              (EXIT, -1, b'{"exit_code": 0}')]
    stream = b"".join(pack_frame(*f) for f in frames)
    for step in (1, 7, 4096):
        reader = FrameReader()
        got = [f for i in range(0, len(stream), step) for f in reader.feed(stream[i:i + step])]
        assert got == frames
        assert reader.pending == 0


def test_messages_survive_any_split_and_refuse_oversized_ones():
    messages = [{"op": "job", "ranks": [], "workdir": "/"}, {"op": "terminate", "grace": 2.5}]
    stream = b"".join(encode_message(m) for m in messages)
    reader = MessageReader()
    assert [m for b in stream for m in reader.feed(bytes([b]))] == messages
    with pytest.raises(WireError, match="exceeds"):
        list(MessageReader().feed(FRAME.pack(FRAME_LIMIT + 1)))
    with pytest.raises(WireError, match="no 'op'"):
        list(MessageReader().feed(encode_message({"ranks": []})))


def test_hello_line_parses_back():
    hello = parse_hello(hello_line("9.9.9"))
    assert hello is not None
    assert (hello.version, hello.pid, hello.python) == ("9.9.9", os.getpid(), sys.executable)
    assert parse_hello(b"Welcome to the cluster!\n") is None
    assert parse_hello(b"GCURUN-BOOTSTRAP {not json\n") is None


def test_secrets_override_rank_variables_which_override_the_login_environment():
    env = merged_environment({"PATH": "/bin", "A": "login"}, {"A": "rank", "B": "rank"},
                             {"B": "secret"})
    assert env == {"PATH": "/bin", "A": "rank", "B": "secret"}


def test_the_launchers_forwarded_environment_sits_between_login_and_job():
    env = merged_environment({"PATH": "/bin", "A": "login", "H": "/home/u"},
                             {"B": "rank"}, {}, {"C": "shared"},
                             {"PATH": "/venv/bin", "A": "fwd", "B": "fwd", "C": "fwd"})
    assert env == {"PATH": "/venv/bin", "A": "fwd", "H": "/home/u", "B": "rank",
                   "C": "shared"}


def test_memory_binding_wraps_argv_in_numactl_only_when_asked_and_present():
    argv = ["python", "train.py"]
    found = {"numactl": "/usr/bin/numactl"}.get
    bind = {"cpus": [0, 1], "numa_node": 1, "mem_bind": True}
    assert binding_argv(argv, bind, found) == ["/usr/bin/numactl", "--membind=1", "--", *argv]
    assert binding_argv(argv, bind, lambda _: None) == argv
    assert binding_argv(argv, {**bind, "mem_bind": False}, found) == argv
    assert binding_argv(argv, None, found) == argv


def test_spawn_failures_read_like_a_shell():
    code, text = spawn_failure("trian.py", FileNotFoundError(2, "x"), "/usr/bin", "nodeA")
    assert code == 127
    assert text == ("cannot run 'trian.py' on nodeA: no such program on PATH (/usr/bin); "
                    "install it there or give its full path")
    assert spawn_failure("x", PermissionError(13, "x"), "", "nodeA")[0] == 126


# -- the real bootstrap process ---------------------------------------------------------

def job(ranks, **extra):
    return {"op": "job", "workdir": extra.pop("workdir", "/"),
            "kill_grace": extra.pop("kill_grace", 2.0), "secrets": extra.pop("secrets", {}),
            "ranks": ranks, **extra}


def rank(r, *argv, env=None, binding=None):
    return {"rank": r, "argv": list(argv), "env": env or {}, "binding": binding}


def by_rank(frames):
    out = {}
    for kind, r, payload in frames:
        out.setdefault(r, []).append((kind, payload))
    return out


def stream(frames, kind):
    """Everything a rank wrote to one stream (chunks are cut anywhere)."""
    return b"".join(p for k, p in frames if k == kind)


@pytest.fixture
def boot():
    channel = PipeChannel()
    hello, _ = channel.read_hello()
    assert hello.version == __version__
    yield channel
    channel.close()
    channel.proc.kill()
    channel.proc.wait(10)


def test_closing_before_the_job_starts_nothing(boot):
    boot.close()
    assert read_frames(boot) == []
    assert boot.proc.wait(10) == 0


def test_ranks_get_environment_secrets_and_workdir_and_report_exactly(boot, tmp_path):
    script = 'echo "$GCURUN_RANK $TOKEN $GCURUN_SECRET $PWD"; echo warn >&2; exit "$CODE"'
    boot.sendall(encode_message(job(
        [rank(0, "sh", "-c", script, env={"GCURUN_RANK": "0", "TOKEN": "t", "CODE": "0"}),
         rank(1, "sh", "-c", script, env={"GCURUN_RANK": "1", "TOKEN": "t", "CODE": "3"}),
         rank(2, "sh", "-c", "kill -TERM $$")],
        workdir=str(tmp_path), secrets={"GCURUN_SECRET": "s"})))
    frames = by_rank(read_frames(boot))
    for r, code in ((0, 0), (1, 3)):
        kinds = [k for k, _ in frames[r]]
        assert kinds[0] == STARTED and kinds[-1] == EXIT
        assert stream(frames[r], STDOUT) == f"{r} t s {tmp_path}\n".encode()
        assert stream(frames[r], STDERR) == b"warn\n"
        assert (STDOUT, b"") in frames[r] and (STDERR, b"") in frames[r]  # the ends
        assert json.loads(frames[r][-1][1]) == {"exit_code": code, "signal": None}
    assert json.loads(frames[2][-1][1]) == {"exit_code": None, "signal": signal.SIGTERM}
    assert boot.proc.wait(10) == 0


def test_a_missing_program_fails_its_rank_only(boot):
    boot.sendall(encode_message(job([rank(0, "no-such-program-x"), rank(1, "true")])))
    frames = by_rank(read_frames(boot))
    result = json.loads(frames[0][-1][1])
    assert result["exit_code"] == 127
    assert result["error_text"].startswith("cannot run 'no-such-program-x' on ")
    assert json.loads(frames[1][-1][1]) == {"exit_code": 0, "signal": None}


def test_a_missing_workdir_is_one_error_and_nothing_runs(boot, tmp_path):
    boot.sendall(encode_message(job([rank(0, "touch", str(tmp_path / "ran"))],
                                    workdir=str(tmp_path / "nowhere"))))
    frames = read_frames(boot)
    assert [(k, r) for k, r, _ in frames] == [(ERROR, -1)]
    assert frames[0][2].decode().startswith(
        f"cannot change to working directory '{tmp_path / 'nowhere'}' on ")
    assert boot.proc.wait(10) == 1
    assert not (tmp_path / "ran").exists()


def test_terminate_stops_ranks_and_kills_those_ignoring_sigterm(boot, tmp_path):
    ready = tmp_path / "ready"
    stubborn = f"trap '' TERM; touch {ready}; while :; do sleep 0.05; done"
    boot.sendall(encode_message(job([rank(0, "sh", "-c", "exec sleep 60"),
                                     rank(1, "sh", "-c", stubborn)])))
    wait_for("rank 1 to ignore SIGTERM", ready.exists, 10)
    boot.sendall(encode_message({"op": "terminate", "grace": 0.5}))
    results = {r: json.loads(f[-1][1]) for r, f in by_rank(read_frames(boot)).items()}
    assert results[0]["signal"] == signal.SIGTERM
    assert results[1]["signal"] == signal.SIGKILL


def test_losing_the_channel_stops_every_rank_and_its_children(boot, tmp_path):
    marker = tmp_path / "pids"
    script = f"sleep 60 & echo $$ $! > {marker}.tmp; mv {marker}.tmp {marker}; wait"
    boot.sendall(encode_message(job([rank(0, "sh", "-c", script)], kill_grace=1.0)))
    wait_for("the rank to start its child", marker.exists, 10)
    pids = [int(p) for p in marker.read_text().split()]
    boot.close()
    assert survivors(pids, timeout=10) == []
    assert boot.proc.wait(10) == 0


def test_a_killed_bootstrap_takes_its_ranks_with_it(boot, tmp_path):
    marker = tmp_path / "pid"
    boot.sendall(encode_message(job([rank(0, "sh", "-c", f"echo $$ > {marker}; exec sleep 60")])))
    wait_for("the rank to start", lambda: marker.exists() and marker.read_text().strip(), 10)
    pid = int(marker.read_text())
    boot.proc.kill()
    assert survivors([pid], timeout=10) == []


def test_binding_sets_the_cpu_affinity_before_the_rank_runs(boot):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    boot.sendall(encode_message(job([rank(0, sys.executable, "-c", code,
                                          binding={"cpus": [cpu], "numa_node": None,
                                                   "mem_bind": False})])))
    frames = by_rank(read_frames(boot))
    assert stream(frames[0], STDOUT) == f"[{cpu}]\n".encode()


def test_the_bootstraps_command_line_carries_nothing_of_the_job(boot):
    boot.sendall(encode_message(job([rank(0, "sh", "-c", "exec sleep 60")],
                                    secrets={"GCURUN_SECRET": "hush-123"})))
    wait_for("the rank to start", lambda: psutil.Process(boot.proc.pid).children(), 10)
    for p in [psutil.Process(boot.proc.pid), *psutil.Process(boot.proc.pid).children()]:
        assert "hush-123" not in " ".join(p.cmdline())
    boot.sendall(encode_message({"op": "terminate", "grace": 1}))
    read_frames(boot)


def test_a_terminate_before_the_job_starts_nothing(boot):
    boot.sendall(encode_message({"op": "terminate", "grace": 1}))
    assert read_frames(boot) == []
    assert boot.proc.wait(10) == 0


def test_a_silent_launcher_fences_the_bootstrap_and_every_rank_dies(boot, tmp_path):
    """A cut link ends no stdin: only the missing pings tell the bootstrap to go."""
    marker = tmp_path / "pids"
    script = f"sleep 60 & echo $$ $! > {marker}.tmp; mv {marker}.tmp {marker}; wait"
    boot.sendall(encode_message(job([rank(0, "sh", "-c", script)], kill_grace=0.5,
                                    fence_after=1.0)))
    wait_for("the rank to start its child", marker.exists, 10)
    pids = [int(p) for p in marker.read_text().split()]
    assert survivors(pids, timeout=20) == []
    assert boot.proc.wait(20) == FENCED_EXIT_CODE   # its stdin is still open


def test_pings_keep_a_fencing_bootstrap_and_its_ranks(boot, tmp_path):
    code = "import time; time.sleep(3); print('done', flush=True)"
    boot.sendall(encode_message(job([rank(0, sys.executable, "-c", code)],
                                    fence_after=1.0)))
    stop = threading.Event()

    def ping():
        while not stop.wait(0.2):
            try:
                boot.sendall(encode_message({"op": "ping"}))
            except OSError:
                return

    pinger = threading.Thread(target=ping, daemon=True)
    pinger.start()
    try:
        frames = by_rank(read_frames(boot))
    finally:
        stop.set()
        pinger.join(5)
    assert stream(frames[0], STDOUT) == b"done\n"
    assert json.loads(frames[0][-1][1]) == {"exit_code": 0, "signal": None}


def test_a_launcher_that_pings_but_reads_slowly_does_not_fence_the_bootstrap(boot):
    """A blocked console (the launcher reads nothing for a while) is no lost link: while
    the pings come, the bootstrap's output waits and no rank is stopped."""
    size = 1 << 20    # far more than the pipes on the way hold
    code = f"import sys; sys.stdout.write('x' * {size}); sys.stdout.flush()"
    boot.sendall(encode_message(job([rank(0, sys.executable, "-c", code)],
                                    fence_after=1.0)))
    stop = threading.Event()

    def ping():
        while not stop.wait(0.2):
            try:
                boot.sendall(encode_message({"op": "ping"}))
            except OSError:
                return

    pinger = threading.Thread(target=ping, daemon=True)
    pinger.start()
    try:
        stop.wait(4.0)   # the stimulus: nothing read for four times fence_after
        frames = by_rank(read_frames(boot))
    finally:
        stop.set()
        pinger.join(5)
    assert len(stream(frames[0], STDOUT)) == size
    assert json.loads(frames[0][-1][1]) == {"exit_code": 0, "signal": None}
    assert boot.proc.wait(10) == 0


def test_a_ranks_forked_children_die_when_the_rank_exits(boot, tmp_path):
    """A DataLoader worker left behind would hold the rank's sockets open."""
    marker = tmp_path / "child"
    script = f"sleep 60 & echo $! > {marker}.tmp; mv {marker}.tmp {marker}; exit 3"
    boot.sendall(encode_message(job([rank(0, "sh", "-c", script)])))
    frames = by_rank(read_frames(boot))
    assert json.loads(frames[0][-1][1])["exit_code"] == 3
    assert survivors([int(marker.read_text())], timeout=10) == []
