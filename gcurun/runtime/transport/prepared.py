"""Exchanges of fixed buffers run many times: the transport's prepared form (MPI
persistent requests) where it has one, a plain sendrecv elsewhere."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gcurun.runtime.api import Transport


def prepared_sendrecv(transport: Transport, sendbuf: np.ndarray, dest: int,
                      recvbuf: np.ndarray, source: int) -> Callable[[], None]:
    """A sendrecv of fixed buffers to run many times."""
    prepare = getattr(transport, "prepare_sendrecv", None)
    if prepare is not None:
        return prepare(sendbuf, dest, recvbuf, source)
    return lambda: transport.sendrecv(sendbuf, dest, recvbuf, source)


def release_sendrecv(transport: Transport, run: Callable[[], None]) -> None:
    """Free what :func:`prepared_sendrecv` made for ``run``, where the transport holds
    anything (MPI requests, which hold their buffers)."""
    release = getattr(transport, "release_sendrecv", None)
    if release is not None:
        release(run)
