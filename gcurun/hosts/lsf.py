"""IBM Spectrum LSF's view of a job, read from the variables and files it sets: pure parsing.

What LSF sets for a batch job, from IBM's manuals: IBM Spectrum LSF 10.1 "Environment
variables set for job execution"
(https://www.ibm.com/support/knowledgecenter/en/SSWRJV_10.1.0/lsf_config_ref/lsf_envars_job_exec.html),
IBM Platform LSF 9.1.3 "Administering IBM Platform LSF", section "How LSF runs parallel
jobs" (``LSB_MCPU_HOSTS="host_nameA num_processors1 host_nameB num_processors2..."``),
and Platform LSF 7.3 "Using Platform LSF HPC", section "Automatic generation of the job
host file":

* ``LSB_JOBID``: the job's id; its presence is how a process knows it runs under LSF
  (Horovod's ``LSFUtils.using_lsf`` tests the same variable).
* ``LSB_DJOB_HOSTFILE``: the path of the job's host file, one line per allocated slot,
  a host repeated once for each of its slots, the first execution host first.
* ``LSB_MCPU_HOSTS``: the same allocation in one line, ``hostA 4 hostB 2`` (a host, its
  number of slots, ...); ``LSB_HOSTS`` lists a host once per slot (``hostA hostA hostB``).

gcurun reads the host file when ``LSB_DJOB_HOSTFILE`` is set, else ``LSB_MCPU_HOSTS``
(one pair per host, short even for large jobs), else ``LSB_HOSTS``.

On clusters where ranks start with ``jsrun`` (IBM Job Step Manager, CSM clusters such as
Summit's), the job script runs on a launch node that LSF lists first with one slot
(``LSB_MCPU_HOSTS="batch1 1 a01n01 42 a01n02 42"``); it runs no ranks. Horovod asks CSM
for the compute nodes in that case (``horovod/runner/util/lsf.py``); gcurun leaves the
first host out when ``jsrun`` is on the PATH and more than one host is listed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec

LSF_SOURCE = "lsf"
_DIGITS = re.compile(r"[0-9]+")
_FIX = ("LSF sets this for a job started by bsub; run gcurun inside such a job, or unset "
        "LSB_JOBID and the LSB_* variables that did not come from LSF")


@dataclass(frozen=True)
class LSFJob:
    """An LSF job: its id, its hosts with their slots (LSF's order) and where they were
    read from (``LSB_DJOB_HOSTFILE``, ``LSB_MCPU_HOSTS`` or ``LSB_HOSTS``)."""

    job_id: str
    hosts: tuple[HostSpec, ...]
    origin: str
    launch_node: str | None = None

    @property
    def num_slots(self) -> int:
        return sum(host.slots for host in self.hosts)


def in_lsf_job(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is that of a process of an LSF job."""
    return bool(env.get("LSB_JOBID", "").strip())


def parse_repeated_hosts(text: str) -> tuple[HostSpec, ...]:
    """Hosts named once per slot (``LSB_DJOB_HOSTFILE``'s lines, ``LSB_HOSTS``' words),
    counted, in first-seen order."""
    slots: dict[str, int] = {}
    for name in text.split():
        slots[name] = slots.get(name, 0) + 1
    return tuple(HostSpec(name=host, slots=count) for host, count in slots.items())


def parse_mcpu_hosts(text: str) -> tuple[HostSpec, ...]:
    """``LSB_MCPU_HOSTS`` (``hostA 4 hostB 2``) as hosts with slots. Raises HostSpecError
    for an odd number of words or a count that is not a whole number 1 or more."""
    words = text.split()
    if len(words) % 2:
        raise HostSpecError(f"LSB_MCPU_HOSTS='{text}': expected pairs 'HOST SLOTS', got "
                            f"{len(words)} words; {_FIX}")
    slots: dict[str, int] = {}
    for host, count in zip(words[::2], words[1::2], strict=True):
        if not _DIGITS.fullmatch(count) or int(count) < 1:
            raise HostSpecError(f"LSB_MCPU_HOSTS='{text}': '{count}' after host '{host}' "
                                f"is not a slot count (a whole number 1 or more); {_FIX}")
        slots[host] = slots.get(host, 0) + int(count)
    return tuple(HostSpec(name=host, slots=count) for host, count in slots.items())


def parse_lsf(env: Mapping[str, str], hostfile_text: str | None, *,
              jsrun: bool = False) -> LSFJob:
    """The LSF job ``env`` describes. ``hostfile_text`` is the text of
    ``LSB_DJOB_HOSTFILE`` (None when the variable is unset). With ``jsrun`` (jsrun is
    installed), the first host, the launch node, is left out when more hosts follow.
    Raises HostSpecError when no variable names a host, or one is malformed."""
    job_id = env["LSB_JOBID"].strip()
    if hostfile_text is not None:
        origin = "LSB_DJOB_HOSTFILE"
        hosts = parse_repeated_hosts(hostfile_text)
    elif env.get("LSB_MCPU_HOSTS", "").strip():
        origin = "LSB_MCPU_HOSTS"
        hosts = parse_mcpu_hosts(env["LSB_MCPU_HOSTS"])
    elif env.get("LSB_HOSTS", "").strip():
        origin = "LSB_HOSTS"
        hosts = parse_repeated_hosts(env["LSB_HOSTS"])
    else:
        raise HostSpecError(f"LSB_JOBID='{job_id}' is set but none of LSB_DJOB_HOSTFILE, "
                            f"LSB_MCPU_HOSTS, LSB_HOSTS names a host; {_FIX}")
    if not hosts:
        raise HostSpecError(f"{origin} names no host; {_FIX}")
    if jsrun and len(hosts) > 1:
        return LSFJob(job_id, hosts[1:], origin, launch_node=hosts[0].name)
    return LSFJob(job_id, hosts, origin)
