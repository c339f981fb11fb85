"""gcurun's bootstrap run locally over pipes, with the face of a paramiko channel, so the
SSH executor's two ends can be tested without SSH."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from gcurun.launch.remote.protocol import FrameReader, Hello, parse_hello
from tests.helpers import ROOT


class PipeChannel:
    """A bootstrap subprocess behind the subset of paramiko.Channel the executor uses."""

    def __init__(self, python: str = sys.executable) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [python, "-m", "gcurun.launch.remote.bootstrap"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.timeout: float | None = None
        self._stderr = b""
        self.status_event = threading.Event()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        self.proc.wait()
        self.status_event.set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):  # type: ignore
            self._stderr += chunk

    def read_hello(self) -> tuple[Hello, bytes]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        hello = parse_hello(line)
        assert hello is not None, line
        return hello, b""

    def settimeout(self, timeout: float | None) -> None:
        self.timeout = timeout

    def sendall(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise OSError("channel closed") from exc

    def recv(self, size: int) -> bytes:
        assert self.proc.stdout is not None
        try:
            return os.read(self.proc.stdout.fileno(), size)
        except (OSError, ValueError):
            return b""

    def recv_stderr_ready(self) -> bool:
        return bool(self._stderr)

    def recv_stderr(self, size: int) -> bytes:
        data, self._stderr = self._stderr[:size], self._stderr[size:]
        return data

    def recv_exit_status(self) -> int:
        return self.proc.wait(30)

    def close(self) -> None:
        """What a dropped connection does to the bootstrap: its stdin ends."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass


class FakeTransport:
    def is_active(self) -> bool:
        return True

    def get_exception(self) -> None:
        return None


@dataclass
class FakeTarget:
    alias: str = "nodeA"


@dataclass
class FakeConnection:
    transport: Any = field(default_factory=FakeTransport)


@dataclass
class PipeSession:
    """Stands in for preflight.HostSession."""

    channel: PipeChannel
    hello: Hello
    leftover: bytes = b""
    target: FakeTarget = field(default_factory=FakeTarget)
    connection: FakeConnection = field(default_factory=FakeConnection)
    closed: int = 0

    def close(self) -> None:
        self.closed += 1
        self.channel.close()


def pipe_session() -> PipeSession:
    channel = PipeChannel()
    hello, rest = channel.read_hello()
    return PipeSession(channel, hello, rest)


def read_frames(channel: PipeChannel, timeout: float = 30.0) -> list[tuple[int, int, bytes]]:
    """Every frame until the bootstrap's stdout ends (fails the test at the deadline)."""
    frames: queue.Queue[Any] = queue.Queue()
    reader = FrameReader()

    def pump() -> None:
        while True:
            data = channel.recv(65536)
            if not data:
                frames.put(None)
                return
            for f in reader.feed(data):
                frames.put(f)

    threading.Thread(target=pump, daemon=True).start()
    got, deadline = [], time.monotonic() + timeout
    while True:
        item = frames.get(timeout=max(0.0, deadline - time.monotonic()))
        if item is None:
            return got
        got.append(item)
