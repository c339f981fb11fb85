"""Grid Engine's view of a parallel-environment job, read from what it sets: pure parsing.

A job submitted with ``qsub -pe NAME N`` runs its script on the first (master) host with
``JOB_ID``, ``NSLOTS`` (the slots granted, N or a number in N's range) and
``PE_HOSTFILE``, the path of a file with one line per granted host::

    node01.cluster 4 all.q@node01.cluster UNDEFINED
    node02.cluster 2 all.q@node02.cluster UNDEFINED

(host, slots on it, the queue instance, a processor range; Grid Engine 8.1.9's
``sge_pe(5)`` and ``qsub(1)``: "PE_HOSTFILE ... contains the definition of the virtual
parallel machine assigned to the job"). Only the first two fields matter here; the slot
counts add up to ``NSLOTS``. A job without a parallel environment has no
``PE_HOSTFILE`` and is no allocation of hosts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec

GRIDENGINE_SOURCE = "gridengine"
_DIGITS = re.compile(r"[0-9]+")
_FIX = ("Grid Engine writes this file for a job submitted with qsub -pe NAME N; run "
        "gcurun inside such a job, or unset PE_HOSTFILE if it did not come from Grid Engine")


@dataclass(frozen=True)
class GridEngineJob:
    """A Grid Engine parallel job: its id, its hosts with their granted slots (in the
    order of ``PE_HOSTFILE``, the master host first) and ``NSLOTS``."""

    job_id: str
    hosts: tuple[HostSpec, ...]
    num_slots: int
    hostfile: str


def in_pe_job(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is that of a Grid Engine job with a parallel environment."""
    return bool(env.get("PE_HOSTFILE", "").strip()) and bool(env.get("JOB_ID", "").strip())


def parse_pe_hostfile(text: str, source: str = "PE_HOSTFILE") -> tuple[HostSpec, ...]:
    """The hosts of a ``PE_HOSTFILE`` with their slots, in order. A host listed on two
    lines (two queues of one host) gets the sum of its slots. Raises HostSpecError naming
    ``source`` and the line for a line that is not ``HOST SLOTS ...``, and for a file
    without hosts."""
    slots: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        fields = raw.split()
        if not fields:
            continue
        if len(fields) < 2 or not _DIGITS.fullmatch(fields[1]) or int(fields[1]) < 1:
            raise HostSpecError(f"{source} line {number} '{raw.strip()}': expected 'HOST "
                                f"SLOTS QUEUE PROCESSORS' with SLOTS a whole number 1 or "
                                f"more; {_FIX}")
        slots[fields[0]] = slots.get(fields[0], 0) + int(fields[1])
    if not slots:
        raise HostSpecError(f"{source} lists no host; {_FIX}")
    return tuple(HostSpec(name=host, slots=count) for host, count in slots.items())


def parse_gridengine(env: Mapping[str, str], hostfile_text: str) -> GridEngineJob:
    """The job ``env`` describes, given the text of its ``PE_HOSTFILE``. Raises
    HostSpecError when ``NSLOTS`` is not a number or differs from the file's slots."""
    path = env["PE_HOSTFILE"].strip()
    hosts = parse_pe_hostfile(hostfile_text, f"PE_HOSTFILE '{path}'")
    total = sum(host.slots for host in hosts)
    text = env.get("NSLOTS", "").strip()
    if text:
        if not _DIGITS.fullmatch(text):
            raise HostSpecError(f"NSLOTS='{env['NSLOTS']}' is not a whole number; {_FIX}")
        if int(text) != total:
            raise HostSpecError(f"NSLOTS='{text}' but PE_HOSTFILE '{path}' grants {total} "
                                f"slots; {_FIX}")
    return GridEngineJob(env["JOB_ID"].strip(), hosts, total, path)
