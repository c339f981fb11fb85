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
IOV_MAX = 1024              # the kernel's limit of pieces per side and call

Extent = tuple[int, int]    # (address, bytes)


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
    try:
        # A quarter of the cost of ``__array_interface__`` (it is on the path of every
        # large message); it takes writable buffers of at least one byte.
        return _addressof(_c_byte.from_buffer(buf))
    except (TypeError, ValueError, BufferError):
        arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        return arr.__array_interface__["data"][0]


_addressof, _c_byte = ctypes.addressof, ctypes.c_byte


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
                raise _read_error(pid)
            done += got

    def read_parts(self, pid: int, local: list[Extent], remote: list[Extent]) -> None:
        """Copy the concatenation of the ``remote`` extents of process ``pid`` into the
        concatenation of the ``local`` ones (equal totals; the cuts may differ)."""
        li = ri = 0             # the first extent not yet full / not yet read
        l_done = r_done = 0     # bytes of it already done
        while li < len(local):
            lcount = min(IOV_MAX, len(local) - li)
            rcount = min(IOV_MAX, len(remote) - ri)
            liov, riov = (_IOVec * lcount)(), (_IOVec * rcount)()
            for k in range(lcount):
                addr, length = local[li + k]
                skip = l_done if k == 0 else 0
                liov[k].base, liov[k].length = addr + skip, length - skip
            for k in range(rcount):
                addr, length = remote[ri + k]
                skip = r_done if k == 0 else 0
                riov[k].base, riov[k].length = addr + skip, length - skip
            got = _READV(pid, liov, lcount, riov, rcount, 0)
            if got <= 0:
                raise _read_error(pid)
            li, l_done = _advance(local, li, l_done, got)
            ri, r_done = _advance(remote, ri, r_done, got)


def _read_error(pid: int) -> OSError:
    """The error of a read from ``pid`` that moved nothing."""
    errno = ctypes.get_errno()
    return OSError(errno, f"process_vm_readv from pid {pid}: "
                          f"{os.strerror(errno) if errno else 'no progress'}")


def _advance(extents: list[Extent], index: int, done: int, count: int) -> tuple[int, int]:
    """Move a position (extent index, bytes done in it) ``count`` bytes on."""
    done += count
    while index < len(extents) and done >= extents[index][1]:
        done -= extents[index][1]
        index += 1
    return index, done
