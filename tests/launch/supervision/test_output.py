from __future__ import annotations

import io

from gcurun.launch.api import OutputEvent
from gcurun.launch.supervision.output import LineSplitter, OutputSink


def test_splitter_joins_chunks_and_split_utf8():
    s = LineSplitter()
    assert s.feed(b"he") == []
    assert s.feed(b"llo \xe4") == []
    assert s.feed(b"\xbd\xa0\nnext") == ["hello 你\n"]
    assert s.finish() == ["next\n"]


def test_splitter_keeps_carriage_return_segments():
    s = LineSplitter()
    assert s.feed(b" 10%\r 20%\rdone\r\n") == [" 10%\r", " 20%\r", "done\r\n"]


def test_splitter_flushes_very_long_partial_lines():
    s = LineSplitter()
    out = s.feed(b"x" * 70000)
    assert len(out) == 1 and len(out[0]) == 70000


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
