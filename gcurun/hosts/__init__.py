"""Pure parsing of where ranks run: host specs, hostfiles, Slurm hostlists, topology, and
the allocations of batch systems (``allocation``: Slurm, Grid Engine, LSF, MPI Operator).

The parsers live in their own modules (``specs``, ``hostfile``, ``hostlist``, ``locality``);
they are named here so callers can write ``from gcurun.hosts import parse_host_specs``.
"""

from __future__ import annotations

import importlib
from typing import Any

# Name -> module holding it; loaded on first use so `import gcurun.hosts.api` stays cheap.
_EXPORTS = {
    "HostSpec": "api",
    "canonical_host": "item",
    "collapse_hostlist": "hostlist",
    "expand_hostlist": "hostlist",
    "is_local_host": "locality",
    "local_hosts": "locality",
    "parse_host_specs": "specs",
    "parse_hostfile": "hostfile",
    "probe_local_names": "locality",
    "read_hostfile": "hostfile",
    "total_slots": "specs",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gcurun.hosts' has no attribute '{name}'")
    return getattr(importlib.import_module(f"gcurun.hosts.{_EXPORTS[name]}"), name)


__all__ = [
    "HostSpec",
    "canonical_host",
    "collapse_hostlist",
    "expand_hostlist",
    "is_local_host",
    "local_hosts",
    "parse_host_specs",
    "parse_hostfile",
    "probe_local_names",
    "read_hostfile",
    "total_slots",
]
