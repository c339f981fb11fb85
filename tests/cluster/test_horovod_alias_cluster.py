"""``--horovod-alias`` over SSH: each remote rank's bootstrap puts its own host's folder of
Horovod aliases first on the rank's PYTHONPATH, whatever the login environment holds."""

from __future__ import annotations

import sys

import pytest

from gcurun.launch.remote.horovod_alias import ALIAS_FOLDER
from tests.helpers import run_gcurun

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

CODE = ("import horovod, os; print(horovod.__version__, horovod.__file__, "
        "os.environ['GCURUN_HOROVOD_ALIAS'])")


def test_remote_ranks_import_gcuruns_horovod(netns_cluster) -> None:
    done = run_gcurun("-np", "2", "-H", "h1:1,h2:1", "--ssh-config",
                      str(netns_cluster.ssh_config), "--horovod-alias", "on",
                      sys.executable, "-c", CODE, timeout=120)
    assert done.returncode == 0, done.stderr
    where = f"{ALIAS_FOLDER}/horovod/__init__.py"
    assert sorted(done.stdout.splitlines()) == [f"[0] 0.28.1 {where} on",
                                                f"[1] 0.28.1 {where} on"]


def test_without_the_opt_in_remote_ranks_have_no_horovod(netns_cluster) -> None:
    done = run_gcurun("-np", "2", "-H", "h1:1,h2:1", "--ssh-config",
                      str(netns_cluster.ssh_config), sys.executable, "-c", "import horovod",
                      timeout=120)
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'horovod'" in done.stderr
