"""Engines of thread ranks joined by queues: the engine's protocol without processes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from gcurun.runtime.engine import Engine, start_engine
from gcurun.runtime.env import RuntimeEnv
from tests.runtime.threads import QueueTransport


def run_engines(size: int, body: Callable[[Engine], Any], timeout: float = 30.0,
                **env: Any) -> tuple[list[Any], list[QueueTransport]]:
    """Run ``body(engine)`` on ``size`` thread ranks, each with its own engine; return
    the results in rank order (re-raising a rank's exception) and the transports."""
    queues = {(a, b): queue.Queue() for a in range(size) for b in range(size)}
    transports = [QueueTransport(r, size, queues) for r in range(size)]
    settings = RuntimeEnv(**{"timeout_seconds": 10.0, "cycle_time_ms": 1.0, **env})
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def rank_main(rank: int) -> None:
        engine = None
        try:
            engine = start_engine(transports[rank], settings, 1 << 16)
            results[rank] = body(engine)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors[rank] = exc
        finally:
            if engine is not None:
                engine.stop()

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True)
               for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), f"a rank did not finish within {timeout} s"
    for error in errors:
        if error is not None:
            raise error
    return results, transports
