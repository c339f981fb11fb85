"""``gcurun.run``: run a Python function on every rank and return what each returned.

Horovod's ``horovod.run`` with its parameter names, through the same prepare -> plan ->
execute as the ``gcurun`` command: the function (lambdas and closures too, pickled with
cloudpickle) reaches each rank from a service of this process
(:mod:`gcurun.launch.function_service`), never on a command line.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import pickle
import shlex
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gcurun.config.api import Settings
from gcurun.errors import LaunchError, RankFunctionError, RanksFailedError, UsageError

if TYPE_CHECKING:
    from gcurun.launch.function_service import FunctionService

log = logging.getLogger("gcurun.run")

# Horovod's elastic parameters (and their old names) -> elastic settings.
ELASTIC = {"min_num_proc": "elastic.min_np", "max_num_proc": "elastic.max_np",
           "slots": "elastic.slots", "reset_limit": "elastic.reset_limit",
           "cooldown_range": "elastic.blacklist_cooldown_range",
           "host_discovery_script": "elastic.host_discovery_script",
           "elastic_timeout": "elastic.timeout"}
OLD_NAMES = {"min_np": "min_num_proc", "max_np": "max_num_proc"}
# Worker ids of an elastic job grow as workers are replaced; the service takes any of them.
MAX_WORKERS = 1 << 20
# A rank's outcome may still be in flight when its exit is seen.
OUTCOME_WAIT_SECONDS = 10.0


def run(fn: Callable[..., Any], args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None, num_proc: int | None = None,
        min_num_proc: int | None = None, max_num_proc: int | None = None,
        slots: int | None = None, reset_limit: int | None = None,
        cooldown_range: tuple[int, int] | None = None, hosts: str | None = None,
        hostfile: str | None = None, start_timeout: float | None = None,
        ssh_port: int | None = None, ssh_identity_file: str | None = None,
        disable_cache: bool | None = None, output_filename: str | None = None,
        verbose: int | bool | None = None, use_gloo: bool | None = None,
        use_mpi: bool | None = None, mpi_args: str | None = None,
        network_interface: str | None = None, executable: str | None = None,
        np: int | None = None, min_np: int | None = None, max_np: int | None = None, *,
        host_discovery_script: str | None = None, elastic_timeout: float | None = None,
        env: Mapping[str, str] | None = None, profile: str | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on every rank; the list of its results, in rank order.

    ``num_proc`` ranks (``np`` is Horovod's old name; default: every slot of ``hosts`` or
    ``hostfile``, else 1) on ``hosts`` (``a:2,b:2``) or ``hostfile``, over SSH where a
    host is remote, or under mpirun with ``use_mpi`` (``mpi_args`` go to mpirun);
    ``use_gloo`` means gcurun's own launcher and tcp runtime. ``network_interface`` (a
    name or CIDR) is the network between hosts, for mpirun and the tcp runtime alike.
    ``start_timeout`` bounds each host's SSH preflight; ``output_filename`` is a
    directory for each rank's log files; ``env`` sets variables on every rank; ``profile``
    is a cluster profile; ``executable`` is the ranks' Python; ``disable_cache`` changes
    nothing (gcurun checks hosts every time); ``verbose`` prints the plan to stderr.
    Settings not given come from the profile, ``GCURUN_*`` variables and defaults, as for
    the ``gcurun`` command. Rank output is printed with ``[rank]`` prefixes.

    An elastic job (Horovod Elastic) when ``min_num_proc`` (``min_np``) or
    ``host_discovery_script`` is given, as for ``gcurun --min-np``: ``max_num_proc``,
    ``slots``, ``reset_limit``, ``cooldown_range`` (MIN, MAX) and ``elastic_timeout`` are
    its other settings; ``fn`` calls ``hvd.init()`` and wraps its training in
    ``@hvd.elastic.run``. Its result is the list of what each worker that finished
    returned, in the order the workers started (rank order when the job never re-formed).

    Raises RankFunctionError (the rank's exception, rank and traceback) when ``fn`` raised,
    UsageError for bad arguments, SSHConnectError when a host fails the preflight,
    RanksFailedError or LaunchError when ranks cannot run, and ElasticJobFailed when an
    elastic job ends badly.
    """
    from gcurun.config.resolve import load_settings
    from gcurun.launch.remote.run_function import pack_call

    given = dict(locals())
    cli = settings_from(given)
    settings = load_settings(cli, profile, os.environ)
    try:
        payload = pack_call(functools.partial(fn, *args, **dict(kwargs or {})))
    except Exception as exc:
        raise UsageError(f"gcurun.run: the function or its arguments cannot be pickled "
                         f"({type(exc).__name__}: {exc}); pass picklable values") from None
    python = executable or settings.ssh.python or sys.executable
    if settings.elastic.enabled:
        return _run_elastic(payload, python, settings, bool(verbose))
    return _run(payload, python, settings, bool(verbose))


