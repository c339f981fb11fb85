"""Where an MPI installation keeps what a job needs: the PATH mpirun runs with and the
libmpi mpi4py on the ranks is told to load (a fake installation tree, no MPI run)."""

from __future__ import annotations

import os

from gcurun.launch.mpi.command import MPIFlavour
from gcurun.launch.mpi.install import mpi4py_library, program_environment

MPICH = MPIFlavour("mpich", "5.0.2")
INTEL = MPIFlavour("intel", "2021.18.1")


def installation(root, program="mpiexec", library=True):
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    path = root / "bin" / program
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    if library:
        (root / "lib" / "libmpi.so.12").write_text("")
    return str(path)


def test_a_path_puts_its_folder_first_on_path(tmp_path):
    mpirun = installation(tmp_path / "impi", "mpirun")
    assert program_environment(mpirun, {"PATH": "/usr/bin"}) == {
        "PATH": f"{tmp_path}/impi/bin:/usr/bin"}
    assert program_environment(mpirun, {"PATH": f"{tmp_path}/impi/bin:/usr/bin"}) == {}
    assert program_environment("mpirun", {"PATH": "/usr/bin"}) == {}


def test_hydra_flavours_name_their_own_libmpi(tmp_path):
    mpirun = installation(tmp_path / "mpich")
    assert mpi4py_library(mpirun, MPICH, {}) == f"{tmp_path}/mpich/lib/libmpi.so.12"
    assert mpi4py_library(mpirun, INTEL, {}) == f"{tmp_path}/mpich/lib/libmpi.so.12"


def test_a_bare_name_is_found_on_path_and_a_link_followed(tmp_path):
    installation(tmp_path / "mpich")
    (tmp_path / "links").mkdir()
    os.symlink(tmp_path / "mpich" / "bin" / "mpiexec", tmp_path / "links" / "mpiexec")
    assert mpi4py_library("mpiexec", MPICH, {"PATH": f"{tmp_path}/links"}) == \
        f"{tmp_path}/mpich/lib/libmpi.so.12"


def test_nothing_for_open_mpi_a_users_choice_or_a_system_library(tmp_path):
    mpirun = installation(tmp_path / "mpich")
    assert mpi4py_library(mpirun, MPIFlavour("openmpi", "5.0.11"), {}) is None
    assert mpi4py_library(mpirun, MPICH, {"MPI4PY_LIBMPI": "/x/libmpi.so"}) is None
    bare = installation(tmp_path / "system", library=False)
    assert mpi4py_library(bare, MPICH, {}) is None
    assert mpi4py_library("no-such-mpiexec", MPICH, {"PATH": str(tmp_path)}) is None
