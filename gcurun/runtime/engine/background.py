"""The background engine: one thread per process that negotiates, fuses and runs every
collective of the job.

Callers submit ops and get integer handles back at once; the engine thread runs cycles.
In a cycle it takes the newly submitted ops, negotiates with every rank which named ops
are ready everywhere (:mod:`gcurun.runtime.engine.negotiation`), runs those in one order on
every rank, fused where possible (:mod:`gcurun.runtime.engine.executor`), and completes their
handles. A mismatch fails that op on every rank and the engine carries on; a dead peer
or a transport timeout fails every pending op and the engine stops.

The engine is built in layers, one module each: :mod:`.cycles` (its state and the
cycles), :mod:`.calls` (submitting, handles, waiting), :mod:`.quick_cycle` (the quick
path of synchronous allreduces); this module puts them together and starts it.

Synchronous calls run their cycles on the calling thread while the engine thread is
idle. An allreduce of a cached name, when this rank has nothing else going on, takes a
quick cycle: the usual cycle for that one case written out flat. A small one rides in
the negotiation block, done after the one exchange when every rank carried it (see
:mod:`gcurun.runtime.engine.negotiation`); a larger one is then reduced at once by the executor's
reduction routine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from gcurun.errors import UsageError
from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import Transport
from gcurun.runtime.engine.cycles import MIB
from gcurun.runtime.engine.quick_cycle import QuickCycle
from gcurun.runtime.settings import RuntimeEnv

if TYPE_CHECKING:
    from gcurun.runtime.autotune import Tuner

PROTOCOL_VERSION = 4


class Engine(QuickCycle):
    """The engine of one rank. Start it with :func:`start_engine`."""


TWO_LEVEL_MODES: tuple[alg.TwoLevelMode, ...] = ("auto", "on", "off")


def start_engine(transport: Transport, env: RuntimeEnv, chunk_bytes: int,
                 idle_cycles: bool = True, hosts: Sequence[str] | None = None,
                 tuner: Tuner | None = None) -> Engine:
    """Agree on the engine's settings (rank 0's win) and start the engine thread
    (``idle_cycles``: see :class:`Engine`). ``hosts``: the host of every rank of
    ``transport`` (the same list on every rank), for the two-level allreduce.

    The cache capacity, fusion threshold, chunk size and two-level mode must be the same
    on every rank (they decide message sizes and partners), so rank 0 broadcasts its own,
    and whether it autotunes them (``tuner``, rank 0's; the others take its decisions).
    """
    two_levels = {None: "auto", True: "on", False: "off"}[env.hierarchical_allreduce]
    config = np.array([PROTOCOL_VERSION, env.cache_capacity,
                       int(env.fusion_threshold_mb * MIB), chunk_bytes,
                       TWO_LEVEL_MODES.index(two_levels), int(tuner is not None)],
                      np.int64)
    if transport.size > 1:
        mine = int(config[0])
        alg.broadcast(transport, config, 0, len(config))
        if int(config[0]) != mine:
            raise UsageError(f"rank 0 runs engine protocol {int(config[0])}, rank "
                             f"{transport.rank} protocol {mine}: every rank must run the "
                             "same gcurun version")
    layout = None
    if hosts is not None:
        if len(hosts) != transport.size:
            raise ValueError(f"start_engine: {len(hosts)} host names for "
                             f"{transport.size} ranks")
        layout = alg.HostLayout.from_names(hosts)
    return Engine(transport, env, capacity=int(config[1]), threshold_bytes=int(config[2]),
                  chunk_bytes=int(config[3]), idle_cycles=idle_cycles, layout=layout,
                  two_levels=TWO_LEVEL_MODES[int(config[4])], autotuned=bool(config[5]),
                  tuner=tuner if transport.rank == 0 else None)
