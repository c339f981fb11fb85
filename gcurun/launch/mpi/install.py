"""Where an MPI installation keeps what a job needs besides its mpirun.

MPICH and Intel MPI (both Hydra) install ``bin/mpiexec`` (Intel's ``bin/mpirun`` is a
shell script that runs ``mpiexec.hydra`` from PATH) beside ``lib/libmpi.so.12``. gcurun
runs a chosen mpirun with its own folder first on PATH, so the script finds its
``mpiexec.hydra`` and Hydra its proxies, and tells mpi4py which library to load:
mpi4py 4's binary wheels carry one extension per MPI ABI (Open MPI's and MPICH's, which
Intel MPI shares) and pick one by the libmpi they find first, or the one named by
``MPI4PY_LIBMPI``. Without it, an mpi4py whose own prefix holds Open MPI's library joins
no MPICH world: every rank would see a world of one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from gcurun.launch.mpi.command import MPIFlavour

LIBMPI_VARIABLE = "MPI4PY_LIBMPI"
# MPICH and Intel MPI share this soname (the MPICH ABI); Open MPI's is libmpi.so.40.
HYDRA_LIBMPI = "libmpi.so.12"


def program_path(mpirun: str, environ: Mapping[str, str]) -> str | None:
    """The file ``mpirun`` names (a path as it is, a bare name through ``environ``'s
    PATH), or None when there is none."""
    if os.sep in mpirun:
        return mpirun if os.path.isfile(mpirun) else None
    return shutil.which(mpirun, path=environ.get("PATH", os.defpath))


def program_environment(mpirun: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What to add to mpirun's environment: PATH with the folder of ``mpirun`` first when
    it is given as a path (Intel MPI's mpirun runs ``mpiexec.hydra`` from PATH); nothing
    for a bare name, which PATH found already."""
    if os.sep not in mpirun:
        return {}
    folder = os.path.dirname(os.path.abspath(mpirun))
    path = environ.get("PATH", os.defpath)
    if path.split(os.pathsep)[0] == folder:
        return {}
    return {"PATH": folder + os.pathsep + path}


def mpi4py_library(mpirun: str, flavour: MPIFlavour,
                   environ: Mapping[str, str]) -> str | None:
    """The libmpi that mpi4py on the ranks should load for ``flavour`` (``MPI4PY_LIBMPI``):
    ``lib/libmpi.so.12`` of the installation ``mpirun`` belongs to (its real file's
    folder's sibling), for MPICH and Intel MPI; None for Open MPI (whose library is the
    one mpi4py finds beside its own Python), when the user set the variable already, or
    when the installation has no such library (a system MPI whose library the loader
    finds on its own)."""
    if flavour.kind == "openmpi" or LIBMPI_VARIABLE in environ:
        return None
    path = program_path(mpirun, environ)
    if path is None:
        return None
    for program in dict.fromkeys((path, os.path.realpath(path))):
        prefix = os.path.dirname(os.path.dirname(os.path.abspath(program)))
        library = os.path.join(prefix, "lib", HYDRA_LIBMPI)
        if os.path.isfile(library):
            return library
    return None
