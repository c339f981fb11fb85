"""The elastic driver: every decision of an elastic job, as a state machine over plain data.

Events go in (:meth:`ElasticDriver.handle`), actions come out; the clock is the ``now``
every event carries and the random numbers come from an injected generator, so tests
drive it with fakes and no processes. :mod:`gcurun.launch.elastic.runner` performs the
actions.

The rules are Horovod Elastic's (``runner/elastic/driver.py``, ``registration.py``,
``discovery.py``), with these changes:

- a generation's assignment says whether its members must synchronize the state
  (``sync``): False only when every member was a member of the previous generation and
  that one ended by a host update, not a failure (Horovod's skip_sync deadlock);
- the re-join barrier has a deadline (``elastic_timeout``);
- workers for added slots are started before the running ones are told to re-form, so
  their start-up is off the survivors' critical path ("pre-warm");
- rank 0 of a new generation is always a worker that holds the training state.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal, Union

from gcurun.launch.elastic.config import ElasticConfig

# Bits of a host update (Horovod's HostUpdateResult).
REMOVED = 1
ADDED = 2

Phase = Literal["waiting", "forming", "running", "reforming", "finishing", "done"]
WorkerState = Literal["starting", "parked", "member", "removed", "exited"]


# -- events -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Discovered:
    """The discovery script's hosts, in the order it printed them."""

    now: float
    hosts: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class DiscoveryFailed:
    now: float
    message: str
    first: bool
    exit_code: int = 1


@dataclass(frozen=True)
class WorkerExited:
    """A worker's process ended (``code`` None: killed by ``signal``, or lost)."""

    now: float
    worker: int
    code: int | None
    signal: int | None = None
    text: str = ""


@dataclass(frozen=True)
class Joined:
    """A worker asked for a place in the generation after ``after`` (0: a new worker)."""

    now: float
    worker: int
    after: int


@dataclass(frozen=True)
class ConnectionLost:
    """A worker's connection to the rendezvous ended without a goodbye."""

    now: float
    worker: int


@dataclass(frozen=True)
class Formed:
    """Every member of ``generation`` registered: its ring exists."""

    now: float
    generation: int


@dataclass(frozen=True)
class Aborted:
    """A member aborted ``generation`` (a broken link, a collective timeout)."""

    now: float
    generation: int
    reason: str


@dataclass(frozen=True)
class Tick:
    now: float


@dataclass(frozen=True)
class Interrupt:
    now: float
    signum: int


Event = Union[Discovered, DiscoveryFailed, WorkerExited, Joined, ConnectionLost, Formed,
              Aborted, Tick, Interrupt]


# -- plain data ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Assignment:
    """One rank of a generation."""

    worker: int
    host: str
    slot: int
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


@dataclass(frozen=True)
class Generation:
    number: int
    members: tuple[Assignment, ...]     # by rank
    sync: bool
    cause: str

    @property
    def workers(self) -> tuple[int, ...]:
        return tuple(a.worker for a in self.members)

    def of(self, worker: int) -> Assignment | None:
        for a in self.members:
            if a.worker == worker:
                return a
        return None


@dataclass
class HostRecord:
    """One host ever seen, in first-seen order."""

    name: str
    slots: int
    listed: bool = True
    blacklisted: bool = False
    blacklist_count: int = 0
    cooldown_until: float = 0.0
    reason: str = ""


@dataclass
class Worker:
    """One process ever started; its identity is (host, slot)."""

    id: int
    host: str
    slot: int
    started: float
    state: WorkerState = "starting"
    code: int | None = None
    signal: int | None = None


@dataclass(frozen=True)
class Failure:
    """How a worker failed: the root cause of a failed job is the earliest."""

    now: float
    worker: int
    host: str
    code: int | None
    signal: int | None
    text: str

    @property
    def job_exit_code(self) -> int:
        if self.signal is not None:
            return 128 + self.signal
        return self.code if self.code else 1

    def describe(self) -> str:
        how = (f"was killed by signal {self.signal}" if self.signal is not None
               else f"exited with code {self.code}" if self.code is not None
               else self.text or "was lost")
        return f"worker {self.worker} on {self.host} {how}"


