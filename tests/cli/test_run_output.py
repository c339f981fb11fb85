"""Rank output under hostile conditions, end to end through the CLI: a full log disk, a
console nobody reads, lines longer than a console piece, reruns into one output
directory."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import RANKS, ROOT, gcurun_cmd, run_gcurun, survivors, wait_for

CHATTY = str(RANKS / "chatty.py")


def vm_peak_mb(pid: int) -> float:
    """The highest resident memory of ``pid`` so far (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")


@contextlib.contextmanager
def full_tmpfs(path: Path, size: str = "64k"):
    """A tmpfs of ``size`` mounted at ``path`` (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {res.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_log_disk_warns_once_and_the_job_goes_on(tmp_path):
    with full_tmpfs(tmp_path / "small") as small:
        res = run_gcurun("-np", "2", "--output-dir", str(small), sys.executable, CHATTY,
                         str(tmp_path), "--bytes", str(200 * 1024))
        assert res.returncode == 0, res.stderr
        logs = small / (small / "latest").readlink()
        written = {p.name: p.stat().st_size for p in logs.iterdir()}
    for rank, letter in ((0, "a"), (1, "b")):   # the console got every line
        assert res.stdout.count(f"[{rank}] {letter * 1023}\n") == 200
    warnings = [line for line in res.stderr.splitlines() if "cannot write" in line]
    assert len(warnings) == 1, res.stderr
    assert re.fullmatch(
        rf"gcurun: warning: cannot write {re.escape(str(logs))}/rank-[01]\.stdout\.log: No "
        r"space left on device; the job goes on, but this log \(and any other that fails\) "
        r"is incomplete; the end of the job lists them", warnings[0])
    last = res.stderr.splitlines()[-1]
    assert last.startswith("gcurun: warning: incomplete logs: "), res.stderr
    assert "(No space left on device)" in last
    assert sum(written.values()) < 2 * 200 * 1024


def test_a_console_nobody_reads_neither_grows_gcurun_nor_delays_a_signal(tmp_path):
    """Two ranks write 200 MB each into a gcurun whose stdout is a pipe nobody reads;
    gcurun's memory stays bounded, and SIGTERM stops it and every rank."""
    code, stderr, ranks = sigterm_with_an_unread_console(
        tmp_path, ["-np", "2"], 200 * 1024 * 1024)
    assert code == 128 + signal.SIGTERM, stderr
    assert "gcurun: interrupted by SIGTERM; stopped every rank" in stderr
    assert survivors(ranks) == []


def sigterm_with_an_unread_console(tmp_path: Path, args: list[str],
                                   size: int) -> tuple[int, str, list[int]]:
    """Run gcurun ``args`` with two chatty ranks writing ``size`` bytes each into a stdout
    nobody reads; once both wrote it all, check gcurun's peak memory (< 300 MB) and send
    SIGTERM. Returns gcurun's exit code, its stderr and the ranks' pids."""
    err = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(
        gcurun_cmd(*args, "--grace-seconds", "3", sys.executable, CHATTY, str(tmp_path),
                   "--bytes", str(size), "--linger", "600"),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=err)
    ranks: list[int] = []
    try:
        wait_for("both ranks wrote their output", lambda: all(
            (tmp_path / f"rank-{r}.done").exists() for r in range(2)), timeout=300)
        ranks = [int((tmp_path / f"rank-{r}.pid").read_text()) for r in range(2)]
        peak = vm_peak_mb(proc.pid)
        assert peak < 300, f"gcurun grew to {peak:.0f} MB"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
        err.close()
    return proc.returncode, (tmp_path / "stderr").read_text(), ranks


def test_sigterm_ends_gcurun_when_its_stdout_and_stderr_are_one_unread_pipe(tmp_path):
    """``2>&1`` into a pipe nobody reads: gcurun's own last words must not keep it."""
    proc = subprocess.Popen(
        gcurun_cmd("-np", "2", "--grace-seconds", "3", sys.executable, CHATTY, str(tmp_path),
                   "--bytes", str(8 * 1024 * 1024), "--linger", "600"),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ranks: list[int] = []
    try:
        wait_for("both ranks wrote their output", lambda: all(
            (tmp_path / f"rank-{r}.done").exists() for r in range(2)), timeout=120)
        ranks = [int((tmp_path / f"rank-{r}.pid").read_text()) for r in range(2)]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    assert survivors(ranks) == []


def test_long_lines_of_several_ranks_reach_the_console_in_whole_pieces(tmp_path):
    size, line = 3, 200_001                     # 200,000 letters and a newline
    res = run_gcurun("-np", str(size), sys.executable, CHATTY, str(tmp_path),
                     "--bytes", str(5 * line), "--line", str(line))
    assert res.returncode == 0, res.stderr
    letters = {r: 0 for r in range(size)}
    for text in res.stdout.splitlines():
        match = re.fullmatch(r"\[(\d)\] (.*)", text)
        assert match, text[:80]
        rank, piece = int(match[1]), match[2]
        letter = chr(ord("a") + rank)
        assert piece == letter * len(piece), f"rank {rank}'s piece holds other text"
        assert 0 < len(piece) <= 64 * 1024
        letters[rank] += len(piece)
    assert letters == {r: 5 * (line - 1) for r in range(size)}


def test_each_job_gets_its_own_log_directory(tmp_path):
    out = tmp_path / "out"
    dirs = []
    for n in range(2):
        res = run_gcurun("-np", "2", "--output-dir", str(out), sys.executable, CHATTY,
                         str(tmp_path), "--bytes", str(1024 * (n + 1)))
        assert res.returncode == 0, res.stderr
        said = re.fullmatch(r"gcurun: logs of this job go to (.*)\n", res.stderr)
        assert said, res.stderr
        dirs.append(Path(said[1]))
    assert dirs[0] != dirs[1] and {d.parent for d in dirs} == {out}
    for n, d in enumerate(dirs):
        assert (d / "rank-1.stdout.log").read_bytes() == (b"b" * 1023 + b"\n") * (n + 1)
    assert (out / "latest").resolve() == dirs[1].resolve()
