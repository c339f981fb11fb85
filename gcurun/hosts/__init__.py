"""Pure parsing of where ranks run: host specs, hostfiles, Slurm hostlists, topology.

The parsers live in their own modules (``specs``, ``hostfile``, ``hostlist``, ``local``);
they are named here so callers can write ``from gcurun.hosts import parse_host_specs``.
"""

from __future__ import annotations

from gcurun.hosts.api import HostSpec
from gcurun.hosts.hostfile import parse_hostfile, read_hostfile
from gcurun.hosts.hostlist import collapse_hostlist, expand_hostlist
from gcurun.hosts.item import canonical_host
from gcurun.hosts.local import is_local_host, local_hosts, probe_local_names
from gcurun.hosts.specs import parse_host_specs, total_slots

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
