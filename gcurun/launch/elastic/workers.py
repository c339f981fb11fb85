"""The elastic driver's workers: functions over its ``dict[int, Worker]``.

The dict only grows (a worker that ended stays, with its state), so ids are 0, 1, 2...
in start order and a new worker's id is the dict's size.
"""

from __future__ import annotations

from gcurun.launch.elastic.records import Worker


def new_worker(workers: dict[int, Worker], now: float, host: str, slot: int) -> Worker:
    """A new worker for (``host``, ``slot``), started at ``now``, added to ``workers``."""
    worker = Worker(len(workers), host, slot, now)
    workers[worker.id] = worker
    return worker


def worker_at(workers: dict[int, Worker], host: str, slot: int) -> Worker | None:
    """The living (starting, parked or member) worker of (``host``, ``slot``), if any."""
    for worker in workers.values():
        if worker.host == host and worker.slot == slot \
                and worker.state in ("starting", "parked", "member"):
            return worker
    return None


def holders(workers: dict[int, Worker], members: tuple[int, ...]) -> set[str]:
    """Hosts of the workers that hold the training state (the living ``members`` of the
    current generation)."""
    return {workers[w].host for w in members if workers[w].state in ("member", "parked")}


def overdue(workers: dict[int, Worker], members: tuple[int, ...], now: float,
            timeout: float) -> list[Worker]:
    """Workers started for added slots (not ``members``) still starting ``timeout``
    seconds after they were started."""
    return [w for w in workers.values()
            if w.state == "starting" and w.id not in members and now >= w.started + timeout]