# -- actions ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StartWorkers:
    """Start one process per assignment on ``host`` (a batch); ``assignments`` carry the
    rank each worker is started for (its environment keeps it, as Horovod's does)."""

    host: str
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True)
class StopHost:
    host: str
    reason: str


@dataclass(frozen=True)
class Publish:
    generation: Generation
    removed: tuple[int, ...] = ()


@dataclass(frozen=True)
class NotifyHostsUpdated:
    generation: int
    seq: int
    bits: int


@dataclass(frozen=True)
class AbortGeneration:
    generation: int
    reason: str


@dataclass(frozen=True)
class Finish:
    """The job is over: stop every worker, exit with ``code`` (``message`` says why when
    it failed)."""

    code: int
    message: str = ""
    failure: Failure | None = None


@dataclass(frozen=True)
class Record:
    """An event for the event log (and the one line per generation on stderr)."""

    kind: str
    data: dict = field(default_factory=dict)


Action = Union[StartWorkers, StopHost, Publish, NotifyHostsUpdated, AbortGeneration, Finish,
               Record]


# -- assignment ---------------------------------------------------------------------------

def assign_slots(hosts: list[tuple[str, int]], max_np: int | None) -> list[tuple[str, int]]:
    """(host, slot) per rank: host by host in order, each up to its slots, at most
    ``max_np`` in all (Horovod's ``get_host_assignments``)."""
    slots: list[tuple[str, int]] = []
    for name, count in hosts:
        for slot in range(count):
            if max_np is not None and len(slots) >= max_np:
                return slots
            slots.append((name, slot))
    return slots


def layout(slots: list[tuple[str, int]], workers: list[int]) -> tuple[Assignment, ...]:
    """The assignments of ``workers`` to ``slots`` (rank = index): local ranks per host,
    cross ranks per local rank over hosts."""
    per_host: dict[str, int] = {}
    for host, _ in slots:
        per_host[host] = per_host.get(host, 0) + 1
    host_order = list(per_host)
    out = []
    for rank, ((host, slot), worker) in enumerate(zip(slots, workers, strict=True)):
        local_rank = sum(1 for h, _ in slots[:rank] if h == host)
        having = [h for h in host_order if per_host[h] > local_rank]
        out.append(Assignment(worker, host, slot, rank, len(slots), local_rank,
                              per_host[host], having.index(host), len(having)))
    return tuple(out)


def cooldown_seconds(count: int, low: int, high: int, uniform: float) -> float:
    """Horovod's cooldown of a host's ``count``-th blacklisting (``uniform`` in [0, 1))."""
    delay = low * (1 << count) + uniform * low
    return float(max(low, min(high, delay)))


# -- the driver ---------------------------------------------------------------------------

