"""What the launcher and a bootstrap say to each other over one SSH channel.

The bootstrap speaks first: one hello line (``GCURUN-BOOTSTRAP {json}``), then binary
frames (kind, rank, payload) with its ranks' output and exits (``STOPPED``, rank -1, names
the signal that stopped the bootstrap itself; ``PONG``, rank -1, empty, answers a
``ping``). The launcher sends messages in the JSON
framing of :mod:`gcurun.rendezvous.wire` (4-byte length, JSON with an ``op``): the
``job`` (with the launcher's ``forwarded`` environment, ``more``: true when ``ranks``
messages follow with more ranks, and ``fence_after`` when it pings), ``ranks`` (the same
``more``), ``ping`` (every second with ``fence_after``; answered with a ``PONG`` frame) and
perhaps ``terminate``.

Stdlib only (and the stdlib-only wire module): the bootstrap imports it on remote hosts.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gcurun.rendezvous.wire import FRAME, FRAME_LIMIT, WireError, decode_body

HELLO_PREFIX = b"GCURUN-BOOTSTRAP "
PROTOCOL = 4

# Frames from the bootstrap: kind (1 byte), rank (signed 32 bits), length (32 bits), payload.
FRAME_HEADER = struct.Struct(">BiI")
STARTED, STDOUT, STDERR, EXIT, ERROR, STOPPED, PONG = 1, 2, 3, 4, 5, 6, 7
STREAM_KINDS = {STDOUT: "stdout", STDERR: "stderr"}


@dataclass(frozen=True)
class Hello:
    """What a bootstrap says about itself when it starts."""

    version: str
    protocol: int
    hostname: str
    python: str
    pid: int


def hello_line(version: str) -> bytes:
    info = {"protocol": PROTOCOL, "version": version, "hostname": socket.gethostname(),
            "python": sys.executable, "pid": os.getpid()}
    return HELLO_PREFIX + json.dumps(info).encode() + b"\n"


def parse_hello(line: bytes) -> Hello | None:
    """The hello line of a bootstrap, or None when ``line`` is not one."""
    if not line.startswith(HELLO_PREFIX):
        return None
    try:
        info = json.loads(line[len(HELLO_PREFIX):])
        return Hello(str(info["version"]), int(info["protocol"]), str(info["hostname"]),
                     str(info["python"]), int(info["pid"]))
    except (ValueError, KeyError, TypeError):
        return None


def pack_frame(kind: int, rank: int, payload: bytes = b"") -> bytes:
    return FRAME_HEADER.pack(kind, rank, len(payload)) + payload


class FrameReader:
    """Cuts the bootstrap's byte stream into complete ``(kind, rank, payload)`` frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, int, bytes]]:
        self._buffer += data
        size = FRAME_HEADER.size
        while len(self._buffer) >= size:
            kind, rank, length = FRAME_HEADER.unpack_from(self._buffer)
            if len(self._buffer) < size + length:
                return
            payload = bytes(self._buffer[size:size + length])
            del self._buffer[:size + length]
            yield kind, rank, payload

    @property
    def pending(self) -> int:
        return len(self._buffer)


class MessageReader:
    """Cuts the launcher's byte stream into its JSON messages (wire framing).

    Raises WireError for a message over the frame limit or one that is not JSON."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[dict[str, Any]]:
        self._buffer += data
        size = FRAME.size
        while len(self._buffer) >= size:
            (length,) = FRAME.unpack_from(self._buffer)
            if length > FRAME_LIMIT:
                raise WireError(f"a message of {length} bytes exceeds the limit of "
                                f"{FRAME_LIMIT}")
            if len(self._buffer) < size + length:
                return
            body = bytes(self._buffer[size:size + length])
            del self._buffer[:size + length]
            yield decode_body(body)
