"""``gcurun bench allreduce``: the allreduce benchmark as a gcurun job."""

from __future__ import annotations

import sys

import click


@click.command("bench", context_settings={"ignore_unknown_options": True,
                                          "help_option_names": ["-h", "--help"]})
@click.argument("what", type=click.Choice(["allreduce"]))
@click.option("-np", "--num-proc", "np", type=int, default=2, show_default=True,
              help="Number of ranks on this host.")
@click.option("--mpi", "use_mpi", is_flag=True,
              help="Start the ranks with mpirun: gcurun's ring on the mpi and tcp backends "
                   "beside native MPI_Allreduce, with ratios.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(what: str, np: int, use_mpi: bool, args: tuple[str, ...]) -> int:
    """Print an nccl-tests-style table (size, time, algbw, busbw) of WHAT.

    ARGS go to the benchmark: --backends mpi,tcp --min-bytes 4096 --max-bytes 268435456
    --rounds 5 --seconds 0.05 --repeat 1.
    """
    from gcurun.cli.run import run

    launch = ["-np", str(np), "--oversubscribe", *(["--mpi"] if use_mpi else []),
              "--show-ranks", "0", sys.executable, "-m", "gcurun.runtime.bench", *args]
    result = run.main(launch, prog_name="gcurun", standalone_mode=False)
    return result if isinstance(result, int) else 0
