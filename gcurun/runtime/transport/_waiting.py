"""How the transports wait for a peer: spin, then sleep.

A peer that is keeping up answers within microseconds, and a spinning rank sees it at
once; a peer that is late (computing, sleeping, stuck) may take seconds, and a spinning
rank would burn a core all that time. So a wait spins for a while (yielding the CPU now
and then), then sleeps (on the sockets and doorbells on ``tcp``; between tests on
``mpi``). How long it spins is learned from the waits before: after a short wait (under
the longest spin) the spin is at least twice as long as that wait was, so a training
loop's exchanges end while spinning; after a long one it halves, so a rank waiting for
a slow one spins briefly in each of its exchanges and sleeps through the rest.

A ``tcp`` wait on sockets alone (peers on other hosts, or the rest of an exchange whose
shared-memory part is done) does not spin: the kernel wakes it when the bytes it waits
for have come (see :mod:`.links`).

Past the spin, a wait keeps yielding instead of sleeping while its yields run other
threads (the host is oversubscribed, and the peer it waits for may be the one that needs
the core): such yields cost the waiting rank little CPU, and the peer's answer is seen
as soon as the rank runs again rather than after a sleep's timer.
"""

from __future__ import annotations

import os
import time

SPIN_MIN_SECONDS = 50e-6
SPIN_MAX_SECONDS = 1e-3
YIELD_AFTER_SECONDS = 50e-6     # while spinning, give the core away now and then
OTHERS_RAN_SECONDS = 20e-6    # a yield that takes longer ran another thread
NAP_MIN_SECONDS = 20e-6
NAP_MAX_SECONDS = 2e-3


class Spin:
    """The spin of one transport's waits (see the module docstring)."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = SPIN_MAX_SECONDS

    def ended(self, waited: float) -> None:
        """A wait ended after ``waited`` seconds."""
        if waited < SPIN_MAX_SECONDS:
            self.seconds = min(SPIN_MAX_SECONDS, max(self.seconds, 2 * waited))
        else:
            self.seconds = max(SPIN_MIN_SECONDS, self.seconds / 2)


def nap(waited: float, longest: float = NAP_MAX_SECONDS) -> float:
    """How long to sleep next after ``waited`` seconds of waiting: a twentieth of it,
    within the bounds, so that a peer that comes soon after is seen soon after."""
    return min(longest, max(NAP_MIN_SECONDS, waited / 20))


def yield_ran_others() -> bool:
    """Yield the CPU; whether another thread ran meanwhile (the host is busy)."""
    start = time.monotonic()
    os.sched_yield()
    return time.monotonic() - start > OTHERS_RAN_SECONDS
