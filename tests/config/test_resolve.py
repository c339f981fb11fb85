"""Precedence CLI > profile > environment > defaults, sources, and environment names."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gcurun.config.api import (
    ElasticSettings,
    MPISettings,
    RuntimeSettings,
    Settings,
    SSHSettings,
)
from gcurun.config.profile import Profile, parse_profile, read_profile
from gcurun.config.resolve import (
    explain_settings,
    profile_path_from,
    read_environment,
    resolve_settings,
    runtime_environment,
)
from gcurun.config.schema import KEYS
from gcurun.errors import UsageError
from gcurun.hosts.api import HostSpec

SOURCE = "p.yaml"


@dataclasses.dataclass(frozen=True)
class Case:
    """A key with a value for each layer: as the CLI gives it, as YAML text and the value it
    parses to, as an environment variable and the value it parses to. Each layer's value
    differs from the next one's where the key has enough values (booleans do not), and the
    environment's differs from the default; the sources tell the layers apart regardless."""

    path: str
    cli: Any
    yaml: str
    profile: Any
    variable: str
    env_text: str
    env: Any


CASES = [
    Case("np", 4, "8", 8, "GCURUN_NP", "16", 16),
    Case("oversubscribe", False, "true", True, "GCURUN_OVERSUBSCRIBE", "yes", True),
    Case("accelerator", "rocm", "cuda", "cuda", "GCURUN_ACCELERATOR", "mlu", "mlu"),
    Case("devices", ("7",), "[0, 1]", ("0", "1"), "GCURUN_DEVICES", "2,3", ("2", "3")),
    Case("device_isolation", False, "true", True, "GCURUN_DEVICE_ISOLATION", "1", True),
    Case("launcher", "mpi", "ssh", "ssh", "GCURUN_LAUNCHER", "local", "local"),
    Case("env_forward", "listed", "all", "all", "GCURUN_ENV_FORWARD", "listed", "listed"),
    Case("bind_to", "core", "numa", "numa", "GCURUN_BIND_TO", "socket", "socket"),
    Case("map_by", "slot", "socket", "socket", "GCURUN_MAP_BY", "numa", "numa"),
    Case("report_bindings", False, "true", True, "GCURUN_REPORT_BINDINGS", "1", True),
    Case("output_dir", "cli-logs", "p-logs", "p-logs", "GCURUN_OUTPUT_DIR", "e-logs",
         "e-logs"),
    Case("grace_seconds", 1.0, "2", 2.0, "GCURUN_GRACE_SECONDS", "3.5", 3.5),
    Case("liveness_timeout", 1.0, "2", 2.0, "GCURUN_LIVENESS_TIMEOUT", "3.5", 3.5),
    Case("workdir", "/c", "/p", "/p", "GCURUN_WORKDIR", "/e", "/e"),
    Case("horovod_alias", "off", "on", "on", "GCURUN_HOROVOD_ALIAS", "force", "force"),
    Case("ssh.user", "c", "p", "p", "GCURUN_SSH_USER", "e", "e"),
    Case("ssh.port", 2201, "2202", 2202, "GCURUN_SSH_PORT", "2203", 2203),
    Case("ssh.identity_file", "/c/key", "/p/key", "/p/key", "GCURUN_SSH_IDENTITY_FILE",
         "/e/key", "/e/key"),
    Case("ssh.host_key_policy", "off", "accept-new", "accept-new",
         "GCURUN_HOST_KEY_POLICY", "off", "off"),
    Case("ssh.python", "python3.11", "/p/python", "/p/python", "GCURUN_PYTHON",
         "/e/python", "/e/python"),
    Case("ssh.timeout", 1.0, "2", 2.0, "GCURUN_SSH_TIMEOUT", "3", 3.0),
    Case("ssh.config_file", "/c/cfg", "null", None, "GCURUN_SSH_CONFIG", "/e/cfg",
         "/e/cfg"),
    Case("ssh.known_hosts", "/c/kh", "/p/kh", "/p/kh", "GCURUN_SSH_KNOWN_HOSTS", "/e/kh",
         "/e/kh"),
    Case("mpi.mpirun", "c-mpirun", "p-mpirun", "p-mpirun", "GCURUN_MPIRUN", "e-mpirun",
         "e-mpirun"),
    Case("mpi.args", ("--c",), "[--p, 1]", ("--p", "1"), "GCURUN_MPI_ARGS", "--e 'a b'",
         ("--e", "a b")),
    Case("mpi.network_interface", "eth0", "10.0.0.0/24", "10.0.0.0/24",
         "GCURUN_NETWORK_INTERFACE", "ib0", "ib0"),
    Case("runtime.backend", "tcp", "mpi", "mpi", "GCURUN_BACKEND", "tcp", "tcp"),
    Case("runtime.fusion_threshold_mb", 1.0, "2", 2.0, "GCURUN_FUSION_THRESHOLD_MB", "3", 3.0),
    Case("runtime.cycle_time_ms", 1.5, "2.5", 2.5, "GCURUN_CYCLE_TIME_MS", "3.5", 3.5),
    Case("runtime.timeline", "c.json", "p.json", "p.json", "GCURUN_TIMELINE_FILENAME", "e.json",
         "e.json"),
    Case("runtime.timeline_mark_cycles", False, "true", True, "GCURUN_TIMELINE_MARK_CYCLES",
         "on", True),
    Case("runtime.stall_check_warning_seconds", 1.0, "2", 2.0,
         "GCURUN_STALL_CHECK_WARNING_SECONDS", "3", 3.0),
    Case("runtime.stall_check_shutdown_seconds", 1.0, "2", 2.0,
         "GCURUN_STALL_CHECK_SHUTDOWN_SECONDS", "3", 3.0),
    Case("runtime.timeout_seconds", 10.0, "20", 20.0, "GCURUN_TIMEOUT_SECONDS", "30", 30.0),
    Case("runtime.hierarchical_allreduce", True, "false", False,
         "GCURUN_HIERARCHICAL_ALLREDUCE", "1", True),
    Case("runtime.autotune", False, "true", True, "GCURUN_AUTOTUNE", "1", True),
    Case("runtime.autotune_log_file", "/c/a.csv", "/p/a.csv", "/p/a.csv",
         "GCURUN_AUTOTUNE_LOG_FILE", "/e/a.csv", "/e/a.csv"),
    Case("runtime.autotune_warmup_samples", 1, "2", 2, "GCURUN_AUTOTUNE_WARMUP_SAMPLES",
         "0", 0),
    Case("runtime.autotune_steps_per_sample", 4, "5", 5, "GCURUN_AUTOTUNE_STEPS_PER_SAMPLE",
         "6", 6),
    Case("runtime.autotune_bayes_opt_max_samples", 7, "8", 8,
         "GCURUN_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "9", 9),
    Case("runtime.autotune_gaussian_process_noise", 0.1, "0.2", 0.2,
         "GCURUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0", 0.0),
    Case("runtime.autotune_cache", "/c/t.json", "/p/t.json", "/p/t.json",
         "GCURUN_AUTOTUNE_CACHE", "/e/t.json", "/e/t.json"),
    Case("elastic.min_np", 2, "3", 3, "GCURUN_MIN_NP", "4", 4),
    Case("elastic.max_np", 5, "6", 6, "GCURUN_MAX_NP", "7", 7),
    Case("elastic.host_discovery_script", "c.sh", "p.sh", "p.sh",
         "GCURUN_HOST_DISCOVERY_SCRIPT", "e.sh", "e.sh"),
    Case("elastic.slots", 1, "2", 2, "GCURUN_SLOTS", "3", 3),
    Case("elastic.reset_limit", 1, "2", 2, "GCURUN_RESET_LIMIT", "0", 0),
    Case("elastic.timeout", 1.0, "2", 2.0, "GCURUN_ELASTIC_TIMEOUT", "3", 3.0),
    Case("elastic.blacklist_cooldown_range", (1, 2), "[3, 4]", (3, 4),
         "GCURUN_BLACKLIST_COOLDOWN_RANGE", "5 6", (5, 6)),
]
IDS = [case.path for case in CASES]


def job_of(case: Case) -> dict[str, str]:
    """An environment that makes the job elastic for an ``elastic.*`` case (the elastic
    settings of a static job are refused), by the other key that does."""
    if not case.path.startswith("elastic."):
        return {}
    if case.path == "elastic.host_discovery_script":
        return {"GCURUN_MIN_NP": "1"}
    return {"GCURUN_HOST_DISCOVERY_SCRIPT": "find-hosts"}


def profile_of(path: str, yaml_text: str) -> Profile:
    """A profile setting one dotted key, on line 2 (line 1 is a comment)."""
    section, _, name = path.rpartition(".")
    text = f"# p\n{section}:\n  {name}: {yaml_text}\n" if section else \
        f"# p\n{path}: {yaml_text}\n"
    return parse_profile(text, SOURCE)


def value_of(settings: Settings, path: str) -> Any:
    section, _, name = path.rpartition(".")
    return getattr(getattr(settings, section) if section else settings, name)


def default_of(path: str) -> Any:
    section, _, name = path.rpartition(".")
    record = {"ssh": SSHSettings, "mpi": MPISettings, "runtime": RuntimeSettings,
              "elastic": ElasticSettings}.get(section, Settings)
    fields = {field.name: field for field in dataclasses.fields(record)}
    return fields[name].default


def test_cases_cover_every_key_the_environment_can_set():
    settable = {key.path for key in KEYS if key.in_environ and key.path not in
                ("hosts", "hostfile")}
    assert {case.path for case in CASES} == settable


def test_schema_matches_the_settings_dataclasses():
    paths = {f.name for f in dataclasses.fields(Settings)} - {"ssh", "mpi", "runtime",
                                                              "elastic", "sources"}
    for section, record in (("ssh", SSHSettings), ("mpi", MPISettings),
                            ("runtime", RuntimeSettings), ("elastic", ElasticSettings)):
        paths |= {f"{section}.{f.name}" for f in dataclasses.fields(record)}
    assert [key.path for key in KEYS] and {key.path for key in KEYS} == paths


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cli_beats_profile_and_environment(case):
    settings = resolve_settings({case.path: case.cli}, profile_of(case.path, case.yaml),
                                {case.variable: case.env_text, **job_of(case)})
    assert value_of(settings, case.path) == case.cli
    assert settings.sources[case.path] == "cli"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_profile_beats_environment(case):
    settings = resolve_settings({}, profile_of(case.path, case.yaml),
                                {case.variable: case.env_text, **job_of(case)})
    assert value_of(settings, case.path) == case.profile
    line = 3 if "." in case.path else 2
    assert settings.sources[case.path] == f"profile:p.yaml:{line}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_environment_beats_default(case):
    settings = resolve_settings({}, None, {case.variable: case.env_text, **job_of(case)})
    assert value_of(settings, case.path) == case.env
    assert case.env != default_of(case.path)
    assert settings.sources[case.path] == f"env:{case.variable}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_default_when_no_layer_gives_the_key(case):
    job = {"GCURUN_HOST_DISCOVERY_SCRIPT": "find-hosts"} \
        if case.path.startswith("elastic.") and case.path != "elastic.host_discovery_script" \
        else {"GCURUN_MIN_NP": "1"} if case.path.startswith("elastic.") else {}
    settings = resolve_settings({}, profile_of("np", "2") if case.path != "np" else None,
                                {"GCURUN_NP": "3", **job} if case.path != "np" else {})
    assert value_of(settings, case.path) == default_of(case.path)
    assert settings.sources[case.path] == "default"


def test_every_key_has_a_source():
    """But a static job's ``elastic.*`` settings, all defaults."""
    settings = resolve_settings({}, None, {})
    assert set(settings.sources) == {key.path for key in KEYS if key.section != "elastic"}
    assert set(settings.sources.values()) == {"default"}
    assert settings == Settings(sources=settings.sources)


def test_layers_mix_key_by_key():
    profile = parse_profile("np: 8\nbind_to: numa\nruntime:\n  cycle_time_ms: 2\n", SOURCE)
    environ = {"GCURUN_NP": "4", "GCURUN_MAP_BY": "socket", "GCURUN_CYCLE_TIME_MS": "9"}
    settings = resolve_settings({"bind_to": "core"}, profile, environ)
    assert (settings.np, settings.bind_to, settings.map_by, settings.runtime.cycle_time_ms,
            settings.accelerator) == (8, "core", "socket", 2.0, "gcu")
    assert {key: settings.sources[key] for key in
            ("np", "bind_to", "map_by", "runtime.cycle_time_ms", "accelerator")} == {
        "np": "profile:p.yaml:1", "bind_to": "cli", "map_by": "env:GCURUN_MAP_BY",
        "runtime.cycle_time_ms": "profile:p.yaml:4", "accelerator": "default"}


def test_show_ranks_comes_from_the_cli_only():
    settings = resolve_settings({"show_ranks": [0, 3]}, None, {"GCURUN_SHOW_RANKS": "1"})
    assert settings.show_ranks == (0, 3)
    assert settings.sources["show_ranks"] == "cli"


def test_cli_values_are_normalised():
    settings = resolve_settings({"devices": [0, 1], "forward_env": ["A"],
                                 "mpi.args": "--mca btl 'tcp,self'", "env": {"N": 1}},
                                None, {})
    assert settings.devices == ("0", "1")
    assert settings.forward_env == ("A",)
    assert settings.mpi.args == ("--mca", "btl", "tcp,self")
    assert settings.env == {"N": "1"}


def test_unknown_cli_key_is_a_bug_in_the_caller():
    with pytest.raises(ValueError, match="not settings: fusion_threshold_mb, npp"):
        resolve_settings({"npp": 1, "fusion_threshold_mb": 2}, None, {})


# -- hosts and hostfile ----------------------------------------------------------------------

HOSTS = (HostSpec("a", slots=2), HostSpec("b", slots=2))
FILE_HOSTS = (HostSpec("f1", slots=4), HostSpec("f2", slots=4))


def fake_reader(expected_path: str):
    def read(path: str) -> tuple[HostSpec, ...]:
        assert path == expected_path
        return FILE_HOSTS
    return read


def no_reading(path: str) -> tuple[HostSpec, ...]:
    raise AssertionError(f"read {path}")


def test_cli_hosts_displace_a_profile_hostfile():
    profile = parse_profile("hostfile: hosts.txt\n", "site/p.yaml")
    settings = resolve_settings({"hosts": list(HOSTS)}, profile, {}, read_hostfile=no_reading)
    assert (settings.hosts, settings.hostfile) == (HOSTS, None)
    assert (settings.sources["hosts"], settings.sources["hostfile"]) == ("cli", "cli")


def test_cli_hostfile_displaces_profile_hosts():
    profile = parse_profile("hosts:\n  - {name: a, slots: 2}\n", SOURCE)
    settings = resolve_settings({"hostfile": "h.txt"}, profile, {},
                                read_hostfile=fake_reader("h.txt"))
    assert (settings.hosts, settings.hostfile) == (FILE_HOSTS, "h.txt")
    assert (settings.sources["hosts"], settings.sources["hostfile"]) == ("cli", "cli")


def test_profile_hostfile_is_read_from_the_profile_folder():
    profile = parse_profile("# hosts\nhostfile: hosts.txt\n", "site/p.yaml")
    settings = resolve_settings({}, profile, {"GCURUN_HOSTS": "e:1"},
                                read_hostfile=fake_reader("site/hosts.txt"))
    assert (settings.hosts, settings.hostfile) == (FILE_HOSTS, "site/hosts.txt")
    assert settings.sources["hosts"] == settings.sources["hostfile"] == "profile:site/p.yaml:2"


def test_profile_hosts_displace_an_environment_hostfile():
    profile = parse_profile("# hosts\nhosts:\n  - {name: a, slots: 2}\n", SOURCE)
    settings = resolve_settings({}, profile, {"GCURUN_HOSTFILE": "/e/hosts"},
                                read_hostfile=no_reading)
    assert (settings.hosts, settings.hostfile) == ((HostSpec("a", slots=2),), None)
    assert settings.sources["hosts"] == settings.sources["hostfile"] == "profile:p.yaml:2"


def test_environment_hostfile():
    settings = resolve_settings({}, None, {"GCURUN_HOSTFILE": "/e/hosts"},
                                read_hostfile=fake_reader("/e/hosts"))
    assert (settings.hosts, settings.hostfile) == (FILE_HOSTS, "/e/hosts")
    assert settings.sources["hostfile"] == settings.sources["hosts"] == "env:GCURUN_HOSTFILE"


def test_environment_hosts_use_the_host_spec_parser():
    settings = resolve_settings({}, None, {"GCURUN_HOSTS": "u@node[1-2]:4"})
    assert settings.hosts == (HostSpec("node1", slots=4, user="u"),
                              HostSpec("node2", slots=4, user="u"))
    assert settings.sources["hosts"] == "env:GCURUN_HOSTS"


def test_bad_environment_hosts_name_the_variable():
    with pytest.raises(UsageError) as info:
        resolve_settings({}, None, {"GCURUN_HOSTS": "a:0"})
    assert str(info.value) == ("GCURUN_HOSTS='a:0': host spec 'a:0': slots must be at least "
                               "1, got 0; write a:N with N at least 1")


def test_a_real_hostfile_named_by_a_profile(tmp_path):
    (tmp_path / "hosts.txt").write_text("# two nodes\nnode01 slots=8\nnode02:8\n")
    (tmp_path / "p.yaml").write_text("np: 16\nhostfile: hosts.txt\n")
    settings = resolve_settings({}, read_profile(tmp_path / "p.yaml"), {})
    assert settings.hosts == (HostSpec("node01", slots=8), HostSpec("node02", slots=8))
    assert settings.hostfile == str(tmp_path / "hosts.txt")


def test_a_missing_hostfile_names_where_it_was_given(tmp_path):
    profile = parse_profile("np: 2\nhostfile: nope.txt\n", "site/p.yaml")
    with pytest.raises(UsageError) as info:
        resolve_settings({}, profile, {})
    assert str(info.value) == ("site/p.yaml:2: hostfile 'site/nope.txt' does not exist; "
                               "check the path")
    with pytest.raises(UsageError) as info:
        resolve_settings({}, None, {"GCURUN_HOSTFILE": "nope.txt"})
    assert str(info.value) == "GCURUN_HOSTFILE: hostfile 'nope.txt' does not exist; check the path"


def test_hosts_and_hostfile_together_are_refused():
    with pytest.raises(UsageError) as info:
        resolve_settings({"hosts": HOSTS, "hostfile": "h"}, None, {})
    assert str(info.value) == "hosts (-H) and a hostfile (--hostfile) were both given; give one"
    with pytest.raises(UsageError) as info:
        resolve_settings({}, None, {"GCURUN_HOSTS": "a:1", "GCURUN_HOSTFILE": "h"})
    assert str(info.value) == "both GCURUN_HOSTS and GCURUN_HOSTFILE are set; unset one of them"


# -- a Slurm allocation gives hosts where no layer does ---------------------------------------

# What `salloc -N2 -n3` and a task of an srun step in it see (tests/hosts/test_slurm.py has
# the full environments Slurm set).
SALLOC = {"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "h[1-2]",
          "SLURM_JOB_CPUS_PER_NODE": "2,1", "SLURM_TASKS_PER_NODE": "2,1",
          "SLURM_NTASKS": "3"}
STEP = {**SALLOC, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "h[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1"}


def test_an_allocation_gives_hosts_slots_and_np():
    settings = resolve_settings({}, None, SALLOC, read_hostfile=no_reading)
    assert settings.hosts == (HostSpec("h1", slots=2), HostSpec("h2", slots=1))
    assert settings.np == 3
    assert (settings.sources["hosts"], settings.sources["np"]) == ("slurm", "slurm")
    assert settings.sources["hostfile"] == "default"
    assert ("hosts", settings.hosts, "slurm") in explain_settings(settings)


def test_np_given_anywhere_wins_over_the_allocations():
    settings = resolve_settings({"np": 2}, None, SALLOC)
    assert (settings.np, settings.sources["np"]) == (2, "cli")
    assert settings.sources["hosts"] == "slurm"
    settings = resolve_settings({}, None, {**SALLOC, "GCURUN_NP": "1"})
    assert (settings.np, settings.sources["np"]) == (1, "env:GCURUN_NP")


@pytest.mark.parametrize(("cli", "profile_text", "environ", "source"), [
    ({"hosts": HOSTS}, "", {}, "cli"),
    ({}, "# hosts\nhosts: [a:2, b:2]\n", {}, "profile:p.yaml:2"),
    ({}, "", {"GCURUN_HOSTS": "a:2,b:2"}, "env:GCURUN_HOSTS"),
])
def test_hosts_given_by_any_layer_win_over_the_allocation(cli, profile_text, environ, source):
    profile = parse_profile(profile_text, SOURCE) if profile_text else None
    settings = resolve_settings(cli, profile, {**SALLOC, **environ})
    assert settings.hosts == HOSTS and settings.sources["hosts"] == source
    assert settings.np is None and settings.sources["np"] == "default"


def test_a_task_of_a_step_without_hosts_is_refused():
    with pytest.raises(UsageError) as info:
        resolve_settings({}, None, STEP)
    assert str(info.value) == (
        "inside a Slurm step (SLURM_STEP_ID is set) the allocation's tasks per host are not "
        "known: srun set SLURM_TASKS_PER_NODE to the step's; run gcurun in the allocation "
        "itself (salloc or the sbatch script), not under srun, or name the hosts with -H")
    assert resolve_settings({"hosts": HOSTS}, None, STEP).hosts == HOSTS


def test_bad_slurm_variables_are_named():
    with pytest.raises(UsageError, match="SLURM_TASKS_PER_NODE='2,1,1' counts 3 hosts but "
                                         "SLURM_JOB_NODELIST='h\\[1-2\\]' names 2"):
        resolve_settings({}, None, {**SALLOC, "SLURM_TASKS_PER_NODE": "2,1,1"})


def test_outside_an_allocation_nothing_changes():
    settings = resolve_settings({}, None, {"SLURM_CONF": "/etc/slurm/slurm.conf"})
    assert settings.hosts is None and settings.np is None
    assert settings.sources["hosts"] == settings.sources["np"] == "default"


# -- env and forward_env combine -------------------------------------------------------------

def test_env_merges_per_variable_and_cli_wins():
    profile = parse_profile("env:\n  A: p\n  B: p\n", SOURCE)
    settings = resolve_settings({"env": {"B": "c", "C": "c"}}, profile, {})
    assert settings.env == {"A": "p", "B": "c", "C": "c"}
    assert {k: v for k, v in settings.sources.items()
            if k == "env" or k.startswith("env.")} == {
        "env": "cli", "env.A": "profile:p.yaml:2", "env.B": "cli", "env.C": "cli"}


def test_env_from_the_profile_alone():
    settings = resolve_settings({}, parse_profile("env:\n  A: 1\n", SOURCE), {})
    assert settings.env == {"A": "1"}
    assert settings.sources["env"] == "profile:p.yaml:1"


def test_forward_env_is_the_union_in_order():
    profile = parse_profile("forward_env: [A, B]\n", SOURCE)
    settings = resolve_settings({"forward_env": ("B", "C")}, profile, {})
    assert settings.forward_env == ("A", "B", "C")
    assert settings.sources["forward_env"] == "cli"


# -- the environment -------------------------------------------------------------------------

@pytest.mark.parametrize(("variable", "text", "path", "value"), [
    ("HOROVOD_FUSION_THRESHOLD", "134217728", "runtime.fusion_threshold_mb", 128.0),
    ("HOROVOD_FUSION_THRESHOLD", "0", "runtime.fusion_threshold_mb", 0.0),
    ("HOROVOD_CYCLE_TIME", "5", "runtime.cycle_time_ms", 5.0),
    ("HOROVOD_TIMELINE", "/t/tl.json", "runtime.timeline", "/t/tl.json"),
    ("HOROVOD_TIMELINE_MARK_CYCLES", "1", "runtime.timeline_mark_cycles", True),
    ("HOROVOD_STALL_CHECK_TIME_SECONDS", "30", "runtime.stall_check_warning_seconds", 30.0),
    ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90", "runtime.stall_check_shutdown_seconds", 90.0),
    ("HOROVOD_HIERARCHICAL_ALLREDUCE", "1", "runtime.hierarchical_allreduce", True),
])
def test_horovod_names(variable, text, path, value):
    settings = resolve_settings({}, None, {variable: text})
    assert value_of(settings, path) == value
    assert settings.sources[path] == f"env:{variable}"


def test_gcurun_names_win_over_horovod_names():
    environ = {"HOROVOD_CYCLE_TIME": "5", "GCURUN_CYCLE_TIME_MS": "7",
               "HOROVOD_FUSION_THRESHOLD": "1048576", "GCURUN_FUSION_THRESHOLD_MB": "3"}
    settings = resolve_settings({}, None, environ)
    assert (settings.runtime.cycle_time_ms, settings.runtime.fusion_threshold_mb) == (7.0, 3.0)
    assert settings.sources["runtime.cycle_time_ms"] == "env:GCURUN_CYCLE_TIME_MS"


def test_horovod_names_lose_to_the_profile():
    profile = parse_profile("runtime:\n  cycle_time_ms: 2\n", SOURCE)
    settings = resolve_settings({}, profile, {"HOROVOD_CYCLE_TIME": "5"})
    assert settings.runtime.cycle_time_ms == 2.0


def test_empty_variables_count_as_unset():
    settings = resolve_settings({}, None, {"GCURUN_NP": "", "GCURUN_CYCLE_TIME_MS": " ",
                                           "HOROVOD_CYCLE_TIME": "4"})
    assert settings.np is None
    assert settings.sources["runtime.cycle_time_ms"] == "env:HOROVOD_CYCLE_TIME"


def test_environment_words_are_case_insensitive_for_choices_and_booleans():
    values, names = read_environment({"GCURUN_ACCELERATOR": "CUDA", "GCURUN_OVERSUBSCRIBE": "On"})
    assert values == {"accelerator": "cuda", "oversubscribe": True}
    assert names == {"accelerator": "GCURUN_ACCELERATOR", "oversubscribe": "GCURUN_OVERSUBSCRIBE"}


def test_unrelated_variables_are_ignored():
    assert read_environment({"GCURUN_RANK": "3", "GCURUN_PROFILE": "x.yaml", "HOME": "/"}) \
        == ({}, {})


@pytest.mark.parametrize(("variable", "text", "rule"), [
    ("GCURUN_NP", "eight", "an integer from 1 to 1048576"),
    ("GCURUN_NP", "0", "an integer from 1 to 1048576"),
    ("GCURUN_SSH_PORT", "70000", "an integer from 1 to 65535"),
    ("GCURUN_GRACE_SECONDS", "nan", "a number from 0 to 86400"),
    ("GCURUN_CYCLE_TIME_MS", "0", "a number above 0 and at most 60000"),
    ("GCURUN_OVERSUBSCRIBE", "maybe", "true or false"),
    ("GCURUN_TIMELINE_MARK_CYCLES", "2", "true or false"),
    ("GCURUN_ACCELERATOR", "gpu", "one of gcu, cuda, rocm, ascend, mlu, none"),
    ("GCURUN_BIND_TO", "numa-node", "one of none, core, socket, numa"),
    ("GCURUN_HOST_KEY_POLICY", "never", "one of strict, accept-new, off"),
    ("GCURUN_DEVICES", "0,,1", "a list of device ids"),
    ("GCURUN_MPI_ARGS", "--mca 'btl", "a list of arguments or one string"),
    ("HOROVOD_FUSION_THRESHOLD", "64MB", "an integer from 0 to 68719476736"),
    ("HOROVOD_CYCLE_TIME", "fast", "a number above 0 and at most 60000"),
    ("HOROVOD_STALL_CHECK_TIME_SECONDS", "-1", "a number from 0 to 604800"),
])
def test_bad_environment_values_name_the_variable(variable, text, rule):
    with pytest.raises(UsageError) as info:
        resolve_settings({}, None, {variable: text})
    assert str(info.value) == (f"{variable}={text!r}: expected {rule}; fix the value or "
                               f"unset {variable}")


def test_a_bad_variable_is_an_error_even_when_a_higher_layer_sets_the_key():
    # A broken environment is reported rather than silently shadowed.
    with pytest.raises(UsageError, match="GCURUN_NP='x'"):
        resolve_settings({"np": 2}, None, {"GCURUN_NP": "x"})


def test_profile_path_from():
    assert profile_path_from("a.yaml", {"GCURUN_PROFILE": "b.yaml"}) == "a.yaml"
    assert profile_path_from(None, {"GCURUN_PROFILE": "b.yaml"}) == "b.yaml"
    assert profile_path_from(None, {"GCURUN_PROFILE": ""}) is None
    assert profile_path_from(None, {}) is None


# -- the knobs travel to the ranks --------------------------------------------------------------

def test_runtime_environment_names_and_texts():
    runtime = RuntimeSettings(backend="tcp", fusion_threshold_mb=32.0, cycle_time_ms=2.5,
                              timeline="tl.json", timeline_mark_cycles=True,
                              stall_check_warning_seconds=60.0,
                              stall_check_shutdown_seconds=0.0, timeout_seconds=300.0)
    assert runtime_environment(runtime) == {
        "GCURUN_BACKEND": "tcp",
        "GCURUN_FUSION_THRESHOLD_MB": "32",
        "GCURUN_CYCLE_TIME_MS": "2.5",
        "GCURUN_TIMELINE_FILENAME": "tl.json",
        "GCURUN_TIMELINE_MARK_CYCLES": "1",
        "GCURUN_STALL_CHECK_WARNING_SECONDS": "60",
        "GCURUN_STALL_CHECK_SHUTDOWN_SECONDS": "0",
        "GCURUN_TIMEOUT_SECONDS": "300",
        "GCURUN_AUTOTUNE": "0",
        "GCURUN_AUTOTUNE_WARMUP_SAMPLES": "3",
        "GCURUN_AUTOTUNE_STEPS_PER_SAMPLE": "10",
        "GCURUN_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "20",
        "GCURUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.8",
    }


def test_runtime_environment_leaves_out_unset_knobs():
    env = runtime_environment(RuntimeSettings())
    assert "GCURUN_BACKEND" not in env and "GCURUN_TIMELINE_FILENAME" not in env
    assert env["GCURUN_TIMELINE_MARK_CYCLES"] == "0"


def test_runtime_environment_with_sources_carries_only_knobs_given_on_purpose():
    # A knob from the environment reaches the ranks as it was given (with its Horovod
    # twins, such as HOROVOD_STALL_CHECK_DISABLE); defaults are the ranks' own.
    environ = {"HOROVOD_CYCLE_TIME": "7"}
    profile = parse_profile("runtime:\n  timeline: p.json\n", SOURCE)
    settings = resolve_settings({"runtime.fusion_threshold_mb": 8.0}, profile, environ)
    assert runtime_environment(settings.runtime, settings.sources) == {
        "GCURUN_FUSION_THRESHOLD_MB": "8", "GCURUN_TIMELINE_FILENAME": "p.json"}


def test_runtime_environment_round_trips_through_resolve():
    runtime = RuntimeSettings(backend="mpi", fusion_threshold_mb=0.5, cycle_time_ms=3.25,
                              timeline="t.json", timeline_mark_cycles=True,
                              stall_check_warning_seconds=7.0,
                              stall_check_shutdown_seconds=9.5, timeout_seconds=11.0)
    assert resolve_settings({}, None, runtime_environment(runtime)).runtime == runtime


def test_explain_settings_lists_every_key_with_value_and_source():
    profile = parse_profile("env:\n  A: x\nssh:\n  port: 2222\n", SOURCE)
    rows = explain_settings(resolve_settings({"np": 4}, profile, {}))
    by_key = {key: (value, source) for key, value, source in rows}
    assert [row[0] for row in rows if "." not in row[0] or row[0].startswith("env.")] == [
        "np", "hosts", "hostfile", "oversubscribe", "accelerator", "devices",
        "device_isolation", "launcher", "env", "env.A", "forward_env", "env_forward",
        "bind_to", "map_by", "report_bindings", "output_dir", "show_ranks", "grace_seconds",
        "liveness_timeout", "workdir", "master_addr", "master_port", "horovod_alias"]
    assert by_key["np"] == (4, "cli")
    assert by_key["env.A"] == ("x", "profile:p.yaml:2")
    assert by_key["ssh.port"] == (2222, "profile:p.yaml:4")
    assert by_key["runtime.cycle_time_ms"] == (1.0, "default")
    assert len(rows) == len([key for key in KEYS if key.section != "elastic"]) + 1