class ElasticDriver:
    """The decisions of one elastic job. Not thread-safe: one loop feeds it."""

    def __init__(self, config: ElasticConfig, rng: random.Random | None = None,
                 now: float = 0.0):
        self.config = config
        self.rng = rng or random.Random()
        self.hosts: dict[str, HostRecord] = {}
        self.workers: dict[int, Worker] = {}
        self.generation: Generation | None = None
        self.phase: Phase = "waiting"
        self.deadline = now + config.elastic_timeout
        self.resets = 0
        self.reset_causes: list[str] = []
        self.seq = 0
        self.records: dict[int, str] = {}
        self.failures: list[Failure] = []
        self.outcome: Finish | None = None
        self._next_id = 0
        self._graceful = True
        self._cause = "start"
        self._notified: frozenset[tuple[str, int]] | None = None
        self._discovered = False

    # -- public ---------------------------------------------------------------------------

    def handle(self, event: Event) -> list[Action]:
        """Apply ``event``; return what must be done, in order."""
        out: list[Action] = []
        if self.phase == "done":
            return out
        if isinstance(event, Interrupt):
            self._finish(out, 128 + event.signum, f"interrupted by signal {event.signum}")
        elif isinstance(event, Discovered):
            self._on_discovered(event, out)
        elif isinstance(event, DiscoveryFailed):
            if event.first and not self._discovered:
                self._finish(out, event.exit_code, event.message)
            else:
                out.append(Record("discovery_failed", {"message": event.message}))
        elif isinstance(event, WorkerExited):
            self._on_exit(event, out)
        elif isinstance(event, ConnectionLost):
            self._on_lost(event, out)
        elif isinstance(event, Joined):
            self._on_joined(event, out)
        elif isinstance(event, Formed):
            if self.phase == "forming" and self.generation is not None \
                    and event.generation == self.generation.number:
                self.phase = "running"
                out.append(Record("formed", {"generation": event.generation}))
                self._check_updates(event.now, out)
        elif isinstance(event, Aborted):
            gen = self.generation
            if gen is not None and event.generation == gen.number \
                    and self.phase in ("forming", "running"):
                self._reform(event.now, event.reason, False, out)
        elif isinstance(event, Tick):
            self._on_tick(event.now, out)
        return out

    @property
    def members(self) -> tuple[int, ...]:
        return self.generation.workers if self.generation is not None else ()

    def eligible(self) -> list[HostRecord]:
        return [h for h in self.hosts.values() if h.listed and not h.blacklisted]

    # -- events ---------------------------------------------------------------------------

    def _on_discovered(self, event: Discovered, out: list[Action]) -> None:
        self._discovered = True
        listed = dict(event.hosts)
        for name, slots in event.hosts:
            record = self.hosts.get(name)
            if record is None:
                self.hosts[name] = HostRecord(name, slots)
                out.append(Record("host_added", {"host": name, "slots": slots}))
            elif record.slots != slots or not record.listed:
                record.slots, record.listed = slots, True
                out.append(Record("host_changed", {"host": name, "slots": slots}))
        for record in self.hosts.values():
            if record.name not in listed and record.listed:
                record.listed = False
                out.append(Record("host_removed", {"host": record.name}))
        self._readmit(event.now, out)
        self._progress(event.now, out)

    def _on_exit(self, event: WorkerExited, out: list[Action]) -> None:
        worker = self.workers.get(event.worker)
        if worker is None or worker.state == "exited":
            return
        before = worker.state
        worker.state, worker.code, worker.signal = "exited", event.code, event.signal
        ok = event.code == 0 and event.signal is None
        out.append(Record("worker_exited", {"worker": worker.id, "host": worker.host,
                                            "code": event.code, "signal": event.signal}))
        if event.worker in self.members and self.phase in ("forming", "running",
                                                           "reforming", "finishing"):
            if self.phase == "finishing":
                if not ok:
                    out.append(Record("late_failure", {"worker": worker.id,
                                                       "code": event.code,
                                                       "signal": event.signal}))
                self._maybe_finished(out)
                return
            if ok:
                self.records[worker.id] = "succeeded"
                if self.phase == "reforming":
                    self._maybe_decide(event.now, out)
                else:
                    self._start_finishing(event.now, out)
                return
            self._failed(event.now, worker, event.code, event.signal, event.text, out)
            return
        if ok or before == "removed":
            return
        # A worker outside the generation (started for added slots, or parked) failed:
        # its host is blacklisted, without a reset.
        if not self.hosts[worker.host].blacklisted:
            self._blacklist(event.now, worker.host,
                            f"worker {worker.id} {_how(event.code, event.signal)}", out)
        self._progress(event.now, out)

    def _on_lost(self, event: ConnectionLost, out: list[Action]) -> None:
        worker = self.workers.get(event.worker)
        if worker is None or worker.state in ("exited", "removed"):
            return
        if event.worker in self.members and self.phase in ("forming", "running",
                                                            "reforming"):
            if event.worker not in self.records:
                self._failed(event.now, worker, None, None,
                             "lost its connection to the rendezvous", out)

    def _on_joined(self, event: Joined, out: list[Action]) -> None:
        worker = self.workers.get(event.worker)
        if worker is None or worker.state in ("exited", "removed"):
            return
        gen = self.generation
        if gen is not None and event.worker in gen.workers and event.after >= gen.number:
            if self.phase in ("forming", "running"):
                self._reform(event.now, f"worker {worker.id} on {worker.host} left "
                             f"generation {gen.number} to re-form", True, out)
            worker.state = "parked"
            if self.phase == "reforming":
                self.records.setdefault(worker.id, "ready")
                self._maybe_decide(event.now, out)
            return
        if gen is not None and event.worker in gen.workers:
            return      # a new member took its place in the generation being formed
        worker.state = "parked"
        out.append(Record("worker_joined", {"worker": worker.id, "host": worker.host}))
        self._progress(event.now, out)

    def _on_tick(self, now: float, out: list[Action]) -> None:
        if self.phase == "waiting" and now >= self.deadline:
            self._finish(out, 1, self._min_np_message())
        elif self.phase == "forming" and now >= self.deadline and self.generation:
            self._reform(now, f"generation {self.generation.number} did not form within "
                         f"--elastic-timeout {self.config.elastic_timeout:g} s", False, out)
        elif self.phase == "reforming" and now >= self.deadline:
            for w in self.members:
                if w not in self.records:
                    worker = self.workers[w]
                    self._failed(now, worker, None, None, "did not re-join within "
                                 f"--elastic-timeout {self.config.elastic_timeout:g} s",
                                 out, decide=False)
            self._maybe_decide(now, out)
        elif self.phase == "finishing" and now >= self.deadline:
            self._finish_success(out)
        elif self.phase == "running":
            for worker in list(self.workers.values()):
                if worker.state == "starting" and worker.id not in self.members \
                        and now >= worker.started + self.config.elastic_timeout \
                        and not self.hosts[worker.host].blacklisted:
                    self._blacklist(now, worker.host, f"worker {worker.id} did not start "
                                    f"within --elastic-timeout "
                                    f"{self.config.elastic_timeout:g} s", out)
            self._readmit(now, out)
            self._check_updates(now, out)

    # -- the barrier and the decision -----------------------------------------------------

    def _failed(self, now: float, worker: Worker, code: int | None, signal: int | None,
                text: str, out: list[Action], decide: bool = True) -> None:
        self.failures.append(Failure(now, worker.id, worker.host, code, signal, text))
        if self.phase in ("forming", "running"):
            self._reform(now, f"worker {worker.id} on {worker.host} "
                         f"{_how(code, signal, text)}", False, out)
        self._graceful = False
        self.records[worker.id] = "failed"
        if decide:
            self._maybe_decide(now, out)

    def _reform(self, now: float, cause: str, graceful: bool, out: list[Action]) -> None:
        """The current generation ends: abort it everywhere, wait for every member."""
        assert self.generation is not None
        self.phase = "reforming"
        self.deadline = now + self.config.elastic_timeout
        self.records = {}
        self._graceful = graceful
        self._cause = cause
        out.append(AbortGeneration(self.generation.number, cause))
        out.append(Record("reforming", {"generation": self.generation.number,
                                        "cause": cause}))

    def _maybe_decide(self, now: float, out: list[Action]) -> None:
        if self.phase != "reforming" or any(w not in self.records for w in self.members):
            return
        gen = self.generation
        assert gen is not None
        if "succeeded" in self.records.values():
            self._start_finishing(now, out)
            return
        failed = [w for w in self.members if self.records[w] == "failed"]
        if len(failed) == len(self.members):
            self._finish_failed(out, f"every worker of generation {gen.number} failed")
            return
        for w in failed:
            host = self.workers[w].host
            if not self.hosts[host].blacklisted:
                self._blacklist(now, host, f"worker {w} failed", out)
        if all(self.hosts[a.host].blacklisted for a in gen.members):
            self._finish_failed(out, "every host of the job is blacklisted")
            return
        limit = self.config.reset_limit
        if limit is not None and self.resets >= limit:
            causes = "; ".join(self.reset_causes + [self._cause])
            self._finish(out, 1, f"a reset was needed but the job was reset {self.resets} "
                         f"times already, the --reset-limit ({causes}); raise "
                         "--reset-limit")
            return
        self.resets += 1
        self.reset_causes.append(self._cause)
        self.phase = "waiting"
        self.deadline = now + self.config.elastic_timeout
        self._progress(now, out)

    # -- forming --------------------------------------------------------------------------

    def _progress(self, now: float, out: list[Action]) -> None:
        if self.phase == "waiting":
            need = self.config.first_np if self.generation is None else self.config.min_np
            if self._discovered and len(self._target()) >= need:
                self._form(now, out)
        elif self.phase == "running":
            self._check_updates(now, out)

    def _holders(self) -> set[str]:
        """Hosts of the workers that hold the training state (the current generation's
        living members)."""
        return {self.workers[w].host for w in self.members
                if self.workers[w].state in ("member", "parked")}

    def _target(self) -> list[tuple[str, int]]:
        """The (host, slot) of every rank the job would have now: hosts that hold the
        state first (rank 0 is one of theirs), then the others, each in first-seen
        order."""
        holders = self._holders()
        eligible = self.eligible()
        ordered = [h for h in eligible if h.name in holders] + \
                  [h for h in eligible if h.name not in holders]
        return assign_slots([(h.name, h.slots) for h in ordered], self.config.max_np)

    def _worker_at(self, host: str, slot: int) -> Worker | None:
        for worker in self.workers.values():
            if worker.host == host and worker.slot == slot \
                    and worker.state in ("starting", "parked", "member"):
                return worker
        return None

    def _new_worker(self, now: float, host: str, slot: int) -> Worker:
        worker = Worker(self._next_id, host, slot, now)
        self._next_id += 1
        self.workers[worker.id] = worker
        return worker

    def _form(self, now: float, out: list[Action]) -> None:
        prev = self.generation
        slots = self._target()
        if prev is not None:
            holders = self._holders()
            if not holders:
                self._finish(out, 1, f"no worker of generation {prev.number} survived, so "
                             "nobody holds the training state to broadcast; the job "
                             "cannot continue")
                return
        chosen: list[Worker] = []
        fresh: list[Worker] = []
        for host, slot in slots:
            worker = self._worker_at(host, slot)
            if worker is None:
                worker = self._new_worker(now, host, slot)
                fresh.append(worker)
            chosen.append(worker)
        members = layout(slots, [w.id for w in chosen])
        ids = {w.id for w in chosen}
        removed = tuple(w.id for w in self.workers.values()
                        if w.state in ("parked", "starting") and w.id not in ids)
        for w in removed:
            self.workers[w].state = "removed"
        for worker in chosen:
            if worker.state == "parked":
                worker.state = "member"
        before = set(prev.workers) if prev is not None else set()
        sync = prev is None or not self._graceful or any(w not in before for w in ids)
        number = prev.number + 1 if prev is not None else 1
        cause = self._cause if prev is not None else "start"
        gen = Generation(number, members, sync, cause)
        self.generation = gen
        self.records = {}
        self._notified = None
        self.phase = "forming"
        self.deadline = now + self.config.elastic_timeout
        by_host: dict[str, list[Assignment]] = {}
        for a in members:
            if self.workers[a.worker] in fresh:
                by_host.setdefault(a.host, []).append(a)
        for host, batch in by_host.items():
            out.append(StartWorkers(host, tuple(batch)))
        out.append(Publish(gen, removed))
        out.append(Record("generation", {
            "generation": number, "size": len(members), "sync": sync, "cause": cause,
            "hosts": _hosts_text(members), "resets": self.resets,
            "blacklisted": [h.name for h in self.hosts.values() if h.blacklisted]}))

    def _check_updates(self, now: float, out: list[Action]) -> None:
        """While running: start workers for added slots at once; tell the members to
        re-form once every one of them joined (or at once when slots were only
        removed)."""
        gen = self.generation
        if self.phase != "running" or gen is None:
            return
        target = self._target()
        current = {(a.host, a.slot) for a in gen.members}
        wanted = frozenset(target)
        if wanted == current:
            return
        added = [s for s in target if s not in current]
        starts: dict[str, list[Assignment]] = {}
        waiting = False
        members = layout(target, list(range(len(target))))
        for host, slot in added:
            worker = self._worker_at(host, slot)
            if worker is None:
                worker = self._new_worker(now, host, slot)
                rank = target.index((host, slot))
                a = members[rank]
                starts.setdefault(host, []).append(Assignment(
                    worker.id, host, slot, a.rank, a.size, a.local_rank, a.local_size,
                    a.cross_rank, a.cross_size))
            if worker.state == "starting":
                waiting = True
        for host, batch in starts.items():
            out.append(StartWorkers(host, tuple(batch)))
            out.append(Record("prewarm", {"host": host,
                                          "workers": [a.worker for a in batch]}))
        if waiting or wanted == self._notified:
            return
        bits = (REMOVED if current - wanted else 0) | (ADDED if added else 0)
        self.seq += 1
        self._notified = wanted
        out.append(NotifyHostsUpdated(gen.number, self.seq, bits))
        out.append(Record("hosts_updated", {"generation": gen.number, "seq": self.seq,
                                            "bits": bits}))

    # -- blacklist ------------------------------------------------------------------------

    def _blacklist(self, now: float, host: str, reason: str, out: list[Action]) -> None:
        record = self.hosts[host]
        record.blacklisted = True
        record.blacklist_count += 1
        record.reason = reason
        cooldown = self.config.cooldown
        if cooldown is None:
            record.cooldown_until = math.inf
        else:
            low, high = cooldown
            record.cooldown_until = now + cooldown_seconds(
                record.blacklist_count, low, high, self.rng.uniform(0, 1))
        out.append(StopHost(host, reason))
        out.append(Record("blacklist", {
            "host": host, "reason": reason, "count": record.blacklist_count,
            "cooldown": None if cooldown is None else record.cooldown_until - now}))

    def _readmit(self, now: float, out: list[Action]) -> None:
        for record in self.hosts.values():
            if record.blacklisted and record.listed and now >= record.cooldown_until:
                record.blacklisted = False
                out.append(Record("readmit", {"host": record.name}))

    # -- the end --------------------------------------------------------------------------

    def _start_finishing(self, now: float, out: list[Action]) -> None:
        self.phase = "finishing"
        self.deadline = now + self.config.elastic_timeout
        out.append(Record("finishing", {}))
        self._maybe_finished(out)

    def _maybe_finished(self, out: list[Action]) -> None:
        if all(self.workers[w].state == "exited" or self.records.get(w) == "ready"
               for w in self.members):
            self._finish_success(out)

    def _finish_success(self, out: list[Action]) -> None:
        gen = self.generation
        assert gen is not None
        rank0 = self.workers[gen.members[0].worker]
        code = 0
        if rank0.state == "exited":
            code = 128 + rank0.signal if rank0.signal is not None else (rank0.code or 0)
        self._finish(out, code, "" if code == 0 else
                     f"rank 0 (worker {rank0.id} on {rank0.host}) "
                     f"{_how(rank0.code, rank0.signal)}")

    def _finish_failed(self, out: list[Action], why: str) -> None:
        root = min(self.failures, key=lambda f: f.now) if self.failures else None
        code = root.job_exit_code if root is not None else 1
        detail = f"; the first failure: {root.describe()}" if root is not None else ""
        self._finish(out, code, f"{why}{detail}", root)

    def _finish(self, out: list[Action], code: int, message: str,
                failure: Failure | None = None) -> None:
        self.phase = "done"
        self.outcome = Finish(code, message, failure)
        out.append(Record("finished", {"code": code, "message": message}))
        out.append(self.outcome)

    def _min_np_message(self) -> str:
        eligible = self.eligible()
        have = sum(h.slots for h in eligible)
        shown = ", ".join(f"{h.name}:{h.slots}" for h in eligible) or "none"
        black = [f"{h.name} blacklisted ({h.reason})" for h in self.hosts.values()
                 if h.blacklisted]
        extra = f"; {', '.join(black)}" if black else ""
        need = self.config.first_np if self.generation is None else self.config.min_np
        flag = "-np" if self.generation is None and self.config.start_np is not None \
            else "--min-np"
        return (f"timed out waiting for the minimum number of slots: only {have} "
                f"available ({shown}{extra}) but {flag} is {need}, for the whole "
                f"--elastic-timeout of {self.config.elastic_timeout:g} s; add hosts, lower "
                f"{flag} or raise --elastic-timeout")


def _how(code: int | None, signal: int | None, text: str = "") -> str:
    if signal is not None:
        return f"was killed by signal {signal}"
    if code is not None:
        return f"exited with code {code}"
    return text or "was lost"


def _hosts_text(members: tuple[Assignment, ...]) -> str:
    counts: dict[str, int] = {}
    for a in members:
        counts[a.host] = counts.get(a.host, 0) + 1
    return ",".join(f"{h}:{n}" for h, n in counts.items())
