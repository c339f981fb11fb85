"""What the job commands share about the console and log files: whether to colour rank
prefixes, and where this job's logs go under ``--output-dir``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO


def job_logs(output_dir: str | None, stderr: TextIO) -> str | None:
    """This job's own log directory under ``--output-dir`` (said on ``stderr``), or None."""
    if output_dir is None:
        return None
    from gcurun.launch.supervision.output import job_log_directory

    directory = job_log_directory(output_dir)
    stderr.write(f"gcurun: logs of this job go to {directory}\n")
    return directory


def use_color(mode: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    """``--color``: always, never, or (auto) when ``stream`` is a terminal and NO_COLOR
    is not set."""
    if mode != "auto":
        return mode == "always"
    try:
        return stream.isatty() and "NO_COLOR" not in environ
    except (AttributeError, ValueError):
        return False