def settings_from(given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the caller gave, by dotted key. Raises UsageError for arguments that
    make no sense for gcurun or contradict each other."""
    cli: dict[str, Any] = elastic_settings(given)
    num_proc, np = given.get("num_proc"), given.get("np")
    if np is not None:
        warnings.warn("gcurun.run: np is deprecated, use num_proc", DeprecationWarning,
                      stacklevel=3)
        if num_proc is not None and num_proc != np:
            raise UsageError(f"gcurun.run: num_proc={num_proc} and np={np} disagree; "
                             "give num_proc only")
        num_proc = np
    if given.get("hosts") is not None and given.get("hostfile") is not None:
        raise UsageError("gcurun.run: give either hosts or hostfile, not both")
    if given.get("use_gloo") and given.get("use_mpi"):
        raise UsageError("gcurun.run: use_gloo and use_mpi exclude each other; give one")
    if given.get("mpi_args") is not None and not given.get("use_mpi"):
        raise UsageError("gcurun.run: mpi_args is for mpirun launches; pass use_mpi=True "
                         "too, or leave it out")
    if num_proc is not None:
        cli["np"] = num_proc
    if given.get("hosts") is not None:
        from gcurun.hosts.specs import parse_host_specs

        cli["hosts"] = parse_host_specs(str(given["hosts"]))
    if given.get("hostfile") is not None:
        cli["hostfile"] = str(given["hostfile"])
    if given.get("use_mpi"):
        cli["launcher"] = "mpi"
        if given.get("mpi_args") is not None:
            try:
                cli["mpi.args"] = tuple(shlex.split(given["mpi_args"]))
            except ValueError as exc:
                raise UsageError(f"gcurun.run: mpi_args={given['mpi_args']!r}: "
                                 f"{str(exc).lower()}; quote the arguments as a shell "
                                 "would") from None
    if given.get("network_interface") is not None:
        cli["mpi.network_interface"] = given["network_interface"]
    timeout = given.get("start_timeout")
    if timeout is not None:
        if not timeout > 0:
            raise UsageError(f"gcurun.run: start_timeout={timeout!r}: give seconds above 0")
        cli["ssh.timeout"] = float(timeout)
    for name, key in (("ssh_port", "ssh.port"), ("ssh_identity_file", "ssh.identity_file"),
                      ("output_filename", "output_dir")):
        if given.get(name) is not None:
            cli[key] = given[name]
    if given.get("env"):
        cli["env"] = {str(k): str(v) for k, v in dict(given["env"]).items()}
    return cli


def elastic_settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """The elastic settings among the caller's arguments, by dotted key. Raises
    UsageError for an old name that disagrees with the new one and for mpirun."""
    cli: dict[str, Any] = {}
    for old, new in OLD_NAMES.items():
        if given.get(old) is not None:
            if given.get(new) is not None and given[new] != given[old]:
                raise UsageError(f"gcurun.run: {new}={given[new]} and {old}={given[old]} "
                                 f"disagree; give {new} only")
            cli[ELASTIC[new]] = given[old]
    for name, key in ELASTIC.items():
        if given.get(name) is not None:
            value = given[name]
            cli[key] = tuple(value) if name == "cooldown_range" else value
    elastic = "elastic.min_np" in cli or "elastic.host_discovery_script" in cli
    if elastic and given.get("use_mpi"):
        raise UsageError("gcurun.run: an elastic job runs on gcurun's own launcher, not "
                         "mpirun; drop use_mpi or the elastic arguments")
    return cli


def _run(payload: bytes, python: str, settings: Settings, verbose: bool) -> list[Any]:
    from gcurun.launch.execute import execute, start_on_any_address
    from gcurun.launch.function_service import FunctionService
    from gcurun.launch.prepare import prepare
    from gcurun.launch.remote import run_function as rank_side
    from gcurun.launch.supervision.output import OutputSink, job_log_directory
    from gcurun.rendezvous.wire import new_secret

    with prepare([python, "-m", rank_side.__name__], settings) as job:
        plan, secret = job.plan, new_secret()
        for warning in job.warnings:
            log.warning("%s", warning)
        if verbose:
            sys.stderr.write(f"gcurun.run: {plan.size} ranks on "
                             f"{', '.join(h.name for h in plan.hosts)}, launcher "
                             f"{plan.launcher}\n")
        if all(r.is_local for r in plan.ranks):
            service = FunctionService(payload, plan.size, secret)
            service.start()
            addresses = f"127.0.0.1:{service.port}"
        else:
            service = start_on_any_address(
                lambda host: FunctionService(payload, plan.size, secret, host))
            addresses = job.kind.service_address(service.port)
        try:
            sink = OutputSink(sys.stdout, sys.stderr, show_ranks=settings.show_ranks,
                              output_dir=settings.output_dir and
                              job_log_directory(settings.output_dir))
            try:
                execute(job, sink, {rank_side.ADDRESS_VARIABLE: addresses,
                                    rank_side.SECRET_VARIABLE: secret.hex()})
            except RanksFailedError as exc:
                error = function_error(service, exc)
                if error is exc:
                    raise
                raise error from error.__cause__
            ranks = list(range(plan.size))
            if not service.wait_for(ranks, OUTCOME_WAIT_SECONDS):
                missing = [r for r in ranks if r not in service.outcomes]
                raise LaunchError(f"gcurun.run: ranks {missing} exited without returning "
                                  "a result (did the function end its process?)")
            return [pickle.loads(service.outcomes[r].data) for r in ranks]
        finally:
            service.close()


def _run_elastic(payload: bytes, python: str, settings: Settings,
                 verbose: bool) -> list[Any]:
    """Run the function as an elastic job; what each worker that finished returned, by
    worker id."""
    import io

    from gcurun.launch.elastic.config import elastic_config
    from gcurun.launch.elastic.runner import ElasticRunner, elastic_discovery, event_log_path
    from gcurun.launch.execute import start_on_any_address
    from gcurun.launch.function_service import FunctionService
    from gcurun.launch.remote import run_function as rank_side
    from gcurun.launch.remote.rank_env import ANY_ADDRESS
    from gcurun.launch.supervision.output import OutputSink, job_log_directory
    from gcurun.rendezvous.wire import new_secret

    config = elastic_config(settings)
    discover = elastic_discovery(settings, config)
    secret = new_secret()
    service = start_on_any_address(
        lambda host: FunctionService(payload, MAX_WORKERS, secret, host))
    try:
        output_dir = settings.output_dir and job_log_directory(settings.output_dir)
        settings = dataclasses.replace(settings, output_dir=output_dir or None)
        sink = OutputSink(sys.stdout, sys.stderr, show_ranks=settings.show_ranks,
                          output_dir=settings.output_dir)
        runner = ElasticRunner(
            [python, "-m", rank_side.__name__], settings, config, discover, sink,
            stderr=sys.stderr if verbose else io.StringIO(),
            liveness=settings.liveness_timeout, event_log=event_log_path(settings),
            extra_secrets={rank_side.ADDRESS_VARIABLE: f"{ANY_ADDRESS}:{service.port}",
                           rank_side.SECRET_VARIABLE: secret.hex()})
        runner.run()
        return [pickle.loads(outcome.data) for _, outcome in sorted(service.outcomes.items())
                if outcome.ok]
    finally:
        service.close()


def function_error(service: FunctionService, exc: RanksFailedError) -> RanksFailedError:
    """The root-cause rank's own exception when the function raised there, else ``exc``."""
    rank = exc.failure.rank
    service.wait_for([rank], OUTCOME_WAIT_SECONDS)
    outcome = service.outcomes.get(rank)
    if outcome is None or outcome.ok:
        return exc
    report = pickle.loads(outcome.data)
    error = RankFunctionError(exc.failure, report["type"], report["message"],
                              report["traceback"])
    if "exception" in report:
        error.__cause__ = pickle.loads(report["exception"])
    return error
