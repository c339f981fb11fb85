"""known_hosts files, read as OpenSSH reads them, and the host-key decision.

Parsing and checking are pure (``parse_known_hosts``, ``check_host_key``); reading and
appending files are the only I/O. Keys are compared as (type, public blob), so nothing here
needs paramiko. Supported: plain and hashed (``|1|salt|hash``) names, ``[host]:port``,
``*``/``?`` patterns with ``!`` negation, ``@revoked``; ``@cert-authority`` lines are skipped.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

HostKeyStatus = Literal["known", "unknown", "changed", "revoked"]
_append_lock = threading.Lock()


@dataclass(frozen=True)
class KnownHostEntry:
    """One line of a known_hosts file."""

    patterns: tuple[str, ...]
    key_type: str
    blob: bytes
    origin: str
    line: int
    marker: str | None = None

    def matches(self, name: str) -> bool:
        """Whether this line is about host ``name`` (``host`` or ``[host]:port``)."""
        hit = False
        for pattern in self.patterns:
            negated = pattern.startswith("!")
            pattern = pattern[1:] if negated else pattern
            if pattern.startswith("|1|"):
                found = _hashed_match(pattern, name)
            else:
                found = _wildcard(pattern).fullmatch(name.lower()) is not None
            if found and negated:
                return False
            hit |= found
        return hit

    @property
    def where(self) -> str:
        return f"{self.origin}:{self.line}"


@dataclass(frozen=True)
class HostKeyCheck:
    """The verdict on a server's key: ``known`` (a line matches it), ``unknown`` (no line
    names the host), ``changed`` (lines name the host with other keys) or ``revoked``.
    ``entries`` are the lines about the host."""

    status: HostKeyStatus
    entries: tuple[KnownHostEntry, ...] = ()


def parse_known_hosts(text: str, origin: str) -> list[KnownHostEntry]:
    """The usable lines of a known_hosts file; malformed lines are skipped (as OpenSSH does)."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = None
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3 or marker == "@cert-authority":
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except (binascii.Error, ValueError):
            continue
        entries.append(KnownHostEntry(tuple(fields[0].split(",")), fields[1], blob, origin,
                                      number, marker))
    return entries


def read_known_hosts(paths: Iterable[str]) -> list[KnownHostEntry]:
    """Every entry of the files in ``paths``; files that do not exist count as empty."""
    entries: list[KnownHostEntry] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                entries += parse_known_hosts(f.read(), path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
    return entries


def check_host_key(entries: Sequence[KnownHostEntry], names: Sequence[str], key_type: str,
                   blob: bytes) -> HostKeyCheck:
    """Decide about the key ``(key_type, blob)`` a server offered under any of ``names``."""
    about = tuple(e for e in entries if any(e.matches(n) for n in names))
    revoked = tuple(e for e in about if e.marker == "@revoked" and e.blob == blob)
    if revoked:
        return HostKeyCheck("revoked", revoked)
    trusted = tuple(e for e in about if e.marker is None)
    if any(e.key_type == key_type and e.blob == blob for e in trusted):
        return HostKeyCheck("known", trusted)
    return HostKeyCheck("changed" if trusted else "unknown", trusted)


def preferred_key_types(entries: Sequence[KnownHostEntry], name: str) -> list[str]:
    """Key types already known for ``name``, to be negotiated first (so a host known by
    its RSA key is not reported as changed because it also has an Ed25519 key)."""
    types: list[str] = []
    for e in entries:
        if e.marker is None and e.matches(name) and e.key_type not in types:
            types.append(e.key_type)
    return types


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def known_hosts_line(name: str, key_type: str, blob: bytes) -> str:
    return f"{name} {key_type} {base64.b64encode(blob).decode()}\n"


def append_known_host(path: str, name: str, key_type: str, blob: bytes) -> None:
    """Add a host key to the known_hosts file at ``path`` (created with its directory)."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    with _append_lock, open(path, "a", encoding="utf-8") as f:
        f.write(known_hosts_line(name, key_type, blob))


@functools.lru_cache(maxsize=256)
def _wildcard(pattern: str) -> re.Pattern[str]:
    """OpenSSH host patterns: ``*`` and ``?`` are wildcards, everything else (``[``
    included, as in ``[host]:2200``) is literal; case does not matter."""
    parts = ("." if c == "?" else ".*" if c == "*" else re.escape(c) for c in pattern.lower())
    return re.compile("".join(parts))


def _hashed_match(pattern: str, name: str) -> bool:
    try:
        _, _, salt64, hash64 = pattern.split("|")
        salt, expected = base64.b64decode(salt64), base64.b64decode(hash64)
    except (ValueError, binascii.Error):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), expected)
