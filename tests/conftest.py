"""Suite-wide setup: every process the tests start can import this checkout's gcurun,
whether or not it is pip-installed (ranks, the MPI shim and the SSH bootstrap run
``python -m gcurun...``); and the suite runs the same inside a Slurm allocation as
outside one (gcurun reads an allocation's hosts from SLURM_* variables: the tests that
need an allocation make their own)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parent.parent)
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if ROOT not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *_paths])
for _name in [name for name in os.environ if name.startswith("SLURM_")]:
    del os.environ[_name]


# Markers of long runs that only run when the -m expression names them (pytest -m stress,
# -m chaos, -m long); the default run has a short version of each (for "long": the same
# case on the other backend, or at a smaller size).
OPT_IN_MARKERS = ("stress", "chaos", "long")


# Folders whose tests share state of the whole machine (namespace hosts and their daemons,
# scans of every process, one Ray or Spark cluster per session): under pytest-xdist
# (-n N --dist loadgroup) each folder's tests run one after another in one worker, beside
# the rest of the suite.
SERIAL_FOLDERS = ("cluster", "ray", "spark")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    expression = config.getoption("markexpr") or ""
    kept, dropped = [], []
    for item in items:
        opt_in = [m for m in OPT_IN_MARKERS if item.get_closest_marker(m)]
        (dropped if opt_in and not any(m in expression for m in opt_in) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    tests = Path(__file__).resolve().parent
    for item in items:
        parts = Path(str(item.path)).resolve().relative_to(tests).parts
        if len(parts) > 1 and parts[0] in SERIAL_FOLDERS:
            item.add_marker(pytest.mark.xdist_group(parts[0]))
