"""The gcurun command end to end: real processes started through the CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.helpers import RANKS, ROOT, gcurun_cmd, read_ranks, run_gcurun, survivors, wait_for

WORKER = str(RANKS / "worker.py")


def test_bad_host_spec_exits_2_with_the_rule_and_fix():
    res = run_gcurun("-H", "node[3-1]:8", "python", "x.py")
    assert res.returncode == 2
    assert res.stderr == ("gcurun: error: host spec 'node[3-1]:8': range 3-1 runs backwards; "
                          "write node[1-3]\n")


def test_too_many_ranks_exits_2():
    res = run_gcurun("-np", "3", "-H", "localhost:2", "python", "x.py")
    assert res.returncode == 2
    assert "-np 3 asks for more ranks than the 2 slots" in res.stderr


def test_unset_forwarded_variable_is_an_error():
    import os

    env = {k: v for k, v in os.environ.items() if k != "GCURUN_TEST_UNSET_VAR"}
    res = subprocess.run(gcurun_cmd("-x", "GCURUN_TEST_UNSET_VAR", "python", "x.py"),
                         capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**env, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2
    assert res.stderr == ("gcurun: error: -x GCURUN_TEST_UNSET_VAR: GCURUN_TEST_UNSET_VAR is "
                          "not set in this environment; set it first or write "
                          "-x GCURUN_TEST_UNSET_VAR=VALUE\n")


def test_json_only_with_dry_run():
    res = run_gcurun("--json", "true")
    assert res.returncode == 2
    assert res.stderr == "gcurun: error: --json only goes with --dry-run; add --dry-run\n"


def test_preflight_only_with_dry_run_and_not_for_mpirun():
    res = run_gcurun("--preflight", "true")
    assert res.returncode == 2
    assert res.stderr == "gcurun: error: --preflight only goes with --dry-run; add --dry-run\n"
    res = run_gcurun("--dry-run", "--preflight", "--mpi", "true")
    assert res.returncode == 2
    assert res.stderr == ("gcurun: error: --preflight checks the hosts gcurun reaches over "
                          "SSH, but mpirun reaches its hosts itself; drop --preflight or "
                          "--mpi\n")


def test_dry_run_with_preflight_of_local_ranks_needs_no_host():
    res = run_gcurun("--dry-run", "--preflight", "--json", "-np", "2", "true")
    assert res.returncode == 0, res.stderr
    assert [r["local"] for r in json.loads(res.stdout)["ranks"]] == [True, True]


def test_job_runs_every_rank_with_prefixed_output(tmp_path):
    res = run_gcurun("-np", "3", "-x", "FOO=bar", sys.executable, WORKER, str(tmp_path),
                     "--linger", "0")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == [f"[{r}] rank {r} of 3 ready" for r in range(3)]
    records = read_ranks(tmp_path, 3)
    assert [r["env"]["FOO"] for r in records] == ["bar"] * 3
    assert [r["env"]["TOPS_VISIBLE_DEVICES"] for r in records] == ["0,1,2"] * 3
    assert [r["env"]["GCURUN_DEVICE"] for r in records] == ["0", "1", "2"]


def test_accelerator_and_devices_pick_variable_and_ids(tmp_path):
    res = run_gcurun("-np", "2", "--accelerator", "cuda", "--devices", "4,6",
                     sys.executable, WORKER, str(tmp_path), "--linger", "0")
    assert res.returncode == 0, res.stderr
    records = read_ranks(tmp_path, 2)
    assert [r["env"]["CUDA_VISIBLE_DEVICES"] for r in records] == ["4,6", "4,6"]
    assert [r["env"]["GCURUN_DEVICE"] for r in records] == ["4", "6"]
    assert "TOPS_VISIBLE_DEVICES" not in records[0]["env"]


def test_show_ranks_and_output_dir(tmp_path):
    logs = tmp_path / "logs"
    res = run_gcurun("-np", "2", "--show-ranks", "1", "--output-dir", str(logs),
                     sys.executable, WORKER, str(tmp_path), "--linger", "0")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "[1] rank 1 of 2 ready\n"
    assert (logs / "latest" / "rank-0.stdout.log").read_text() == "rank 0 of 2 ready\n"


def test_failing_rank_sets_exit_code_and_reports_root_cause(tmp_path):
    res = run_gcurun("-np", "3", "--grace-seconds", "3", sys.executable, WORKER,
                     str(tmp_path), "--fail-rank", "2", "--code", "3", "--grandchild")
    assert res.returncode == 3
    assert ("gcurun: job failed: rank 2 on localhost exited with code 3 (root cause); "
            "every other rank was stopped") in res.stderr
    assert "    rank 2 failing on purpose" in res.stderr
    records = read_ranks(tmp_path, 3)
    pids = [r["pid"] for r in records] + [r["grandchild"] for r in records]
    assert survivors(pids) == []


def test_rank_killed_by_signal_gives_128_plus_n(tmp_path):
    res = run_gcurun("-np", "2", sys.executable, WORKER, str(tmp_path),
                     "--signal-rank", "1", "--signal", str(int(signal.SIGKILL)))
    assert res.returncode == 128 + signal.SIGKILL
    assert "rank 1 on localhost was killed by SIGKILL" in res.stderr


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                         (signal.SIGHUP, 129)])
def test_signal_to_gcurun_stops_every_rank(tmp_path, signum, code):
    import os

    proc = subprocess.Popen(
        gcurun_cmd("-np", "2", sys.executable, WORKER, str(tmp_path), "--grandchild"),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("both ranks ready", lambda: all(
            (tmp_path / f"rank-{r}.json").exists() for r in range(2)))
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == code
    assert f"gcurun: interrupted by {signal.Signals(signum).name}; stopped every rank" in err
    records = read_ranks(tmp_path, 2)
    assert survivors([r["pid"] for r in records] + [r["grandchild"] for r in records]) == []


def test_help_imports_nothing_heavy():
    code = ("import sys\nfrom gcurun.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('rich', 'paramiko', 'mpi4py', 'numpy', 'yaml')"
            " if m in sys.modules), file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert res.returncode == 0
    assert res.stderr.strip() == "[]"
    assert "-np, --num-proc N" in res.stdout


def test_python_dash_m_and_version():
    res = run_gcurun("--version")
    assert res.returncode == 0
    from gcurun import __version__

    assert res.stdout.strip() == f"gcurun, version {__version__}"


def test_dry_run_json_lists_every_rank(tmp_path):
    res = run_gcurun("--dry-run", "--json", "-H", "localhost:2", "--master-port", "29500",
                     "python", "train.py")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert [r["rank"] for r in plan["ranks"]] == [0, 1]
    assert plan["env"]["MASTER_PORT"] == "29500"            # shared by every rank, given once
    assert plan["ranks"][1]["env"]["RANK"] == "1"


@pytest.mark.parametrize(("flags", "env"), [
    ((), {}),
    (("--hierarchical-allreduce",), {"GCURUN_HIERARCHICAL_ALLREDUCE": "1"}),
    (("--no-hierarchical-allreduce",), {"GCURUN_HIERARCHICAL_ALLREDUCE": "0"}),
    (("--network-interface", "10.1.0.7/24"), {"GCURUN_NETWORK_INTERFACE": "10.1.0.7/24"}),
])
def test_two_levels_and_the_network_reach_every_rank(flags, env):
    """Both are runtime knobs: a flag becomes a variable of every rank (no flag: the
    runtime decides, and offers peers every address)."""
    res = run_gcurun("--dry-run", "--json", "-H", "localhost:2", *flags, "python", "t.py")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    for rank in plan["ranks"]:
        got = {k: v for k, v in {**plan["env"], **rank["env"]}.items()
               if k in ("GCURUN_HIERARCHICAL_ALLREDUCE", "GCURUN_NETWORK_INTERFACE")}
        assert got == env


def test_a_bad_network_interface_is_refused_before_anything_starts():
    res = run_gcurun("-H", "localhost:2", "--network-interface", "eth 0", "python", "t.py")
    assert res.returncode == 2
    assert res.stderr.startswith("gcurun: error: --network-interface 'eth 0': not an "
                                 "interface name"), res.stderr


# A launcher's environment with variables of each kind (PATH and PYTHONPATH to run).
def launcher_env(**extra):
    import os

    return {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8",
            "HOME": "/home/u", "HOSTNAME": "launcher", "SSH_AUTH_SOCK": "/tmp/agent.1",
            "MY_SECRET_KEY": "hush", "MY_SETTING": "on", **extra}


def dry_run(*args, env):
    return subprocess.run(gcurun_cmd("--dry-run", "-H", "localhost:1,h2:1", *args, "python",
                                     "t.py"),
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)


def test_dry_run_names_what_reaches_other_hosts_and_what_stays():
    res = dry_run(env=launcher_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout.endswith(
        "environment forwarded to other hosts (--env-forward all): LANG, MY_SETTING, PATH, "
        "PYTHONPATH\n"
        "left out: HOME, HOSTNAME, MY_SECRET_KEY, SSH_AUTH_SOCK\n")
    assert "hush" not in res.stdout and "/tmp/agent.1" not in res.stdout


def test_dry_run_json_of_the_listed_mode_from_a_profile_variable():
    res = dry_run("--json", "-x", "MY_SECRET_KEY",
                  env=launcher_env(GCURUN_ENV_FORWARD="listed", HOROVOD_CYCLE_TIME="5"))
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["launcher_env"] == {
        "mode": "listed", "forwarded": ["GCURUN_ENV_FORWARD", "HOROVOD_CYCLE_TIME",
                                        "MY_SECRET_KEY"],
        "left_out": ["HOME", "HOSTNAME", "LANG", "MY_SETTING", "PATH", "PYTHONPATH",
                     "SSH_AUTH_SOCK"]}
    assert plan["sources"]["env_forward"] == "env:GCURUN_ENV_FORWARD"
    # A knob from the environment is the ranks' to read; the plan does not restate it.
    assert "GCURUN_CYCLE_TIME_MS" not in plan["env"]


def test_env_forward_takes_only_its_two_modes():
    res = dry_run("--env-forward", "some", env=launcher_env())
    assert res.returncode == 2
    assert res.stderr == ("gcurun: error: --env-forward: 'some' is not one of 'all', 'listed'; "
                          "write one of all, listed\n")


def test_runtime_knobs_of_the_launchers_environment_win_over_the_defaults():
    from tests.helpers import rank_reports

    report = str(RANKS / "env_report.py")
    res = run_gcurun("-np", "2", sys.executable, report,
                     env={"HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_CYCLE_TIME": "7",
                          "HOROVOD_GLOO_IFACE": "lo"})
    assert res.returncode == 0, res.stderr
    for got in rank_reports(res.stdout).values():
        assert (got["stall_check_warning_seconds"], got["cycle_time_ms"],
                got["network_interface"]) == (0.0, 7.0, "lo")
    # The command line still wins over the environment.
    res = run_gcurun("-np", "1", "--stall-check-warning-seconds", "5", sys.executable,
                     report, env={"HOROVOD_STALL_CHECK_DISABLE": "1"})
    assert rank_reports(res.stdout)[0]["stall_check_warning_seconds"] == 5.0
