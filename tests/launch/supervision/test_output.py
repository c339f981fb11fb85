from __future__ import annotations

import datetime
import io
import os
import re
from pathlib import Path

from gcurun.launch.api import OutputEvent
from gcurun.launch.supervision.output import (
    PIECE_CHARS,
    LineSplitter,
    OutputSink,
    job_log_directory,
)


def test_splitter_joins_chunks_and_split_utf8():
    s = LineSplitter()
    assert s.feed(b"he") == []
    assert s.feed(b"llo \xe4") == []
    assert s.feed(b"\xbd\xa0\nnext") == ["hello 你\n"]
    assert s.finish() == ["next\n"]


def test_splitter_keeps_carriage_return_segments():
    s = LineSplitter()
    assert s.feed(b" 10%\r 20%\rdone\r\n") == [" 10%\r", " 20%\r", "done\r\n"]


def test_sink_prefixes_filters_and_logs(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    sink = OutputSink(out, err, show_ranks=[1], output_dir=str(tmp_path))
    sink.write(OutputEvent(0, "stdout", b"zero\n"))
    sink.write(OutputEvent(1, "stdout", b"one\npart"))
    sink.write(OutputEvent(1, "stderr", b"oops\n"))
    sink.finish_all()
    assert out.getvalue() == "[1] one\n[1] part\n"
    assert err.getvalue() == "[1] oops\n"
    assert (tmp_path / "rank-0.stdout.log").read_bytes() == b"zero\n"
    assert (tmp_path / "rank-1.stdout.log").read_bytes() == b"one\npart"
    assert sink.tail(1) == ("oops",)


def test_sink_colours_prefix_on_request():
    out = io.StringIO()
    sink = OutputSink(out, io.StringIO(), color=True)
    sink.write(OutputEvent(2, "stdout", b"x\n"))
    assert out.getvalue() == "\x1b[32m[2]\x1b[0m x\n"


def test_splitter_cuts_lines_longer_than_a_piece():
    s = LineSplitter()
    assert s.feed(b"x" * 70000) == ["x" * PIECE_CHARS]
    assert s.feed(b"yz\n") == ["x" * (70000 - PIECE_CHARS) + "yz\n"]
    assert s.feed(b"w" * (2 * PIECE_CHARS + 1) + b"\n") == \
        ["w" * PIECE_CHARS, "w" * PIECE_CHARS, "w\n"]
    assert s.finish() == []


def test_pieces_of_long_lines_are_console_lines_of_their_own():
    out = io.StringIO()
    sink = OutputSink(out, io.StringIO())
    sink.write(OutputEvent(0, "stdout", b"a" * (PIECE_CHARS + 10)))
    sink.write(OutputEvent(1, "stdout", b"b\n"))
    sink.write(OutputEvent(0, "stdout", b"a\n"))
    sink.finish_all()
    assert out.getvalue() == (f"[0] {'a' * PIECE_CHARS}\n[1] b\n[0] {'a' * 11}\n")


def test_a_log_that_cannot_be_written_warns_once_and_output_goes_on(tmp_path):
    """/dev/full fails every write with ENOSPC, as a full disk does."""
    for rank in range(2):
        (tmp_path / f"rank-{rank}.stdout.log").symlink_to("/dev/full")
    out, err = io.StringIO(), io.StringIO()
    sink = OutputSink(out, err, output_dir=str(tmp_path))
    for data in (b"one\n", b"two\n"):
        for rank in range(2):
            sink.write(OutputEvent(rank, "stdout", data))
    sink.write(OutputEvent(0, "stderr", b"err\n"))
    sink.finish_all()
    assert out.getvalue() == "[0] one\n[1] one\n[0] two\n[1] two\n"
    zero, one = (tmp_path / f"rank-{r}.stdout.log" for r in range(2))
    assert err.getvalue() == (
        f"gcurun: warning: cannot write {zero}: No space left on device; the job goes on, "
        "but this log (and any other that fails) is incomplete; the end of the job lists "
        "them\n"
        "[0] err\n"
        f"gcurun: warning: incomplete logs: {zero} (No space left on device), {one} (No "
        "space left on device)\n")
    assert (tmp_path / "rank-0.stderr.log").read_bytes() == b"err\n"


def test_a_log_directory_that_cannot_be_made_warns_and_output_goes_on(tmp_path):
    (tmp_path / "file").write_text("")
    out, err = io.StringIO(), io.StringIO()
    sink = OutputSink(out, err, output_dir=str(tmp_path / "file" / "logs"))
    sink.write(OutputEvent(0, "stdout", b"hi\n"))
    sink.finish_all()
    assert out.getvalue() == "[0] hi\n"
    assert err.getvalue().startswith(
        f"gcurun: warning: cannot write {tmp_path / 'file' / 'logs'}: Not a directory;")


def test_job_log_directories_are_new_each_time_and_latest_follows(tmp_path):
    now = datetime.datetime(2026, 1, 2, 3, 4, 5)
    first = job_log_directory(str(tmp_path), now=now, pid=42)
    second = job_log_directory(str(tmp_path), now=now, pid=42)
    assert (first, second) == (str(tmp_path / "20260102-030405-42"),
                               str(tmp_path / "20260102-030405-42-2"))
    assert os.path.isdir(second) and (tmp_path / "latest").resolve() == Path(second)
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["20260102-030405-42", "20260102-030405-42-2", "latest"]


def test_a_console_nobody_reads_is_given_up_at_the_end_and_the_loss_said(tmp_path):
    r, w = os.pipe()
    out, err = open(w, "w"), io.StringIO()  # noqa: SIM115
    sink = OutputSink(out, err, output_dir=str(tmp_path))
    line = b"x" * 1023 + b"\n"
    for _ in range(200):                        # 12.8 MB, more than pipe and buffer hold
        sink.write(OutputEvent(0, "stdout", line * 64))
    sink.finish_all(patience=0.2)              # returns though nobody reads
    lost = re.fullmatch(r"gcurun: warning: (\d+) line\(s\) of rank output to stdout were "
                        r"not shown: the console did not take them\n", err.getvalue())
    assert lost and int(lost[1]) > 0, err.getvalue()
    assert (tmp_path / "rank-0.stdout.log").stat().st_size == 200 * 64 * 1024
    out.close()
    os.close(r)
