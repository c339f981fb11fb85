"""The run command's work: settings, then the launch layer's prepare -> plan -> execute,
then a dry-run listing or a running job. The only place that prints what they return."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from gcurun.cli.console import job_logs, use_color
from gcurun.cli.elastic import launch_elastic
from gcurun.config.api import Settings
from gcurun.errors import JobInterrupted, UsageError
from gcurun.launch.api import STOP_SIGNALS


def launch(command: Sequence[str], cli: Mapping[str, Any], params: Mapping[str, Any],
           environ: Mapping[str, str], *, stdout: TextIO, stderr: TextIO) -> int:
    """Resolve settings, prepare the job, then print it (--dry-run) or run it. SIGINT,
    SIGTERM or SIGHUP before the ranks run (during the SSH preflight, say) ends it as one
    during the run does: JobInterrupted, exit 128+N."""
    with interrupts_raise():
        return _launch(command, cli, params, environ, stdout=stdout, stderr=stderr)


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP raise JobInterrupted in the main thread
    (the run itself turns them into events of its own while it supervises the ranks)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, _frame: object) -> None:
        raise JobInterrupted(signum, signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, interrupted)
                for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _launch(command: Sequence[str], cli: Mapping[str, Any], params: Mapping[str, Any],
            environ: Mapping[str, str], *, stdout: TextIO, stderr: TextIO) -> int:
    from gcurun.cli.sshlog import ssh_reports
    from gcurun.config.resolve import load_settings
    from gcurun.launch.prepare import prepare

    settings = load_settings(cli, params.get("profile"), environ)
    dry_run = bool(params.get("dry_run"))
    check_flags(params, settings)
    if settings.elastic.enabled:
        return launch_elastic(command, settings, params, environ, stdout=stdout,
                              stderr=stderr)
    with ssh_reports(stderr):
        job = prepare(command, settings, environ=environ,
                      connect=not dry_run or bool(params.get("preflight")),
                      master_addr=settings.master_addr, master_port=settings.master_port)
    with job:
        check_show_ranks(settings.show_ranks, job.plan.size)
        for warning in job.warnings:
            stderr.write(f"gcurun: warning: {warning}\n")
        if settings.report_bindings and not params.get("as_json"):
            from gcurun.launch.planning.binding import format_binding_table

            stderr.write(format_binding_table(job.plan, unbound=job.kind.unbound_text(job))
                         + "\n")
        if dry_run:
            from gcurun.cli.render import print_plan

            preview = job.kind.preview(job)
            print_plan(job.plan, settings, as_json=bool(params.get("as_json")), out=stdout,
                       mpirun=preview.mpirun, srun=preview.srun)
            return 0
        from gcurun.launch.execute import execute
        from gcurun.launch.supervision.output import OutputSink

        sink = OutputSink(stdout, stderr, color=use_color(params.get("color", "auto"), stdout,
                                                          environ),
                          show_ranks=settings.show_ranks,
                          output_dir=job_logs(settings.output_dir, stderr),
                          timestamps=bool(params.get("prefix_output_with_timestamp")))
        from gcurun.cli.sshlog import warnings_of

        with ssh_reports(stderr), warnings_of("gcurun.rendezvous", stderr):
            execute(job, sink)
    return 0


def check_flags(params: Mapping[str, Any], settings: Settings) -> None:
    """Refuse flags that go only with --dry-run, and a preflight of an mpirun launch."""
    from gcurun.launch.kinds import launcher_kind

    for flag, name in (("as_json", "--json"), ("preflight", "--preflight")):
        if params.get(flag) and not params.get("dry_run"):
            raise UsageError(f"{name} only goes with --dry-run; add --dry-run")
    if params.get("preflight") and settings.launcher is not None and \
            not launcher_kind(settings.launcher).accepts_preflight_option:
        raise UsageError("--preflight checks the hosts gcurun reaches over SSH, but mpirun "
                         "reaches its hosts itself; drop --preflight or --mpi")


def check_show_ranks(ranks: tuple[int, ...] | None, size: int) -> None:
    """Refuse --show-ranks naming ranks the job does not have: it would show nothing of
    them without a word."""
    missing = sorted({r for r in ranks or () if r >= size})
    if missing:
        listed = ",".join(map(str, missing))
        raise UsageError(f"--show-ranks: rank{'s' if len(missing) > 1 else ''} {listed} "
                         f"{'are' if len(missing) > 1 else 'is'} not in this job of {size} "
                         f"rank{'s' if size > 1 else ''} (0-{size - 1}); give ranks below "
                         f"{size}")


