"""Checks of the settings that name places this host writes: ``output_dir`` (the
launcher's per-rank logs) and ``runtime.timeline`` (written by the ranks that run here).

A bad one is refused before anything starts, quoting the value and where it came from
(``--output-dir``, ``GCURUN_OUTPUT_DIR``, ``profile.yaml:7: output_dir``). Nothing is
created: a directory that does not exist yet passes when its nearest existing parent takes
a new file (tried with a temporary file, since permission bits do not bind root).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable

from gcurun.config.api import Settings
from gcurun.config.schema import KEYS_BY_PATH
from gcurun.errors import UsageError


def given_as(settings: Settings, path: str, value: object) -> str:
    """How the user gave ``value`` for the dotted key ``path``: ``--output-dir 'x'``,
    ``GCURUN_OUTPUT_DIR='x'`` or ``FILE:LINE: output_dir 'x'``."""
    source = settings.sources.get(path, "default")
    key = KEYS_BY_PATH[path]
    if source.startswith("env:"):
        return f"{source[4:]}={str(value)!r}"
    if source.startswith("profile:"):
        return f"{source[len('profile:'):]}: {path} '{value}'"
    return f"{key.option} '{value}'"


def check_output_dir(settings: Settings) -> None:
    """Raise UsageError when ``settings.output_dir`` cannot be a directory of log files."""
    if settings.output_dir is None:
        return
    problem = directory_problem(os.path.expanduser(settings.output_dir))
    if problem:
        raise UsageError(f"{given_as(settings, 'output_dir', settings.output_dir)}: "
                         f"{problem}; give a directory this host can write")


def check_workdir(settings: Settings, workdir: str, local_ranks: bool) -> None:
    """Raise UsageError when ranks of this host (``local_ranks``) would start in a
    ``workdir`` that is not a directory here. Remote hosts' bootstraps check it there when
    the job starts, before any rank runs."""
    if not local_ranks or settings.workdir is None or os.path.isdir(workdir):
        return
    problem = "not a directory" if os.path.exists(workdir) else "no such directory"
    raise UsageError(f"{given_as(settings, 'workdir', settings.workdir)}: {problem} on "
                     "this host, where ranks start; create it or give an existing directory")


def check_timeline(settings: Settings, workdir: str, ranks: Iterable[int]) -> None:
    """Raise UsageError when a rank of ``ranks`` (those running on this host) would write
    the timeline where it cannot: rank 0, or every rank when the path holds ``{rank}``."""
    template = settings.runtime.timeline
    if not template:
        return
    writers = [r for r in ranks if "{rank}" in template or r == 0]
    if not writers or not (os.path.isabs(template) or os.path.isdir(workdir)):
        return  # a missing working directory is reported when the ranks start
    path = os.path.join(workdir, template.replace("{rank}", str(writers[0])))
    problem = file_problem(path)
    if problem:
        raise UsageError(f"{given_as(settings, 'runtime.timeline', template)}: {problem}; "
                         "give a file path in a directory the ranks can write")


def directory_problem(path: str) -> str | None:
    """Why ``path`` cannot be used (or made) as a writable directory, or None."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            return f"'{path}' exists and is not a directory"
        error = _write_error(path)
        return None if error is None else f"cannot write in it ({error})"
    parent = _nearest_existing(path)
    if not os.path.isdir(parent):
        return f"'{parent}' is not a directory"
    error = _write_error(parent)
    return None if error is None else f"cannot create it in '{parent}' ({error})"


def file_problem(path: str) -> str | None:
    """Why a file cannot be created or rewritten at ``path``, or None."""
    if os.path.isdir(path):
        return f"'{path}' is a directory"
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        return f"the directory '{parent}' does not exist"
    error = _write_error(parent)
    return None if error is None else f"cannot write in '{parent}' ({error})"


def _nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def _write_error(directory: str) -> str | None:
    """Why no file can be created in ``directory`` (the system's words), or None."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        return str(exc.strerror or exc)
    return None
