"""The launcher's environment on namespace hosts: what crosses over SSH and what stays.

The hosts' sshd sets PYTHONPATH to this checkout (SetEnv) so that gcurun imports there;
the module these jobs import sits in a folder only the launcher's PYTHONPATH names, and
the other variables are ones the hosts never set, so each one seen on a remote rank came
from the launcher.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.helpers import RANKS, ROOT, rank_reports, run_gcurun

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

REPORT = str(RANKS / "env_report.py")
NAMES = ("ENVFWD_CUSTOM", "ENVFWD_LISTED", "DISPLAY", "XAUTHORITY", "ENVFWD_SECRET_KEY",
         "HOROVOD_STALL_CHECK_DISABLE", "HOME")


def job(cluster, tmp_path, *options, env):
    """Rank 0 on this host, rank 1 on h1; each rank's report, by rank."""
    probe = tmp_path / "only-here"
    probe.mkdir(exist_ok=True)
    (probe / "envfwd_probe.py").write_text("VALUE = 'from the launcher'\n")
    env = {"PYTHONPATH": f"{ROOT}:{probe}", **env}
    res = run_gcurun("-H", "localhost:1,h1:1", "--ssh-config", str(cluster.ssh_config),
                     *options, sys.executable, REPORT, *NAMES, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    got = rank_reports(res.stdout)
    assert sorted(got) == [0, 1], res.stdout
    return got


def test_the_launchers_environment_reaches_a_remote_rank_less_this_hosts_own(
        netns_cluster, tmp_path):
    got = job(netns_cluster, tmp_path, env={
        "ENVFWD_CUSTOM": "c", "DISPLAY": ":99", "XAUTHORITY": "/nowhere/.Xauthority",
        "ENVFWD_SECRET_KEY": "k", "HOROVOD_STALL_CHECK_DISABLE": "1", "HOME": "/nowhere"})
    remote = got[1]
    assert remote["probe"] == "from the launcher"          # PYTHONPATH came along
    assert remote["env"]["ENVFWD_CUSTOM"] == "c"
    assert (remote["env"]["DISPLAY"], remote["env"]["XAUTHORITY"],
            remote["env"]["ENVFWD_SECRET_KEY"]) == (None, None, None)
    assert remote["env"]["HOME"] not in (None, "/nowhere")  # the host's login sets it
    for rank in (0, 1):                                     # a knob of the environment
        assert got[rank]["stall_check_warning_seconds"] == 0.0, rank


def test_listed_forwards_only_x_names_and_the_runtimes_variables(netns_cluster, tmp_path):
    got = job(netns_cluster, tmp_path, "--env-forward", "listed", "-x", "ENVFWD_LISTED",
              env={"ENVFWD_CUSTOM": "c", "ENVFWD_LISTED": "l",
                   "HOROVOD_STALL_CHECK_DISABLE": "1"})
    remote = got[1]
    assert remote["probe"].startswith("ModuleNotFoundError")   # the host's PYTHONPATH
    assert (remote["env"]["ENVFWD_CUSTOM"], remote["env"]["ENVFWD_LISTED"]) == (None, "l")
    assert remote["stall_check_warning_seconds"] == 0.0
    # This host's rank inherits the launcher's environment whole, as under mpirun.
    assert got[0]["env"]["ENVFWD_CUSTOM"] == "c" and got[0]["probe"] == "from the launcher"


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
def test_mpirun_exports_the_launchers_environment_by_name(netns_cluster, tmp_path):
    probe = tmp_path / "only-here"
    probe.mkdir()
    (probe / "envfwd_probe.py").write_text("VALUE = 'from the launcher'\n")
    res = run_gcurun(
        "--mpi", "-H", "h1:1,h2:1", "--ssh-config", str(netns_cluster.ssh_config),
        "--network-interface", f"{netns_cluster.subnet_prefix}.0/24",
        "--grace-seconds", "3", sys.executable, REPORT, *NAMES, timeout=120,
        env={"PYTHONPATH": f"{ROOT}:{probe}", "ENVFWD_CUSTOM": "c", "DISPLAY": ":99",
             "HOROVOD_STALL_CHECK_DISABLE": "1"})
    assert res.returncode == 0, res.stderr
    got = rank_reports(res.stdout)
    assert sorted(got) == [0, 1], res.stdout
    for rep in got.values():
        assert (rep["probe"], rep["env"]["ENVFWD_CUSTOM"], rep["env"]["DISPLAY"],
                rep["stall_check_warning_seconds"]) == ("from the launcher", "c", None, 0.0)
