"""The elastic runner: one loop that feeds the driver events and performs its actions.

Callbacks (executors' reader threads, the rendezvous thread, the discovery thread,
signal handlers) only put events on one queue; the loop drains it, asks the driver
what to do, and does it: start a batch of workers on a host (through the local or SSH
executor, one rank group per batch, in a thread so the loop never waits on a host),
stop a host's workers, publish a generation, notify the members, abort a generation,
finish. Executors report workers by worker id in place of a rank (ranks change).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from gcurun.config.api import Settings
from gcurun.errors import GcurunError, LaunchError, UsageError
from gcurun.hosts.api import HostSpec
from gcurun.launch.api import ExecutorErrorEvent, ExitEvent, OutputEvent, RankGroup
from gcurun.launch.bootstrap_group import BootstrapGroup
from gcurun.launch.elastic import events as ev
from gcurun.launch.elastic.config import DISCOVERY_TIMEOUT, ElasticConfig
from gcurun.launch.elastic.discovery import DiscoveryError
from gcurun.launch.elastic.driver import ElasticDriver
from gcurun.launch.elastic.plan import worker_plan, worker_settings
from gcurun.launch.elastic.records import Assignment
from gcurun.launch.remote.rank_env import ANY_ADDRESS, RENDEZVOUS_VARIABLE, SECRET_VARIABLE
from gcurun.launch.supervision.output import OutputSink
from gcurun.launch.supervision.supervise import (
    EventQueue,
    InterruptEvent,
    finish_output,
    stop_groups,
)

EXIT_REPORT_SLACK = 10.0
TICK_SECONDS = 0.2


class ElasticJobFailed(GcurunError):
    """An elastic job ended badly: ``exit_code`` is the driver's (the root cause's
    code, 1 for the reset limit or too few slots, 128+N after a signal)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


Discover = Callable[[], tuple[HostSpec, ...]]


