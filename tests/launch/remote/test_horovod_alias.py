"""``gcurun --horovod-alias``: the rank-side programs put gcurun's ``horovod`` package first
on a rank's PYTHONPATH, and that package resolves Horovod's module names to gcurun's
modules, handing over to a real Horovod unless forced."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcurun.launch.remote.horovod_alias import ALIAS_FOLDER, alias_environment
from gcurun.launch.remote.mpi_shim import shim_environment
from gcurun.launch.remote.spawning import merged_environment
from tests.helpers import ROOT, skip_without

OMPI = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}


def test_the_folder_is_gcuruns_own_and_holds_a_horovod_package() -> None:
    assert Path(ALIAS_FOLDER) == ROOT / "gcurun" / "_horovod_alias"
    assert (Path(ALIAS_FOLDER) / "horovod" / "__init__.py").is_file()


@pytest.mark.parametrize("mode", ["on", "force", " ON "])
def test_on_and_force_put_the_folder_first_once(mode: str) -> None:
    env = {"GCURUN_HOROVOD_ALIAS": mode, "PYTHONPATH": f"/a{os.pathsep}/f{os.pathsep}/b"}
    assert alias_environment(env, "/f") == {"PYTHONPATH": os.pathsep.join(["/f", "/a", "/b"])}
    assert alias_environment({"GCURUN_HOROVOD_ALIAS": mode}, "/f") == {"PYTHONPATH": "/f"}
    assert alias_environment({"GCURUN_HOROVOD_ALIAS": mode, "PYTHONPATH": "/f"}, "/f") == {}


@pytest.mark.parametrize("env", [{}, {"GCURUN_HOROVOD_ALIAS": "off"},
                                 {"GCURUN_HOROVOD_ALIAS": "off", "PYTHONPATH": "/a"}])
def test_off_or_unset_leaves_pythonpath_alone(env: dict[str, str]) -> None:
    assert alias_environment(env, "/f") == {}


def test_local_and_ssh_ranks_get_the_folder_from_their_bootstrap() -> None:
    env = merged_environment({"PYTHONPATH": "/login"}, {"GCURUN_RANK": "0"}, {},
                             {"GCURUN_HOROVOD_ALIAS": "on"})
    assert env["PYTHONPATH"] == os.pathsep.join([ALIAS_FOLDER, "/login"])
    plain = merged_environment({"PYTHONPATH": "/login"}, {"GCURUN_RANK": "0"}, {}, {})
    assert plain["PYTHONPATH"] == "/login"


def test_mpirun_and_srun_ranks_get_the_folder_from_the_shim() -> None:
    out = shim_environment({**OMPI, "GCURUN_HOROVOD_ALIAS": "force", "PYTHONPATH": "/job"},
                           "node")
    assert out["PYTHONPATH"] == os.pathsep.join([ALIAS_FOLDER, "/job"])
    assert "PYTHONPATH" not in shim_environment({**OMPI, "PYTHONPATH": "/job"}, "node")


def python(code: str, *, mode: str | None = "on", before: str = "",
           cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter with the alias folder first on its path."""
    env = {k: v for k, v in os.environ.items() if k != "GCURUN_HOROVOD_ALIAS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ALIAS_FOLDER, before, str(ROOT)) if p)
    if mode is not None:
        env["GCURUN_HOROVOD_ALIAS"] = mode
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_horovod_names_are_gcuruns_modules_themselves() -> None:
    skip_without("torch", "pip install torch==2.13.0")
    done = python(
        "import horovod, horovod.torch as hvd, gcurun.runtime.torch as g\n"
        "import horovod.torch.elastic, gcurun.runtime.torch.elastic as ge, gcurun\n"
        "from horovod.runner import run\n"
        "assert hvd is g and horovod.torch is g and horovod.torch.elastic is ge\n"
        "assert horovod.run is gcurun.run and run is gcurun.run\n"
        "print(horovod.__version__)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0.28.1\n"


def test_a_horovod_module_gcurun_has_not_is_named_with_what_the_alias_covers() -> None:
    done = python("import horovod.spark")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "ModuleNotFoundError: No module named 'horovod.spark': gcurun's Horovod alias covers "
        "horovod.keras, horovod.runner, horovod.tensorflow, horovod.tensorflow.keras, "
        "horovod.torch and their submodules that gcurun has")


@pytest.fixture
def real_horovod(tmp_path: Path) -> Path:
    """A folder holding an installed 'Horovod' (its torch module says which it is)."""
    package = tmp_path / "site" / "horovod"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = 'real'\n")
    (package / "torch.py").write_text("WHICH = 'real'\n")
    return package.parent


def test_a_real_horovod_wins_with_a_warning(real_horovod: Path) -> None:
    done = python("import horovod, horovod.torch\nprint(horovod.__version__, "
                  "horovod.torch.WHICH)", before=str(real_horovod))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "real real\n"
    assert (f"GCURUN_HOROVOD_ALIAS=on: Horovod is installed "
            f"({real_horovod / 'horovod' / '__init__.py'}), so 'import horovod' imports it; "
            "set GCURUN_HOROVOD_ALIAS=force (gcurun --horovod-alias force) for gcurun's "
            "bindings") in done.stderr


def test_force_shadows_a_real_horovod(real_horovod: Path) -> None:
    skip_without("torch", "pip install torch==2.13.0")
    done = python("import horovod, horovod.torch, gcurun.runtime.torch as g\n"
                  "assert horovod.torch is g\nprint(horovod.__version__)",
                  mode="force", before=str(real_horovod))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0.28.1\n" and "Warning" not in done.stderr
