"""Single-copy reads from another process on the same host (Linux cross-memory attach,
``process_vm_readv``), the path MPI libraries use between ranks of one host.

A reader copies straight from the writer's buffer into its own: one copy instead of the
two a socket needs. Whether it works between two ranks (same kernel, same PID namespace,
ptrace permission) is proven per pair by reading a random token the other rank published.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import sys
from typing import Any

import numpy as np

TOKEN_BYTES = 16


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def _load() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.process_vm_readv
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong,
                         ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.c_ulong]
    function.restype = ctypes.c_ssize_t
    return function


_READV = _load()


def address_of(buf: Any) -> int:
    """The address of the first byte of a contiguous buffer (read-only ones too)."""
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    return arr.__array_interface__["data"][0]


class CrossMemory:
    """Reads from other processes, plus the token that lets peers test reading us."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and _READV is not None
        self._local = _IOVec()
        self._remote = _IOVec()
        self.token = np.frombuffer(bytearray(secrets.token_bytes(TOKEN_BYTES)), np.uint8)

    def advertisement(self) -> dict[str, Any]:
        """What a peer needs to test reading this process: pid, token address and value."""
        return {"pid": os.getpid(), "addr": address_of(self.token),
                "token": self.token.tobytes().hex()} if self.enabled else {}

    def can_read(self, advertisement: dict[str, Any]) -> bool:
        """Whether this process can read the advertising one: read its token and compare."""
        if not self.enabled or not advertisement:
            return False
        probe = np.zeros(TOKEN_BYTES, np.uint8)
        try:
            self.read(int(advertisement["pid"]), address_of(probe), int(advertisement["addr"]),
                      TOKEN_BYTES)
        except (OSError, KeyError, ValueError):
            return False
        return probe.tobytes().hex() == advertisement.get("token")

    def read(self, pid: int, local_addr: int, remote_addr: int, nbytes: int) -> None:
        """Copy ``nbytes`` from ``remote_addr`` in process ``pid`` to ``local_addr``."""
        local, remote = self._local, self._remote
        done = 0
        while done < nbytes:
            local.base, local.length = local_addr + done, nbytes - done
            remote.base, remote.length = remote_addr + done, nbytes - done
            got = _READV(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            if got <= 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"process_vm_readv from pid {pid}: "
                                     f"{os.strerror(errno) if errno else 'no progress'}")
            done += got
