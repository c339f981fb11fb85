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

import random
from dataclasses import replace

from gcurun.launch.elastic import events as ev
from gcurun.launch.elastic.assignment import by_host, hosts_text, layout, target_slots
from gcurun.launch.elastic.config import ElasticConfig
from gcurun.launch.elastic.hosts import blacklist, eligible, min_np_message, readmit, update_hosts
from gcurun.launch.elastic.records import (
    Assignment,
    Failure,
    Generation,
    HostRecord,
    Phase,
    Worker,
    describe_exit,
)
from gcurun.launch.elastic.workers import holders, new_worker, overdue, worker_at


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
        self.outcome: ev.Finish | None = None
        self._graceful = True
        self._cause = "start"
        self._notified: frozenset[tuple[str, int]] | None = None
        self._discovered = False

    # -- public ---------------------------------------------------------------------------

    def handle(self, event: ev.Event) -> list[ev.Action]:
        """Apply ``event``; return what must be done, in order."""
        out: list[ev.Action] = []
        if self.phase == "done":
            return out
        if isinstance(event, ev.Interrupt):
            self._finish(out, 128 + event.signum, f"interrupted by signal {event.signum}")
        elif isinstance(event, ev.Discovered):
            self._on_discovered(event, out)
        elif isinstance(event, ev.DiscoveryFailed):
            if event.first and not self._discovered:
                self._finish(out, event.exit_code, event.message)
            else:
                out.append(ev.Record("discovery_failed", {"message": event.message}))
        elif isinstance(event, ev.WorkerExited):
            self._on_exit(event, out)
        elif isinstance(event, ev.ConnectionLost):
            self._on_lost(event, out)
        elif isinstance(event, ev.Joined):
            self._on_joined(event, out)
        elif isinstance(event, ev.Formed):
            if self.phase == "forming" and self.generation is not None \
                    and event.generation == self.generation.number:
                self.phase = "running"
                out.append(ev.Record("formed", {"generation": event.generation}))
                self._check_updates(event.now, out)
        elif isinstance(event, ev.Aborted):
            gen = self.generation
            if gen is not None and event.generation == gen.number \
                    and self.phase in ("forming", "running"):
                self._reform(event.now, event.reason, False, out)
        elif isinstance(event, ev.Tick):
            self._on_tick(event.now, out)
        return out

    @property
    def members(self) -> tuple[int, ...]:
        return self.generation.workers if self.generation is not None else ()

    def eligible(self) -> list[HostRecord]:
        return eligible(self.hosts)

    # -- events ---------------------------------------------------------------------------

    def _on_discovered(self, event: ev.Discovered, out: list[ev.Action]) -> None:
        self._discovered = True
        out += update_hosts(self.hosts, event.hosts)
        out += readmit(self.hosts, event.now)
        self._progress(event.now, out)

    def _on_exit(self, event: ev.WorkerExited, out: list[ev.Action]) -> None:
        worker = self.workers.get(event.worker)
        if worker is None or worker.state == "exited":
            return
        before = worker.state
        worker.state, worker.code, worker.signal = "exited", event.code, event.signal
        ok = event.code == 0 and event.signal is None
        out.append(ev.Record("worker_exited", {"worker": worker.id, "host": worker.host,
                                            "code": event.code, "signal": event.signal}))
        if event.worker in self.members and self.phase in ("forming", "running",
                                                           "reforming", "finishing"):
            if self.phase == "finishing":
                if not ok:
                    out.append(ev.Record("late_failure", {"worker": worker.id,
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
            out += blacklist(self.hosts[worker.host], event.now, f"worker {worker.id} "
                             f"{describe_exit(event.code, event.signal)}",
                             self.config.cooldown, self.rng)
        self._progress(event.now, out)

    def _on_lost(self, event: ev.ConnectionLost, out: list[ev.Action]) -> None:
        worker = self.workers.get(event.worker)
        if worker is None or worker.state in ("exited", "removed"):
            return
        if event.worker in self.members and self.phase in ("forming", "running",
                                                            "reforming"):
            if event.worker not in self.records:
                self._failed(event.now, worker, None, None,
                             "lost its connection to the rendezvous", out)

    def _on_joined(self, event: ev.Joined, out: list[ev.Action]) -> None:
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
        out.append(ev.Record("worker_joined", {"worker": worker.id, "host": worker.host}))
        self._progress(event.now, out)

    def _on_tick(self, now: float, out: list[ev.Action]) -> None:
        if self.phase == "waiting" and now >= self.deadline:
            self._finish(out, 1, min_np_message(self.config, self.hosts,
                                                self.generation is None))
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
            timeout = self.config.elastic_timeout
            for worker in overdue(self.workers, self.members, now, timeout):
                if not self.hosts[worker.host].blacklisted:
                    out += blacklist(self.hosts[worker.host], now, f"worker {worker.id} did "
                                     f"not start within --elastic-timeout {timeout:g} s",
                                     self.config.cooldown, self.rng)
            out += readmit(self.hosts, now)
            self._check_updates(now, out)

    # -- the barrier and the decision -----------------------------------------------------

    def _failed(self, now: float, worker: Worker, code: int | None, signal: int | None,
                text: str, out: list[ev.Action], decide: bool = True) -> None:
        self.failures.append(Failure(now, worker.id, worker.host, code, signal, text))
        if self.phase in ("forming", "running"):
            self._reform(now, f"worker {worker.id} on {worker.host} "
                         f"{describe_exit(code, signal, text)}", False, out)
        self._graceful = False
        self.records[worker.id] = "failed"
        if decide:
            self._maybe_decide(now, out)

    def _reform(self, now: float, cause: str, graceful: bool, out: list[ev.Action]) -> None:
        """The current generation ends: abort it everywhere, wait for every member."""
        assert self.generation is not None
        self.phase = "reforming"
        self.deadline = now + self.config.elastic_timeout
        self.records = {}
        self._graceful = graceful
        self._cause = cause
        out.append(ev.AbortGeneration(self.generation.number, cause))
        out.append(ev.Record("reforming", {"generation": self.generation.number,
                                        "cause": cause}))

    def _maybe_decide(self, now: float, out: list[ev.Action]) -> None:
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
                out += blacklist(self.hosts[host], now, f"worker {w} failed",
                                 self.config.cooldown, self.rng)
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

    def _progress(self, now: float, out: list[ev.Action]) -> None:
        if self.phase == "waiting":
            need = self.config.first_np if self.generation is None else self.config.min_np
            if self._discovered and len(self._target()) >= need:
                self._form(now, out)
        elif self.phase == "running":
            self._check_updates(now, out)

    def _target(self) -> list[tuple[str, int]]:
        """The (host, slot) of every rank the job would have now: hosts that hold the
        state first (rank 0 is one of theirs), then the others, each in first-seen
        order."""
        return target_slots(self.eligible(), holders(self.workers, self.members),
                            self.config.max_np)

    def _form(self, now: float, out: list[ev.Action]) -> None:
        prev = self.generation
        slots = self._target()
        if prev is not None:
            if not holders(self.workers, self.members):
                self._finish(out, 1, f"no worker of generation {prev.number} survived, so "
                             "nobody holds the training state to broadcast; the job "
                             "cannot continue")
                return
        chosen: list[Worker] = []
        fresh: list[Worker] = []
        for host, slot in slots:
            worker = worker_at(self.workers, host, slot)
            if worker is None:
                worker = new_worker(self.workers, now, host, slot)
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
        starts = by_host([a for a in members if self.workers[a.worker] in fresh])
        out += [ev.StartWorkers(host, tuple(batch)) for host, batch in starts.items()]
        out.append(ev.Publish(gen, removed))
        out.append(ev.Record("generation", {
            "generation": number, "size": len(members), "sync": sync, "cause": cause,
            "hosts": hosts_text(members), "resets": self.resets,
            "blacklisted": [h.name for h in self.hosts.values() if h.blacklisted]}))

    def _check_updates(self, now: float, out: list[ev.Action]) -> None:
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
        fresh: list[Assignment] = []
        waiting = False
        members = layout(target, list(range(len(target))))
        for host, slot in added:
            worker = worker_at(self.workers, host, slot)
            if worker is None:
                worker = new_worker(self.workers, now, host, slot)
                fresh.append(replace(members[target.index((host, slot))], worker=worker.id))
            if worker.state == "starting":
                waiting = True
        for host, batch in by_host(fresh).items():
            out.append(ev.StartWorkers(host, tuple(batch)))
            out.append(ev.Record("prewarm", {"host": host,
                                          "workers": [a.worker for a in batch]}))
        if waiting or wanted == self._notified:
            return
        bits = (ev.REMOVED if current - wanted else 0) | (ev.ADDED if added else 0)
        self.seq += 1
        self._notified = wanted
        out.append(ev.NotifyHostsUpdated(gen.number, self.seq, bits))
        out.append(ev.Record("hosts_updated", {"generation": gen.number, "seq": self.seq,
                                            "bits": bits}))

    # -- the end --------------------------------------------------------------------------

    def _start_finishing(self, now: float, out: list[ev.Action]) -> None:
        self.phase = "finishing"
        self.deadline = now + self.config.elastic_timeout
        out.append(ev.Record("finishing", {}))
        self._maybe_finished(out)

    def _maybe_finished(self, out: list[ev.Action]) -> None:
        if all(self.workers[w].state == "exited" or self.records.get(w) == "ready"
               for w in self.members):
            self._finish_success(out)

    def _finish_success(self, out: list[ev.Action]) -> None:
        gen = self.generation
        assert gen is not None
        rank0 = self.workers[gen.members[0].worker]
        code = 0
        if rank0.state == "exited":
            code = 128 + rank0.signal if rank0.signal is not None else (rank0.code or 0)
        self._finish(out, code, "" if code == 0 else
                     f"rank 0 (worker {rank0.id} on {rank0.host}) "
                     f"{describe_exit(rank0.code, rank0.signal)}")

    def _finish_failed(self, out: list[ev.Action], why: str) -> None:
        root = min(self.failures, key=lambda f: f.now) if self.failures else None
        code = root.job_exit_code if root is not None else 1
        detail = f"; the first failure: {root.describe()}" if root is not None else ""
        self._finish(out, code, f"{why}{detail}", root)

    def _finish(self, out: list[ev.Action], code: int, message: str,
                failure: Failure | None = None) -> None:
        self.phase = "done"
        self.outcome = ev.Finish(code, message, failure)
        out.append(ev.Record("finished", {"code": code, "message": message}))
        out.append(self.outcome)
