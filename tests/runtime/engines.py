"""Engines of thread ranks joined by queues: the engine's protocol without processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gcurun.runtime.engine.background import Engine, start_engine
from gcurun.runtime.settings import RuntimeEnv
from tests.runtime.threads import QueueTransport, in_threads, transports


def run_engines(size: int, body: Callable[[Engine], Any], timeout: float = 30.0,
                chunk_bytes: int = 1 << 16, kind: type[QueueTransport] = QueueTransport,
                idle_cycles: bool = True, **env: Any) -> tuple[list[Any], list[Any]]:
    """Run ``body(engine)`` on ``size`` thread ranks, each with its own engine over a
    transport of ``kind`` (``idle_cycles``: see Engine); return the results in rank
    order (re-raising a rank's exception) and the transports."""
    ranks = transports(size, kind)
    settings = RuntimeEnv(**{"timeout_seconds": 10.0, "cycle_time_ms": 1.0, **env})

    def rank_main(rank: int) -> Any:
        engine = None
        try:
            engine = start_engine(ranks[rank], settings, chunk_bytes, idle_cycles)
            return body(engine)
        finally:
            if engine is not None:
                engine.stop()

    return in_threads(size, rank_main, timeout), ranks
