"""Which devices each rank sees, through the command line: by default its host's devices
in local-rank order (index LOCAL_RANK is its own, as every Horovod recipe assumes), with
--device-isolation its own alone; the same under the local launcher and mpirun. And -x
of a variable gcurun sets for each rank is refused."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.helpers import RANKS, rank_reports, run_gcurun

CHECK = str(RANKS / "device_check.py")
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")


def rank_devices(*args: str, env=None) -> list[tuple[str, str, str]]:
    """(variable, GCURUN_DEVICE, FLAGS_selected_gpus) of each rank of a dry run."""
    res = run_gcurun("--dry-run", "--json", *args, "true", env=env or {})
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    envs = [{**plan["env"], **r["env"]} for r in plan["ranks"]]
    var = plan["device_variable"]
    return [(e[var], e["GCURUN_DEVICE"], e["FLAGS_selected_gpus"]) for e in envs]


def test_dry_run_json_gives_every_rank_its_hosts_devices():
    # The case: rank 1 used to get CUDA_VISIBLE_DEVICES=1 with LOCAL_RANK=1.
    assert rank_devices("-np", "2", "--accelerator", "cuda") == [("0,1", "0", "0"),
                                                                 ("0,1", "1", "1")]
    assert rank_devices("-H", "a:4,b:4", "-np", "6", "--accelerator", "cuda",
                        "--devices", "3,1,2,0") == \
        [("3,1,2,0", d, str(i)) for i, d in enumerate("3120")] + \
        [("3,1,2,0", d, str(i)) for i, d in enumerate("31")]


def test_dry_run_json_with_device_isolation():
    res = run_gcurun("--dry-run", "--json", "-np", "2", "--accelerator", "cuda",
                     "--device-isolation", "true")
    assert json.loads(res.stdout)["device_isolation"] is True
    assert rank_devices("-np", "2", "--accelerator", "cuda", "--device-isolation") == \
        [("0", "0", "0"), ("1", "1", "0")]
    # The environment's variable says the same; the command line wins over it.
    isolated = {"GCURUN_DEVICE_ISOLATION": "1"}
    assert rank_devices("-np", "2", "--accelerator", "cuda", env=isolated)[1] == \
        ("1", "1", "0")
    assert rank_devices("-np", "2", "--accelerator", "cuda", "--no-device-isolation",
                        env=isolated)[1] == ("0,1", "1", "1")


def test_a_profile_asks_for_isolation(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("device_isolation: true\n")
    assert rank_devices("--profile", str(profile), "-np", "2", "--accelerator", "cuda") == \
        [("0", "0", "0"), ("1", "1", "0")]


LAUNCHERS = [pytest.param((), id="local"),
             pytest.param(("--mpi",), id="mpi", marks=needs_mpirun)]


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("isolation", [False, True], ids=["host-devices", "isolation"])
def test_each_rank_of_a_real_job_finds_its_device_as_recipes_do(launcher, isolation):
    args = [*launcher, "-np", "3", "--accelerator", "cuda", "--devices", "5,3,4"]
    res = run_gcurun(*args, *(["--device-isolation"] if isolation else []),
                     sys.executable, CHECK, "CUDA_VISIBLE_DEVICES")
    assert res.returncode == 0, res.stderr
    reports = rank_reports(res.stdout)
    assert sorted(reports) == [0, 1, 2]
    for rank, own in zip(range(3), "534", strict=True):
        r = reports[rank]
        assert (r["local_rank"], r["own"], r["by_paddle"], r["by_jax"]) == (rank, own, own, own)
        if isolation:
            assert r["visible"] == own
        else:
            assert (r["visible"], r["by_local_rank"]) == ("5,3,4", own)


DEVICES_HOW = "choose devices with --devices (--device-isolation: each rank sees its own alone)"


@pytest.mark.parametrize(("args", "message"), [
    (("-x", "TOPS_VISIBLE_DEVICES=9"),
     f"-x TOPS_VISIBLE_DEVICES=9: gcurun sets TOPS_VISIBLE_DEVICES for each rank itself; "
     f"{DEVICES_HOW} and drop -x TOPS_VISIBLE_DEVICES"),
    (("-x", "RANK=5"),
     "-x RANK=5: gcurun sets RANK for each rank itself; place ranks with -np and -H (or "
     "--hostfile) and drop -x RANK"),
    (("-x", "FOO=1", "-x", "LOCAL_RANK=0"),
     "-x LOCAL_RANK=0: gcurun sets LOCAL_RANK for each rank itself; place ranks with -np and "
     "-H (or --hostfile) and drop -x LOCAL_RANK"),
    (("-x", "MASTER_PORT=1234"),
     "-x MASTER_PORT=1234: gcurun sets MASTER_PORT for each rank itself; give --master-port "
     "and drop -x MASTER_PORT"),
    (("-x", "GCURUN_DEVICE=3"),
     f"-x GCURUN_DEVICE=3: gcurun sets GCURUN_DEVICE for each rank itself; {DEVICES_HOW} and "
     "drop -x GCURUN_DEVICE"),
    (("--accelerator", "cuda", "-x", "CUDA_VISIBLE_DEVICES"),
     f"-x CUDA_VISIBLE_DEVICES: gcurun sets CUDA_VISIBLE_DEVICES for each rank itself; "
     f"{DEVICES_HOW} and drop -x CUDA_VISIBLE_DEVICES"),
])
def test_x_of_a_variable_gcurun_sets_for_each_rank_is_refused(args, message):
    res = run_gcurun(*args, "-np", "2", "true", env={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == f"gcurun: error: {message}\n"


def test_x_of_another_accelerators_variable_is_passed_on():
    res = run_gcurun("--dry-run", "--json", "-np", "2", "-x", "CUDA_VISIBLE_DEVICES=2",
                     "true")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["env"]["CUDA_VISIBLE_DEVICES"] == "2" and plan["env"]["TOPS_VISIBLE_DEVICES"] \
        == "0,1"


def test_a_profiles_env_naming_such_a_variable_is_refused(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("env:\n  FOO: 1\n  HOROVOD_RANK: 3\n")
    res = run_gcurun("--profile", str(profile), "-np", "2", "true")
    assert res.returncode == 2
    assert res.stderr == (f"gcurun: error: {profile}:3: env HOROVOD_RANK: gcurun sets "
                          "HOROVOD_RANK for each rank itself; place ranks with -np and -H (or "
                          "--hostfile) and remove HOROVOD_RANK from the profile's env\n")
