"""The records the host layer produces; every other layer consumes these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostSpec:
    """One host of a job and what may run on it.

    ``name`` is the address as the user wrote it (a hostname, an IPv4 address or a bare
    IPv6 literal without brackets). ``devices`` lists the accelerator ids of the host as
    opaque strings, or is None for the default ``0..slots-1``. ``python`` and ``port``
    are per-host overrides from a profile.
    """

    name: str
    slots: int = 1
    user: str | None = None
    max_slots: int | None = None
    devices: tuple[str, ...] | None = None
    port: int | None = None
    python: str | None = None

    @property
    def display(self) -> str:
        """The host as a person would write it in a spec: ``user@[fe80::1]``."""
        host = f"[{self.name}]" if ":" in self.name else self.name
        return f"{self.user}@{host}" if self.user else host
