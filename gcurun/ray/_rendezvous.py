"""The rendezvous of a Ray job's ranks, served by the process that drives the job."""

from __future__ import annotations

from collections.abc import Sequence

from gcurun.launch.remote.rank_env import RENDEZVOUS_VARIABLE, SECRET_VARIABLE
from gcurun.rendezvous.server import RendezvousServer, new_secret
from gcurun.rendezvous.wire import show_address

LOOPBACK = "127.0.0.1"


def rendezvous_host(driver_node: str, driver_address: str, worker_nodes: Sequence[str]) -> str:
    """The address the ranks reach the driver at: loopback when every rank runs on the
    driver's node (nothing listens beyond it), else the driver node's address."""
    return LOOPBACK if all(node == driver_node for node in worker_nodes) else driver_address


class JobRendezvous:
    """A running rendezvous for ``size`` ranks on ``host``, authenticated with a secret
    of its own; :meth:`environment` is what every rank needs to join it."""

    def __init__(self, host: str, size: int) -> None:
        self._secret = new_secret()
        self._server = RendezvousServer(host, 0, secret=self._secret, size=size)
        self._server.start()
        self.host = host

    @property
    def port(self) -> int:
        return int(self._server.address[1])

    def environment(self) -> dict[str, str]:
        return {RENDEZVOUS_VARIABLE: show_address((self.host, self.port)),
                SECRET_VARIABLE: self._secret.hex()}

    def close(self) -> None:
        self._server.close()
