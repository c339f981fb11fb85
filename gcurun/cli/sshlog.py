"""What the SSH executor says while it connects: warnings (host keys not checked or newly
accepted) and, with many hosts on a terminal, live progress of the preflight."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TextIO

PROGRESS_MIN_HOSTS = 8   # fewer hosts connect too fast for progress to help


class SSHReportHandler(logging.Handler):
    """Writes the ``gcurun.ssh`` logger's records to ``stream``."""

    def __init__(self, stream: TextIO, live: bool) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.live = live
        self.failed = 0
        self.showing = False

    def emit(self, record: logging.LogRecord) -> None:
        progress = getattr(record, "preflight", None)
        if progress is not None:
            self.failed += not progress.ok
            if self.live and progress.total >= PROGRESS_MIN_HOSTS:
                end = "\n" if progress.done == progress.total else ""
                self.stream.write(f"\rgcurun: ssh preflight: {progress.done}/{progress.total} "
                                  f"hosts checked, {self.failed} failed{end}")
                self.showing = not end
                self.stream.flush()
            return
        if getattr(record, "report", False):   # a table the user asked for
            self.stream.write(record.getMessage() + "\n")
            self.stream.flush()
            return
        if record.levelno >= logging.WARNING:
            if self.showing:
                self.stream.write("\n")
                self.showing = False
            self.stream.write(f"gcurun: warning: {record.getMessage()}\n")
            self.stream.flush()


@contextlib.contextmanager
def ssh_reports(stream: TextIO) -> Iterator[None]:
    """While inside, the SSH executor's reports go to ``stream``."""
    logger = logging.getLogger("gcurun.ssh")
    try:
        live = stream.isatty()
    except (AttributeError, ValueError):
        live = False
    with handled_by(logger, SSHReportHandler(stream, live), logging.INFO):
        yield


@contextlib.contextmanager
def handled_by(logger: logging.Logger, handler: logging.Handler,
               level: int | None = None) -> Iterator[None]:
    """While inside, ``logger``'s records go to ``handler`` alone (not to the root's
    handlers too), from ``level`` up when given; the logger is as it was afterwards."""
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    if level is not None:
        logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate


class WarningHandler(logging.Handler):
    """Writes warnings as gcurun's other messages read: ``gcurun: warning: ...``."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.WARNING)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        self.stream.write(f"gcurun: warning: {record.getMessage()}\n")
        self.stream.flush()


@contextlib.contextmanager
def warnings_of(name: str, stream: TextIO) -> Iterator[None]:
    """While inside, the warnings of the logger ``name`` (the rendezvous, say) go to
    ``stream`` with gcurun's prefix instead of Python's bare last-resort output."""
    with handled_by(logging.getLogger(name), WarningHandler(stream)):
        yield
