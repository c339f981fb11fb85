"""Every spelling of horovodrun 0.28.1's command line runs under gcurun with its meaning:
the settings it resolves to (and the plan a dry run prints), not only that it is accepted."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from gcurun.cli.main import main
from gcurun.config.api import Settings

# horovodrun 0.28.1's option strings (horovod/runner/launch.py, parse_args), -h/--help aside.
HOROVODRUN_SPELLINGS = (
    "-v", "--version", "-np", "--num-proc", "-cb", "--check-build", "--disable-cache",
    "--start-timeout", "--network-interfaces", "--network-interface", "--output-filename",
    "--verbose", "--config-file", "-p", "--ssh-port", "-i", "--ssh-identity-file",
    "--fusion-threshold-mb", "--cycle-time-ms", "--cache-capacity",
    "--hierarchical-allreduce", "--no-hierarchical-allreduce", "--hierarchical-allgather",
    "--no-hierarchical-allgather", "--torus-allreduce", "--no-torus-allreduce",
    "--autotune", "--no-autotune", "--autotune-log-file", "--autotune-warmup-samples",
    "--autotune-steps-per-sample", "--autotune-bayes-opt-max-samples",
    "--autotune-gaussian-process-noise", "--min-np", "--min-num-proc", "--max-np",
    "--max-num-proc", "--slots-per-host", "--elastic-timeout", "--reset-limit",
    "--blacklist-cooldown-range", "--timeline-filename", "--timeline-mark-cycles",
    "--no-timeline-mark-cycles", "--no-stall-check", "--stall-check",
    "--stall-check-warning-time-seconds", "--stall-check-shutdown-time-seconds",
    "--mpi-threads-disable", "--no-mpi-threads-disable", "--mpi-args", "--tcp",
    "--binding-args", "--num-nccl-streams", "--thread-affinity", "--gloo-timeout-seconds",
    "--log-level", "--log-with-timestamp", "--log-without-timestamp", "-prefix-timestamp",
    "--prefix-output-with-timestamp", "--log-hide-timestamp", "--no-log-hide-timestamp",
    "-H", "--hosts", "-hostfile", "--hostfile", "--host-discovery-script", "--gloo", "--mpi",
    "--jsrun",
)


@pytest.fixture
def captured(monkeypatch):
    """Run gcurun's run command in this process with the launch replaced by a recorder of
    the settings it would launch with; returns a function of the arguments giving
    (exit code, settings or None, params, stdout, stderr)."""
    import gcurun.cli.job
    from gcurun.config.resolve import load_settings

    seen: dict[str, Any] = {}

    def fake_launch(command, cli, params, environ, *, stdout, stderr):
        seen["settings"] = load_settings(cli, params.get("profile"), environ)
        seen["params"] = params
        return 0

    monkeypatch.setattr(gcurun.cli.job, "launch", fake_launch)
    for name in [n for n in os.environ if n.startswith(("GCURUN_", "HOROVOD_", "SLURM_"))]:
        monkeypatch.delenv(name)

    def call(capsys, *args: str):
        seen.clear()
        with pytest.raises(SystemExit) as done:
            main(list(args))
        out = capsys.readouterr()
        return done.value.code, seen.get("settings"), seen.get("params"), out.out, out.err

    return call


def _file(tmp_path, name: str, text: str, mode: int = 0o644) -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return str(path)


Check = Callable[[Settings, dict, str], None]
NOTE = "gcurun: note: "


def _notice(text: str) -> Check:
    def check(s: Settings, p: dict, err: str) -> None:
        assert err == NOTE + text + "\n"
    return check


def _no_notice(check: Callable[[Settings], Any]) -> Check:
    def both(s: Settings, p: dict, err: str) -> None:
        assert err == ""
        assert check(s)
    return both


# (spelling, its arguments ({tmp} is a folder of this test), what it must mean)
ROWS: list[tuple[str, tuple[str, ...], Check]] = [
    ("-np", ("-np", "3"), _no_notice(lambda s: s.np == 3)),
    ("--num-proc", ("--num-proc", "3"), _no_notice(lambda s: s.np == 3)),
    ("--disable-cache", ("--disable-cache",),
     _notice("--disable-cache: gcurun keeps no cache of host checks; it checks the hosts on "
             "every run")),
    ("--start-timeout", ("--start-timeout", "45"), _no_notice(lambda s: s.ssh.timeout == 45)),
    ("--network-interfaces", ("--network-interfaces", "eth1"),
     _no_notice(lambda s: s.mpi.network_interface == "eth1")),
    ("--network-interface", ("--network-interface", "eth1"),
     _no_notice(lambda s: s.mpi.network_interface == "eth1")),
    ("--output-filename", ("--output-filename", "{tmp}/logs"),
     _no_notice(lambda s: s.output_dir.endswith("/logs"))),
    ("--verbose", ("--verbose",), _no_notice(lambda s: True)),
    ("--config-file", ("--config-file", "{tmp}/hvd.yaml"),
     _no_notice(lambda s: s.runtime.cycle_time_ms == 7 and s.runtime.fusion_threshold_mb == 8
                and s.runtime.timeline_mark_cycles is True
                and s.runtime.stall_check_warning_seconds == 11
                and s.env == {"GCURUN_CACHE_CAPACITY": "99", "GCURUN_LOG_LEVEL": "DEBUG"})),
    ("-p", ("-p", "2222"), _no_notice(lambda s: s.ssh.port == 2222)),
    ("--ssh-port", ("--ssh-port", "2222"), _no_notice(lambda s: s.ssh.port == 2222)),
    ("-i", ("-i", "{tmp}/id_key"), _no_notice(lambda s: s.ssh.identity_file.endswith("id_key"))),
    ("--ssh-identity-file", ("--ssh-identity-file", "{tmp}/id_key"),
     _no_notice(lambda s: s.ssh.identity_file.endswith("id_key"))),
    ("--fusion-threshold-mb", ("--fusion-threshold-mb", "32"),
     _no_notice(lambda s: s.runtime.fusion_threshold_mb == 32)),
    ("--cycle-time-ms", ("--cycle-time-ms", "2.5"),
     _no_notice(lambda s: s.runtime.cycle_time_ms == 2.5)),
    ("--cache-capacity", ("--cache-capacity", "512"),
     _no_notice(lambda s: s.env == {"GCURUN_CACHE_CAPACITY": "512"})),
    ("--hierarchical-allreduce", ("--hierarchical-allreduce",),
     _no_notice(lambda s: s.runtime.hierarchical_allreduce is True)),
    ("--no-hierarchical-allreduce", ("--no-hierarchical-allreduce",),
     _no_notice(lambda s: s.runtime.hierarchical_allreduce is False)),
    ("--hierarchical-allgather", ("--hierarchical-allgather",),
     _notice("--hierarchical-allgather: gcurun has no hierarchical allgather; allgather "
             "runs as one ring")),
    ("--no-hierarchical-allgather", ("--no-hierarchical-allgather",),
     _no_notice(lambda s: True)),
    ("--torus-allreduce", ("--torus-allreduce",),
     _notice("--torus-allreduce: NCCL's torus allreduce is absent here; use "
             "--hierarchical-allreduce for a two-level allreduce")),
    ("--no-torus-allreduce", ("--no-torus-allreduce",), _no_notice(lambda s: True)),
    ("--autotune", ("--autotune",), _no_notice(lambda s: s.runtime.autotune is True)),
    ("--no-autotune", ("--no-autotune",), _no_notice(lambda s: s.runtime.autotune is False)),
    ("--autotune-log-file", ("--autotune-log-file", "at.csv"),
     _no_notice(lambda s: s.runtime.autotune_log_file == "at.csv")),
    ("--autotune-warmup-samples", ("--autotune-warmup-samples", "5"),
     _no_notice(lambda s: s.runtime.autotune_warmup_samples == 5)),
    ("--autotune-steps-per-sample", ("--autotune-steps-per-sample", "20"),
     _no_notice(lambda s: s.runtime.autotune_steps_per_sample == 20)),
    ("--autotune-bayes-opt-max-samples", ("--autotune-bayes-opt-max-samples", "40"),
     _no_notice(lambda s: s.runtime.autotune_bayes_opt_max_samples == 40)),
    ("--autotune-gaussian-process-noise", ("--autotune-gaussian-process-noise", "0.3"),
     _no_notice(lambda s: s.runtime.autotune_gaussian_process_noise == 0.3)),
    ("--min-np", ("--min-np", "1", "--host-discovery-script", "{tmp}/hosts.sh"),
     _no_notice(lambda s: True)),
    ("--min-num-proc", ("--min-num-proc", "1", "--host-discovery-script", "{tmp}/hosts.sh"),
     _no_notice(lambda s: True)),
    ("--max-np", ("--max-np", "4", "--host-discovery-script", "{tmp}/hosts.sh"),
     _no_notice(lambda s: True)),
    ("--max-num-proc", ("--max-num-proc", "4", "--host-discovery-script", "{tmp}/hosts.sh"),
     _no_notice(lambda s: True)),
    ("--slots-per-host", ("--slots-per-host", "2", "--host-discovery-script",
                          "{tmp}/hosts.sh"), _no_notice(lambda s: True)),
    ("--elastic-timeout", ("--elastic-timeout", "60", "--host-discovery-script",
                           "{tmp}/hosts.sh"), _no_notice(lambda s: True)),
    ("--reset-limit", ("--reset-limit", "3", "--host-discovery-script", "{tmp}/hosts.sh"),
     _no_notice(lambda s: True)),
    ("--blacklist-cooldown-range", ("--blacklist-cooldown-range", "10", "20",
                                    "--host-discovery-script", "{tmp}/hosts.sh"),
     _no_notice(lambda s: True)),
    ("--timeline-filename", ("--timeline-filename", "{tmp}/t.json"),
     _no_notice(lambda s: s.runtime.timeline.endswith("t.json"))),
    ("--timeline-mark-cycles", ("--timeline-mark-cycles",),
     _no_notice(lambda s: s.runtime.timeline_mark_cycles is True)),
    ("--no-timeline-mark-cycles", ("--no-timeline-mark-cycles",),
     _no_notice(lambda s: s.runtime.timeline_mark_cycles is False
                and s.sources["runtime.timeline_mark_cycles"] == "cli")),
    ("--no-stall-check", ("--no-stall-check",),
     _no_notice(lambda s: s.runtime.stall_check_warning_seconds == 0
                and s.runtime.stall_check_shutdown_seconds == 0)),
    ("--stall-check", ("--stall-check",),
     _no_notice(lambda s: s.runtime.stall_check_warning_seconds == 60)),
    ("--stall-check-warning-time-seconds", ("--stall-check-warning-time-seconds", "30"),
     _no_notice(lambda s: s.runtime.stall_check_warning_seconds == 30)),
    ("--stall-check-shutdown-time-seconds", ("--stall-check-shutdown-time-seconds", "90"),
     _no_notice(lambda s: s.runtime.stall_check_shutdown_seconds == 90)),
    ("--mpi-threads-disable", ("--mpi-threads-disable",),
     _notice("--mpi-threads-disable: gcurun's engine thread makes the MPI calls, so MPI "
             "keeps its thread support")),
    ("--no-mpi-threads-disable", ("--no-mpi-threads-disable",), _no_notice(lambda s: True)),
    ("--mpi-args", ("--mpi", "--mpi-args=--map-by ppr:6:node"),
     _no_notice(lambda s: s.mpi.args == ("--map-by", "ppr:6:node"))),
    ("--tcp", ("--tcp",),
     _notice("--tcp: gcurun's own ranks talk over TCP already; under --mpi, mpirun picks "
             "its transports (choose them with --mpi-args)")),
    ("--binding-args", ("--mpi", "--binding-args=--rankfile myrankfile"),
     _no_notice(lambda s: s.mpi.args == ("--rankfile", "myrankfile"))),
    ("--num-nccl-streams", ("--num-nccl-streams", "2"),
     _notice("--num-nccl-streams: gcurun uses no NCCL; ignored")),
    ("--thread-affinity", ("--thread-affinity", "3"),
     _notice("--thread-affinity: ignored; gcurun's engine thread runs on the rank's CPUs "
             "(set them with --bind-to)")),
    ("--gloo-timeout-seconds", ("--gloo-timeout-seconds", "120"),
     _no_notice(lambda s: s.runtime.timeout_seconds == 120)),
    ("--log-level", ("--log-level", "DEBUG"),
     _no_notice(lambda s: s.env == {"GCURUN_LOG_LEVEL": "DEBUG"})),
    ("--log-with-timestamp", ("--log-with-timestamp",), _no_notice(lambda s: True)),
    ("--log-without-timestamp", ("--log-without-timestamp",), _no_notice(lambda s: True)),
    ("-prefix-timestamp", ("-prefix-timestamp",), _no_notice(lambda s: True)),
    ("--prefix-output-with-timestamp", ("--prefix-output-with-timestamp",),
     _no_notice(lambda s: True)),
    ("--log-hide-timestamp", ("--log-hide-timestamp",), _no_notice(lambda s: True)),
    ("--no-log-hide-timestamp", ("--no-log-hide-timestamp",), _no_notice(lambda s: True)),
    ("-H", ("-H", "localhost:4"),
     _no_notice(lambda s: [(h.name, h.slots) for h in s.hosts] == [("localhost", 4)])),
    ("--hosts", ("--hosts", "localhost:4"),
     _no_notice(lambda s: [(h.name, h.slots) for h in s.hosts] == [("localhost", 4)])),
    ("-hostfile", ("-hostfile", "{tmp}/hostfile"),
     _no_notice(lambda s: [(h.name, h.slots) for h in s.hosts] == [("localhost", 3)])),
    ("--hostfile", ("--hostfile", "{tmp}/hostfile"),
     _no_notice(lambda s: [(h.name, h.slots) for h in s.hosts] == [("localhost", 3)])),
    ("--host-discovery-script", ("--host-discovery-script", "{tmp}/hosts.sh"),
     _no_notice(lambda s: True)),
    ("--gloo", ("--gloo",), _no_notice(lambda s: s.launcher is None)),
    ("--mpi", ("--mpi",), _no_notice(lambda s: s.launcher == "mpi")),
    ("--jsrun", ("--jsrun",),
     _notice("--jsrun: LSF's jsrun is not supported; the ranks start with mpirun (as --mpi)")),
]
# The spellings whose meaning is a parameter of the launch rather than a setting.
PARAMS = {
    "--verbose": ("verbose", True), "--log-with-timestamp": ("log_with_timestamp", True),
    "--log-without-timestamp": ("log_with_timestamp", False),
    "--log-hide-timestamp": ("log_hide_timestamp", True),
    "--no-log-hide-timestamp": ("log_show_timestamp", True),
    "-prefix-timestamp": ("prefix_output_with_timestamp", True),
    "--prefix-output-with-timestamp": ("prefix_output_with_timestamp", True),
    "--min-np": ("min_np", 1), "--min-num-proc": ("min_np", 1), "--max-np": ("max_np", 4),
    "--max-num-proc": ("max_np", 4), "--slots-per-host": ("slots", 2),
    "--elastic-timeout": ("elastic_timeout", 60), "--reset-limit": ("reset_limit", 3),
    "--blacklist-cooldown-range": ("blacklist_cooldown_range", (10, 20)),
    "--host-discovery-script": ("host_discovery_script", "{tmp}/hosts.sh"),
}


def test_the_table_holds_every_horovodrun_spelling():
    assert len(HOROVODRUN_SPELLINGS) == len(set(HOROVODRUN_SPELLINGS)) == 71
    covered = {row[0] for row in ROWS} | {"-v", "--version", "-cb", "--check-build"}
    assert covered == set(HOROVODRUN_SPELLINGS)


@pytest.fixture
def files(tmp_path):
    _file(tmp_path, "hostfile", "localhost slots=3\n")
    _file(tmp_path, "hosts.sh", "#!/bin/sh\necho localhost:2\n", 0o755)
    _file(tmp_path, "id_key", "key\n")
    _file(tmp_path, "hvd.yaml", "params:\n  cycle_time_ms: 7\n  fusion_threshold_mb: 8\n"
                                "  cache_capacity: 99\ntimeline:\n  mark_cycles: true\n"
                                "stall_check:\n  warning_time_seconds: 11\n"
                                "logging:\n  level: DEBUG\n")
    return tmp_path


@pytest.mark.parametrize("spelling, args, check", ROWS, ids=[row[0] for row in ROWS])
def test_a_horovodrun_spelling_means_the_same_under_gcurun(captured, capsys, files, spelling,
                                                           args, check):
    args = tuple(a.replace("{tmp}", str(files)) for a in args)
    code, settings, params, _, err = captured(capsys, *args, "python", "train.py")
    assert code == 0, err
    check(settings, params, err)
    if spelling in PARAMS:
        name, value = PARAMS[spelling]
        value = value.replace("{tmp}", str(files)) if isinstance(value, str) else value
        assert params[name] == value


@pytest.mark.parametrize("spelling", ["-v", "--version"])
def test_version(captured, capsys, spelling):
    code, settings, _, out, _ = captured(capsys, spelling)
    assert code == 0 and settings is None
    assert out.startswith("gcurun, version ")


@pytest.mark.parametrize("spelling", ["-cb", "--check-build"])
def test_check_build_shows_this_hosts_versions_and_runs_nothing(captured, capsys, spelling):
    code, settings, _, out, _ = captured(capsys, spelling, "python", "train.py")
    assert code == 0 and settings is None
    assert out.split()[:3] == ["what", "found", "gcurun"]


def test_the_command_line_wins_over_the_config_file(captured, capsys, files):
    code, s, _, _, err = captured(capsys, "--config-file", str(files / "hvd.yaml"),
                                  "--cycle-time-ms", "3", "--cache-capacity", "5", "true")
    assert code == 0, err
    assert s.runtime.cycle_time_ms == 3 and s.runtime.fusion_threshold_mb == 8
    assert s.env["GCURUN_CACHE_CAPACITY"] == "5"


@pytest.mark.parametrize("text, message", [
    ("params:\n  cycle_time: 2\n", "params.cycle_time is not a horovodrun key; params's keys "
     "are cache_capacity, cycle_time_ms, fusion_threshold_mb, hierarchical_allgather, "
     "hierarchical_allreduce, torus_allreduce"),
    ("tuning:\n  a: 1\n", "unknown section 'tuning'; horovodrun's sections are params, "
     "autotune, timeline, stall_check, library_options, logging, controller"),
    ("params:\n  cycle_time_ms: fast\n", "params.cycle_time_ms = 'fast': write a number of "
     "at least 0"),
    ("controller: nccl\n", "controller 'nccl' is neither gloo nor mpi; write controller: "
     "gloo or controller: mpi"),
])
def test_a_bad_config_file_is_bad_input(captured, capsys, tmp_path, text, message):
    path = _file(tmp_path, "c.yaml", text)
    code, _, _, _, err = captured(capsys, "--config-file", path, "true")
    assert code == 2
    assert err == f"gcurun: error: --config-file '{path}': {message}\n"


def test_two_spellings_of_one_setting_must_agree(captured, capsys):
    code, _, _, _, err = captured(capsys, "--start-timeout", "5", "--ssh-timeout", "6", "true")
    assert code == 2
    assert err == ("gcurun: error: --start-timeout 5.0 and --ssh-timeout 6.0 set the same "
                   "thing differently; give one of them\n")


def test_gloo_and_mpi_exclude_each_other(captured, capsys):
    code, _, _, _, err = captured(capsys, "--gloo", "--mpi", "true")
    assert code == 2
    assert err == ("gcurun: error: --gloo (gcurun's own launcher and tcp runtime) conflicts "
                   "with --mpi; give one\n")


def test_several_network_interfaces_use_the_first_with_a_notice(captured, capsys):
    code, s, _, _, err = captured(capsys, "--network-interfaces", "eth1,eth2", "true")
    assert code == 0 and s.mpi.network_interface == "eth1"
    assert err == NOTE + ("--network-interfaces eth1,eth2: gcurun uses one network between "
                          "hosts: eth1\n")


def test_binding_args_without_mpirun_are_ignored_with_a_notice(captured, capsys):
    code, _, _, _, err = captured(capsys, "--binding-args", "--rankfile r", "true")
    assert code == 0
    assert err == NOTE + ("--binding-args: they go to mpirun, and this job does not use "
                          "mpirun (add --mpi); ignored\n")


def _dry_json(capsys, *args: str) -> dict:
    with pytest.raises(SystemExit) as done:
        main(["-np", "2", *args, "--dry-run", "--json", "true"])
    out = capsys.readouterr()
    assert done.value.code == 0, out.err
    return json.loads(out.out)


def test_the_plan_carries_the_runtime_knobs_to_every_rank(capsys):
    plan = _dry_json(capsys, "--cache-capacity", "512", "--no-stall-check",
                     "--gloo-timeout-seconds", "45", "--network-interfaces", "lo",
                     "--log-level", "info")
    env = plan["env"]
    assert env["GCURUN_CACHE_CAPACITY"] == "512"
    assert env["GCURUN_STALL_CHECK_WARNING_SECONDS"] == "0"
    assert env["GCURUN_STALL_CHECK_SHUTDOWN_SECONDS"] == "0"
    assert env["GCURUN_TIMEOUT_SECONDS"] == "45"
    assert env["GCURUN_NETWORK_INTERFACE"] == "lo"
    assert env["GCURUN_LOG_LEVEL"] == "INFO"


def test_jsrun_and_binding_args_show_in_the_mpirun_command(capsys):
    plan = _dry_json(capsys, "--jsrun", "--binding-args", "--rankfile myrankfile")
    argv = plan["mpirun"]["argv"]
    assert argv[argv.index("--rankfile") + 1] == "myrankfile"


@pytest.mark.parametrize("text, check", [
    ("controller: mpi\n", lambda s: s.launcher == "mpi"),
    ("controller: gloo\n", lambda s: s.launcher is None),
    ("stall_check:\n  enabled: false\n",
     lambda s: (s.runtime.stall_check_warning_seconds,
                s.runtime.stall_check_shutdown_seconds) == (0, 0)),
    ("library_options:\n  gloo_timeout_seconds: 50\n",
     lambda s: s.runtime.timeout_seconds == 50),
    ("timeline:\n  filename: t.json\n", lambda s: s.runtime.timeline == "t.json"),
    ("params:\n  hierarchical_allreduce: false\n",
     lambda s: s.runtime.hierarchical_allreduce is False),
])
def test_each_config_file_section_sets_its_setting(captured, capsys, tmp_path, text, check):
    path = _file(tmp_path, "c.yaml", text)
    code, s, _, _, err = captured(capsys, "--config-file", path, "true")
    assert code == 0 and err == ""
    assert check(s)


def test_the_config_files_autotune_section_sets_autotune_below_the_command_line(
        captured, capsys, tmp_path):
    path = _file(tmp_path, "c.yaml", "autotune:\n  enabled: true\n  log_file: a.csv\n"
                 "  warmup_samples: 1\n  steps_per_sample: 4\n  bayes_opt_max_samples: 9\n"
                 "  gaussian_process_noise: 0.5\n")
    code, s, _, _, err = captured(capsys, "--config-file", path,
                                  "--autotune-steps-per-sample", "6", "true")
    assert code == 0, err
    assert err == ""
    r = s.runtime
    assert (r.autotune, r.autotune_log_file, r.autotune_warmup_samples,
            r.autotune_steps_per_sample, r.autotune_bayes_opt_max_samples,
            r.autotune_gaussian_process_noise) == (True, "a.csv", 1, 6, 9, 0.5)


def test_a_config_files_autotune_count_must_be_a_whole_number(captured, capsys, tmp_path):
    path = _file(tmp_path, "c.yaml", "autotune:\n  warmup_samples: 1.5\n")
    code, _, _, _, err = captured(capsys, "--config-file", path, "true")
    assert code == 2
    assert err == (f"gcurun: error: --config-file '{path}': autotune.warmup_samples = 1.5: "
                   "write a whole number of at least 0\n")


def test_a_unique_prefix_of_a_long_option_is_that_option_as_in_horovodrun(captured, capsys):
    code, s, params, _, err = captured(capsys, "--fusion-thr", "32", "--verb",
                                       "--mpi-args", "--ver", "--mpi", "true")
    assert code == 0, err
    assert s.runtime.fusion_threshold_mb == 32 and params["verbose"] is True
    assert s.mpi.args == ("--ver",)   # a value is not an option


def test_a_prefix_of_several_options_is_refused(captured, capsys):
    code, _, _, _, err = captured(capsys, "--stall-check-w", "3", "true")
    assert code == 2
    assert err == ("gcurun: error: option '--stall-check-w' is ambiguous: it may be "
                   "--stall-check-warning-seconds, --stall-check-warning-time-seconds; "
                   "write it in full\n")


def test_the_runtime_of_each_rank_reads_the_knobs_horovodruns_spellings_set():
    from tests.helpers import run_gcurun

    script = ("from gcurun.runtime.settings import read_runtime_env as r; e = r(); "
              "print(e.cache_capacity, e.timeout_seconds, e.stall_check_warning_seconds, "
              "e.stall_check_shutdown_seconds, e.network_interface, e.log_level)")
    res = run_gcurun("-np", "2", "--cache-capacity", "7", "--gloo-timeout-seconds", "45",
                     "--no-stall-check", "--network-interfaces", "lo", "--log-level", "error",
                     "python3", "-c", script)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["[0] 7 45.0 0.0 0.0 lo ERROR",
                                               "[1] 7 45.0 0.0 0.0 lo ERROR"]


def test_gcuruns_own_spelling_on_the_command_line_wins_over_the_config_file(captured, capsys,
                                                                             tmp_path):
    path = _file(tmp_path, "c.yaml", "stall_check:\n  warning_time_seconds: 11\n"
                                     "controller: mpi\n")
    code, s, _, _, err = captured(capsys, "--config-file", path,
                                  "--stall-check-warning-seconds", "5", "--gloo", "true")
    assert code == 0, err
    assert s.runtime.stall_check_warning_seconds == 5 and s.launcher is None


def test_horovod_start_timeout_is_read_as_start_timeout_is(captured, capsys, monkeypatch):
    monkeypatch.setenv("HOROVOD_START_TIMEOUT", "40")
    code, s, _, _, err = captured(capsys, "true")
    assert code == 0, err
    assert s.ssh.timeout == 40 and s.sources["ssh.timeout"] == "env:HOROVOD_START_TIMEOUT"
    monkeypatch.setenv("GCURUN_SSH_TIMEOUT", "20")
    code, s, _, _, err = captured(capsys, "true")
    assert s.ssh.timeout == 20
