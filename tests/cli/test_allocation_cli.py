"""`gcurun --dry-run` inside a Grid Engine job, an LSF job and an MPI Operator launcher
pod, their variables and files written as each one writes them: the hosts come from the
allocation without a flag, and the "from" column says which."""

from __future__ import annotations

import pytest

from tests.helpers import run_gcurun


def _rows(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in stdout.splitlines() if line.strip()}


@pytest.mark.parametrize("kind", ["gridengine", "lsf", "mpi-operator"])
def test_dry_run_names_the_allocation_it_took_the_hosts_from(tmp_path, kind):
    hostfile = tmp_path / "hostfile"
    if kind == "gridengine":
        hostfile.write_text("g1 2 all.q@g1 UNDEFINED\ng2 1 all.q@g2 UNDEFINED\n")
        env = {"JOB_ID": "7", "NSLOTS": "3", "PE_HOSTFILE": str(hostfile)}
        hosts, source = "g1:2,g2:1", "gridengine:PE_HOSTFILE"
    elif kind == "lsf":
        hostfile.write_text("g1\ng1\ng2\n")
        env = {"LSB_JOBID": "7", "LSB_DJOB_HOSTFILE": str(hostfile)}
        hosts, source = "g1:2,g2:1", "lsf:LSB_DJOB_HOSTFILE"
    else:
        hostfile.write_text("pi-worker-0.pi.default.svc slots=2\n"
                            "pi-worker-1.pi.default.svc slots=1\n")
        env = {"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_default_hostfile": str(hostfile)}
        hosts = "pi-worker-0.pi.default.svc:2,pi-worker-1.pi.default.svc:1"
        source = f"mpi-operator:{hostfile}"
    res = run_gcurun("--dry-run", "--color", "never", "python", "train.py", env=env)
    assert res.returncode == 0, res.stderr
    rows = _rows(res.stdout)
    assert rows["np"] == ["3", source]
    assert rows["hosts"] == [hosts, source]
    assert res.stdout.startswith("launcher ssh, 3 ranks on 2 host(s)")
    if kind == "mpi-operator":
        assert rows["ssh.host_key_policy"] == ["accept-new", "mpi-operator"]


def test_a_pe_hostfile_that_cannot_be_read_is_a_usage_error(tmp_path):
    res = run_gcurun("--dry-run", "true", env={"JOB_ID": "7",
                                                "PE_HOSTFILE": str(tmp_path / "gone")})
    assert res.returncode == 2
    assert res.stderr == (f"gcurun: error: PE_HOSTFILE '{tmp_path / 'gone'}' cannot be read: "
                          "No such file or directory; run gcurun on the job's master host, "
                          "where Grid Engine writes it\n")
