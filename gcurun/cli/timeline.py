"""``gcurun timeline summary FILE``: where an engine trace's time went."""

from __future__ import annotations

import click


@click.group("timeline", context_settings={"help_option_names": ["-h", "--help"]})
def timeline() -> None:
    """Read traces written by the runtime engine (--timeline-filename, GCURUN_TIMELINE_FILENAME)."""


@timeline.command("summary")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="How many of the costliest tensors to list.")
def summary(path: str, top: int) -> None:
    """Time per activity (negotiation, queue, copies, ring phases) and the costliest
    tensors of the trace at PATH."""
    from gcurun.runtime.timeline_summary import format_summary, read_trace, summarize

    click.echo(format_summary(summarize(read_trace(path)), top))
