"""The launcher's own messages on stderr: what it decides and does, by level.

Library code logs to ``gcurun.launch`` (hosts chosen, launcher kind, ports, what it starts,
how it stops); :func:`launcher_log` shows those of a level and above while a command runs,
as ``gcurun: info: ...`` lines, optionally with a timestamp.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TextIO

LOGGER = "gcurun.launch"
# horovodrun's level names -> Python's.
LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
          "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}


class LaunchLogHandler(logging.Handler):
    """Writes ``[timestamp ]gcurun: <level>: message`` lines to a stream."""

    def __init__(self, stream: TextIO, level: int, *, timestamps: bool) -> None:
        super().__init__(level)
        self.stream = stream
        self.timestamps = timestamps

    def emit(self, record: logging.LogRecord) -> None:
        stamp = ""
        if self.timestamps:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created)) + \
                f".{int(record.msecs):03d} "
        self.stream.write(f"{stamp}gcurun: {record.levelname.lower()}: "
                          f"{record.getMessage()}\n")
        self.stream.flush()


@contextlib.contextmanager
def launcher_log(level: str | None, stream: TextIO, *,
                 timestamps: bool = False) -> Iterator[None]:
    """While inside, the launcher's messages of ``level`` (horovodrun's names: TRACE ...
    FATAL; None: WARNING) and above go to ``stream``."""
    from gcurun.cli.sshlog import handled_by

    handler = LaunchLogHandler(stream, LEVELS[(level or "WARNING").upper()],
                               timestamps=timestamps)
    with handled_by(logging.getLogger(LOGGER), handler, handler.level):
        yield
