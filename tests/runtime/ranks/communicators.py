"""Rank script (under mpirun): the communicators' own allreduce on both transports,
called again and again with small and large tensors, as benchmarks/allreduce.py calls
it (a script's collectives go through the engine instead). Two ranks take the quick
ways (``Communicator._pair_allreduce``) from a name's second call on. Prints one line
per rank: the checks passed on each backend, the names that had a quick way, and
whether a tensor called in place again and again kept its exchanges prepared."""

from __future__ import annotations

from gcurun.runtime.bench import open_job
from gcurun.runtime.env import read_runtime_env
from tests.runtime.adapter import CommunicatorAPI
from tests.runtime.checks import Checks


def main() -> None:
    job = open_job(read_runtime_env(), ["mpi", "tcp"])
    done = []
    for backend, comm in job.communicators.items():
        checks = Checks(CommunicatorAPI(comm))
        checks.repeated()
        count = checks.repeated_large()
        quick = ",".join(sorted(name for name in comm._inline if name.startswith("big.")))
        held = "one tensor held" if comm._held[0] is not None else "none held"
        done.append(f"{backend} {count} checks, quick [{quick}], {held}")
    for close in job.closers:
        close()
    print(f"rank {job.rank} of {job.size} communicators ok: {'; '.join(done)}", flush=True)


if __name__ == "__main__":
    main()
