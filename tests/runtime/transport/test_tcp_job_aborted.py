"""``job_aborted``: the public way to tell a tcp transport that its job is over (the
rendezvous's abort arrives through it, and an elastic worker that lost the launcher
calls it)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gcurun.rendezvous.server import RendezvousServer, new_secret
from gcurun.runtime.api import PeerFailureError
from gcurun.runtime.transport.tcp import TCPTransport

# Far longer than the waits below: a call that ends by timing out fails the test.
TRANSPORT_TIMEOUT = 120.0
WAIT_SECONDS = 30.0


def test_job_aborted_wakes_a_blocked_receive_and_fails_every_later_call() -> None:
    secret = new_secret()
    with RendezvousServer("127.0.0.1", 0, secret=secret, size=2) as server, \
            ThreadPoolExecutor(2) as pool:
        transports = [TCPTransport(rank=r, size=2, generation=1, hostname="localhost",
                                   rendezvous=server.address, secret=secret,
                                   timeout=TRANSPORT_TIMEOUT, cma=False, single_host=True)
                      for r in range(2)]
        try:
            starts = [pool.submit(t.start) for t in transports]
            for start in starts:
                start.result(timeout=WAIT_SECONDS)
            # One message first, so that rank 1's next receive waits on an open link.
            got = np.zeros(4, np.uint8)
            sent = pool.submit(transports[0].send, np.arange(4, dtype=np.uint8), 1)
            transports[1].recv(got, 0)
            sent.result(timeout=WAIT_SECONDS)
            assert got.tolist() == [0, 1, 2, 3]

            blocked = pool.submit(transports[1].recv, np.zeros(4, np.uint8), 0)
            transports[1].job_aborted("the launcher is gone")
            with pytest.raises(PeerFailureError, match="the launcher is gone"):
                blocked.result(timeout=WAIT_SECONDS)
            with pytest.raises(PeerFailureError, match="the launcher is gone"):
                transports[1].send(np.zeros(4, np.uint8), 0)
            transports[1].job_aborted("a second reason")       # harmless; the first stays
            with pytest.raises(PeerFailureError, match="the launcher is gone"):
                transports[1].recv(np.zeros(4, np.uint8), 0)
        finally:
            for t in transports:
                t.close()
