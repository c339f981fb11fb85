"""What the SSH executor's modules share: a host's failure, its deadline, a connection."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gcurun.launch.ssh.sshconfig import SSHTarget

if TYPE_CHECKING:
    import paramiko


class HostFailure(Exception):
    """Why one host cannot be used; ``str()`` is the message for the user."""


@dataclass
class Connection:
    """An authenticated connection; ``hops`` are the ProxyJump connections under it."""

    target: SSHTarget
    transport: paramiko.Transport
    hops: list[Connection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.transport.close()
        for hop in reversed(self.hops):
            hop.close()


class Deadline:
    """The time left for one host's whole preflight, on a monotonic clock."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self, stage: str) -> float:
        """Seconds left; raises HostFailure naming ``stage`` when none are."""
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise HostFailure(self.expired(stage))
        return remaining

    def expired(self, stage: str) -> str:
        return (f"timed out after {self.seconds:g} s {stage}; the host or network is slow "
                "or stuck: check it, or raise --ssh-timeout")
