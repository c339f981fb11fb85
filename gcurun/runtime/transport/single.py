"""The transport of a job of one process: there is nobody to talk to."""

from __future__ import annotations

from collections.abc import Sequence

from gcurun.runtime.api import Buffer


class SelfTransport:
    """Rank 0 of 1. The algorithms never move data at size 1; any attempt is a bug."""

    rank = 0
    size = 1
    pieces_in_one_message = False

    def send(self, buf: Buffer, dest: int) -> None:
        self._refuse(dest)

    def recv(self, buf: Buffer, source: int) -> None:
        self._refuse(source)

    def sendrecv(self, sendbuf: Buffer, dest: int, recvbuf: Buffer, source: int) -> None:
        self._refuse(dest)

    def sendrecv_parts(self, sendbufs: Sequence[Buffer], dest: int,
                       recvbufs: Sequence[Buffer], source: int) -> None:
        self._refuse(dest)

    def close(self) -> None:
        pass

    @staticmethod
    def _refuse(peer: int) -> None:
        raise RuntimeError(f"a job of one process has no rank {peer} to talk to")