class ElasticRunner:
    """Runs ``command`` as an elastic job: ``discover()`` returns the hosts (it raises
    DiscoveryError on failure); ``settings`` are the job's (output, grace, SSH, ...).
    ``event_log``: a path for one JSON line per driver event. ``stderr`` gets one line
    per generation, blacklisting and the end. ``extra_secrets``: variables every worker
    gets off its command line (``gcurun.run``'s function service; an address ``*:PORT``
    means this host as the worker's host reaches it)."""

    def __init__(self, command: Sequence[str], settings: Settings, config: ElasticConfig,
                 discover: Discover, sink: OutputSink, *, stderr: TextIO = sys.stderr,
                 liveness: float = 10.0, event_log: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 extra_secrets: Mapping[str, str] | None = None):
        self.command = tuple(command)
        self.settings = settings
        self.config = config
        self.discover = discover
        self.sink = sink
        self.stderr = stderr
        self.liveness = liveness
        self.extra_secrets = dict(extra_secrets or {})
        self.clock = clock
        self.events: EventQueue = EventQueue()
        self.driver = ElasticDriver(config, now=clock())
        self.specs: dict[str, HostSpec] = {}
        self.groups: dict[str, list[RankGroup]] = {}
        self.stoppers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._interrupted = False
        self._log = open(event_log, "a", encoding="utf-8") if event_log else None  # noqa: SIM115
        self._started = clock()
        self._wall = time.time()
        self._secret = b""
        self._port = 0
        self._server: Any = None

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        """Run the job to its end. Returns when it finished with code 0; raises
        ElasticJobFailed otherwise, after stopping every worker on every host."""
        from gcurun.launch.execute import signals_to, start_on_any_address
        from gcurun.rendezvous.elastic import ElasticRendezvousServer
        from gcurun.rendezvous.server import new_secret

        self._secret = new_secret()
        self._server = start_on_any_address(lambda host: ElasticRendezvousServer(
            host, 0, secret=self._secret, on_event=self.events.put, liveness=self.liveness))
        self._port = self._server.address[1]
        poller = threading.Thread(target=self._poll_discovery, daemon=True,
                                  name="elastic-discovery")
        outcome: ev.Finish | None = None
        try:
            with signals_to(self.events):
                poller.start()
                outcome = self._loop()
        finally:
            self._stop.set()
            self._stop_everything()
            self._server.close()
            finish_output(self.sink, self.events, interrupted=self._interrupted)
            if self._log is not None:
                self._log.close()
        if outcome.code != 0:
            raise ElasticJobFailed(f"job failed: {outcome.message}", outcome.code)

    def _loop(self) -> ev.Finish:
        while True:
            try:
                item = self.events.get(timeout=TICK_SECONDS)
            except queue.Empty:
                item = None
            now = self.clock()
            event = self._translate(item, now) if item is not None else ev.Tick(now)
            actions = self.driver.handle(event) if event is not None else []
            if event is not None and not isinstance(event, ev.Tick):
                actions += self.driver.handle(ev.Tick(now))
            for action in actions:
                self._perform(action)
            if self.driver.outcome is not None:
                return self.driver.outcome

    def _translate(self, item: Any, now: float) -> ev.Event | None:
        if isinstance(item, OutputEvent):
            self.sink.write(item)
            return None
        if isinstance(item, ExitEvent):
            return ev.WorkerExited(now, item.rank, item.exit_code, item.signal,
                                  item.error_text or "")
        if isinstance(item, ExecutorErrorEvent):
            for worker in item.ranks[1:]:
                self.events.put(ExitEvent(worker, 255, None, item.message))
            return ev.WorkerExited(now, item.ranks[0], 255, None, item.message) \
                if item.ranks else None
        if isinstance(item, InterruptEvent):
            self._interrupted = True
            return ev.Interrupt(now, item.signum)
        kind = item[0]
        if kind == "discovered":
            return ev.Discovered(now, item[1])
        if kind == "discovery_failed":
            return ev.DiscoveryFailed(now, item[1], item[2], item[3])
        if kind == "joined":
            return ev.Joined(now, item[1], item[2])
        if kind == "lost":
            return ev.ConnectionLost(now, item[1])
        if kind == "formed":
            return ev.Formed(now, item[1])
        if kind == "aborted":
            return ev.Aborted(now, item[1], item[2])
        return None

    # -- actions --------------------------------------------------------------------------

    def _perform(self, action: ev.Action) -> None:
        server = self._server
        if isinstance(action, ev.StartWorkers):
            self._start_workers(action)
        elif isinstance(action, ev.StopHost):
            self.stoppers += stop_groups(self.groups.get(action.host, []),
                                         self.settings.grace_seconds)
        elif isinstance(action, ev.Publish):
            gen = action.generation
            server.publish(gen.number, [{**dataclasses.asdict(a), "sync": gen.sync}
                                        for a in gen.members], action.removed)
        elif isinstance(action, ev.NotifyHostsUpdated):
            server.notify(action.seq, action.bits)
        elif isinstance(action, ev.AbortGeneration):
            server.abort_generation(action.generation, action.reason)
        elif isinstance(action, ev.Finish):
            server.finish(action.message or "the job finished")
        elif isinstance(action, ev.Record):
            self._record(action)

    def _record(self, record: ev.Record) -> None:
        elapsed = self.clock() - self._started
        if self._log is not None:
            self._log.write(json.dumps({"t": round(elapsed, 3), "wall": round(
                self._wall + elapsed, 3), "event": record.kind, **record.data}) + "\n")
            self._log.flush()
        data = record.data
        line = None
        if record.kind == "generation":
            limit = self.config.reset_limit
            resets = f"; reset {data['resets']}" + (f" of --reset-limit {limit}"
                                                    if limit is not None else "")
            line = (f"generation {data['generation']}: {data['size']} ranks on "
                    f"{data['hosts']} ({data['cause']}){resets if data['resets'] else ''}")
        elif record.kind == "blacklist":
            cooldown = data["cooldown"]
            line = (f"host {data['host']} blacklisted "
                    + ("for the rest of the job" if cooldown is None
                       else f"for {cooldown:.1f} s") + f": {data['reason']}")
        elif record.kind == "readmit":
            line = f"host {data['host']} readmitted after its cooldown"
        elif record.kind == "discovery_failed":
            line = f"warning: {data['message']}; trying again"
        if line is not None:
            self.stderr.write(f"gcurun: elastic: {line}\n")
            self.stderr.flush()

    def _start_workers(self, action: ev.StartWorkers) -> None:
        spec = self.specs.get(action.host, HostSpec(action.host))
        thread = threading.Thread(target=self._start_batch, args=(spec, action.assignments),
                                  daemon=True, name=f"elastic-start-{action.host}")
        thread.start()

    def _start_batch(self, spec: HostSpec, assignments: Sequence[Assignment]) -> None:
        """Plan, prepare (SSH preflight) and start one batch; a failure to start is the
        workers' failure, reported as their exit."""
        ids = tuple(a.worker for a in assignments)
        try:
            group = self._make_group(spec, assignments)
            if self._stop.is_set():
                return
            self.groups.setdefault(spec.name, []).append(group)
            group.start(self.events)  # type: ignore[arg-type]
        except (GcurunError, OSError) as exc:
            self.events.put(ExecutorErrorEvent(ids, f"could not start on {spec.name}: {exc}"))

    def _make_group(self, spec: HostSpec, assignments: Sequence[Assignment]) -> RankGroup:
        from gcurun.launch.execute import group_factory
        from gcurun.launch.prepare import prepare_plan

        slots = max(a.slot for a in assignments) + 1
        host = dataclasses.replace(spec, slots=max(spec.slots, slots))
        plan = worker_plan(self.command, self.settings, (host,), assignments,
                           liveness=self.liveness)
        job = prepare_plan(plan, worker_settings(self.settings, (host,)))
        local = job.kind.this_host_only
        here = "127.0.0.1" if local else ANY_ADDRESS
        secrets = {RENDEZVOUS_VARIABLE: f"{here}:{self._port}",
                   SECRET_VARIABLE: self._secret.hex(),
                   **{name: value.replace(f"{ANY_ADDRESS}:", f"{here}:")
                      for name, value in self.extra_secrets.items()}}
        groups = group_factory(plan.launcher)(job, secrets)
        if len(groups) != 1:
            job.close()
            raise LaunchError(f"host {spec.name}: expected one group of workers, got "
                              f"{len(groups)}")
        if isinstance(groups[0], BootstrapGroup):
            groups[0].keep_alive(self.liveness)   # pings; a cut-off host fences itself
        return groups[0]

    def _stop_everything(self) -> None:
        self.events.unbound()    # the loop is over: no reader waits for it any more
        groups = [g for gs in self.groups.values() for g in gs]
        self.stoppers += stop_groups(groups, self.settings.grace_seconds)
        deadline = time.monotonic() + self.settings.grace_seconds + EXIT_REPORT_SLACK
        for t in self.stoppers:
            t.join(max(0.0, deadline - time.monotonic()))
        while True:     # the last words of the workers
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, OutputEvent):
                self.sink.write(item)

    # -- discovery ------------------------------------------------------------------------

    def _poll_discovery(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                found = self.discover()
            except DiscoveryError as exc:
                self.events.put(("discovery_failed", str(exc), first, exc.exit_code))
                if first:
                    return
            else:
                for spec in found:
                    self.specs[spec.name] = spec
                self.events.put(("discovered", tuple((h.name, h.slots) for h in found)))
                first = False
            self._stop.wait(self.config.discovery_interval)


def elastic_discovery(settings: Settings, config: ElasticConfig) -> Discover:
    """How the job finds its hosts: the discovery script of the settings, or their fixed
    hosts (at least two). Raises UsageError when both or neither are given."""
    from gcurun.launch.elastic.discovery import check_fixed_hosts

    script = settings.elastic.host_discovery_script
    if script:
        if settings.hosts is not None:
            raise UsageError("--host-discovery-script finds the hosts; drop -H/--hostfile "
                             "(or drop the script and give --min-np with -H)")
        return script_discovery(script, config.default_slots)
    if settings.hosts is None:
        raise UsageError("--min-np needs hosts: give -H/--hostfile (at least 2 hosts) or "
                         "--host-discovery-script")
    check_fixed_hosts(settings.hosts, settings.hostfile or ",".join(
        f"{h.display}:{h.slots}" for h in settings.hosts))
    return fixed_discovery(settings.hosts)


def script_discovery(script: str, default_slots: int | None) -> Discover:
    from gcurun.launch.elastic.discovery import run_discovery

    return lambda: run_discovery(script, default_slots, DISCOVERY_TIMEOUT)


def fixed_discovery(hosts: Sequence[HostSpec]) -> Discover:
    found = tuple(hosts)
    return lambda: found


def event_log_path(settings: Settings, environ: Mapping[str, str] = os.environ) -> str | None:
    """``elastic-events.jsonl`` in the output directory, when there is one."""
    if not settings.output_dir:
        return None
    os.makedirs(settings.output_dir, exist_ok=True)
    return os.path.join(settings.output_dir, "elastic-events.jsonl")
