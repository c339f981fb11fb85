"""The console writer on real pipes: it never blocks its caller, drops beyond its buffer
with a counted notice, and gives up on a reader that does not read."""

from __future__ import annotations

import io
import os
import re
import threading

from gcurun.launch.supervision.console import Console, console_key
from tests.helpers import wait_for


def pipe_stream():
    r, w = os.pipe()
    return r, open(w, "w", encoding="utf-8", closefd=True)  # noqa: SIM115


def read_all(fd: int, into: list[bytes]) -> threading.Thread:
    def run() -> None:
        while chunk := os.read(fd, 65536):
            into.append(chunk)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_console_nobody_reads_drops_beyond_its_buffer_and_says_how_much():
    r, stream = pipe_stream()
    console = Console(stream, limit=256 * 1024)
    line = "x" * 1023 + "\n"
    taken = [console.offer(line * 64) for _ in range(100)]   # 6.4 MB, never blocking
    assert taken[0] and not all(taken)
    dropped = 64 * taken.count(False)
    assert console.lost_lines == dropped
    got: list[bytes] = []
    reader = read_all(r, got)
    console.close(patience=30)
    stream.close()
    reader.join(30)
    text = b"".join(got).decode()
    notices = re.findall(r"^gcurun: (\d+) lines of rank output not shown here: the "
                         r"console did not take them in time$", text, re.MULTILINE)
    assert sum(map(int, notices)) == dropped
    assert text.count(line) == 64 * taken.count(True)
    assert text.endswith(" in time\n")      # the last lines were dropped: said at the end


def test_the_notice_comes_where_the_lines_are_missing():
    r, stream = pipe_stream()
    console = Console(stream, limit=1024, hint=" (see the logs)")
    got: list[bytes] = []
    assert console.offer("a" * 200_000 + "\n")  # an empty buffer takes anything (the
    #                                           pipe holds less: the writer waits)
    assert not console.offer("dropped\n")
    reader = read_all(r, got)
    wait_for("the console to take what it holds", lambda: console.pending == 0)
    assert console.offer("b\n")
    console.close(patience=30)
    stream.close()
    reader.join(30)
    assert b"".join(got).decode() == ("a" * 200_000 + "\n" + "gcurun: 1 line of rank output "
                                      "not shown here: the console did not take them in "
                                      "time (see the logs)\nb\n")


def test_closing_gives_up_on_a_console_that_takes_nothing():
    r, stream = pipe_stream()
    console = Console(stream, limit=1 << 20)
    for _ in range(16):
        console.offer("y" * 65535 + "\n")          # more than the pipe holds
    console.close(patience=0.2)
    assert console.lost_lines > 0
    os.close(r)
    stream.close()


def test_closing_gives_up_when_told():
    r, stream = pipe_stream()
    console = Console(stream)
    for _ in range(16):
        console.offer("y" * 65535 + "\n")
    console.close(patience=3600, give_up=lambda: True)
    assert console.lost_lines > 0
    os.close(r)
    stream.close()


def test_a_closed_reader_stops_the_console_without_an_error():
    r, stream = pipe_stream()
    os.close(r)
    console = Console(stream)
    console.offer("lost\n")
    console.close(patience=30)
    assert console.broken == "Broken pipe" and console.lost_lines == 1
    stream.close()


def test_streams_of_one_file_share_a_key():
    r, stream = pipe_stream()
    again = open(os.dup(stream.fileno()), "w")  # noqa: SIM115
    assert console_key(stream) == console_key(again) != console_key(io.StringIO())
    again.close()
    stream.close()
    os.close(r)
