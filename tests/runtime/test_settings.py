"""Parsing the runtime's environment, and choosing the backend from it."""

from __future__ import annotations

import pytest

from gcurun.errors import UsageError
from gcurun.runtime.frontend.state import choose_backend
from gcurun.runtime.settings import RankFacts, parse_address, parse_runtime_env

LAUNCHED = {
    "GCURUN_RANK": "3", "GCURUN_SIZE": "8", "GCURUN_LOCAL_RANK": "1", "GCURUN_LOCAL_SIZE": "4",
    "GCURUN_CROSS_RANK": "0", "GCURUN_CROSS_SIZE": "2", "GCURUN_HOSTNAME": "node-a",
    "GCURUN_RENDEZVOUS": "10.0.0.1:29400", "GCURUN_SECRET": "ab" * 32,
}


def test_a_launched_rank_knows_everything() -> None:
    env = parse_runtime_env(LAUNCHED)
    assert env.facts == RankFacts(3, 8, 1, 4, 0, 2, "node-a")
    assert env.rendezvous == ("10.0.0.1", 29400)
    assert env.secret == bytes.fromhex("ab" * 32)
    assert env.backend is None and not env.under_mpi_launcher
    assert env.timeout_seconds == 300.0 and env.cma and env.chunk_bytes == 2 << 20


def test_a_plain_process_has_no_facts() -> None:
    env = parse_runtime_env({})
    assert env.facts is None and env.rendezvous is None and env.secret is None


@pytest.mark.parametrize("variable", ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"])
def test_mpi_launchers_are_recognised(variable: str) -> None:
    assert parse_runtime_env({variable: "2"}).under_mpi_launcher


def test_srun_is_recognised_by_its_step() -> None:
    assert parse_runtime_env({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4"}
                             ).under_mpi_launcher
    assert not parse_runtime_env({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"}
                                 ).under_mpi_launcher


def test_what_the_launcher_sets_is_understood() -> None:
    from gcurun.config.api import RuntimeSettings
    from gcurun.config.resolve import runtime_environment

    variables = runtime_environment(RuntimeSettings(backend="tcp", timeline="/tmp/t.json",
                                                    timeline_mark_cycles=True,
                                                    stall_check_shutdown_seconds=30))
    env = parse_runtime_env(variables)
    assert (env.backend, env.timeout_seconds, env.timeline, env.timeline_mark_cycles) == (
        "tcp", 300.0, "/tmp/t.json", True)
    assert (env.stall_check_warning_seconds, env.stall_check_shutdown_seconds) == (60, 30)


def test_knobs() -> None:
    env = parse_runtime_env({"GCURUN_BACKEND": "TCP", "GCURUN_TIMEOUT_SECONDS": "2.5",
                             "GCURUN_CMA": "off", "GCURUN_CHUNK_BYTES": "65536",
                             "GCURUN_FUSION_THRESHOLD_MB": "0", "GCURUN_CYCLE_TIME_MS": "5",
                             "GCURUN_TIMELINE_FILENAME": "/tmp/t.json", "GCURUN_HUGE_PAGES": "0"})
    assert not env.huge_pages and parse_runtime_env({}).huge_pages
    assert (env.backend, env.timeout_seconds, env.cma, env.chunk_bytes) == ("tcp", 2.5, False,
                                                                           65536)
    assert (env.fusion_threshold_mb, env.cycle_time_ms, env.timeline) == (0, 5, "/tmp/t.json")


def test_two_levels_and_the_network_interface() -> None:
    assert parse_runtime_env({}).hierarchical_allreduce is None
    assert parse_runtime_env({"HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}).hierarchical_allreduce
    env = parse_runtime_env({"HOROVOD_HIERARCHICAL_ALLREDUCE": "1",
                             "GCURUN_HIERARCHICAL_ALLREDUCE": "off"})
    assert env.hierarchical_allreduce is False      # GCURUN_* wins over its twin
    assert parse_runtime_env({}).network_interface is None
    assert parse_runtime_env({"HOROVOD_GLOO_IFACE": "eth1"}).network_interface == "eth1"
    assert parse_runtime_env({"GCURUN_NETWORK_INTERFACE": " 10.0.0.0/8 ",
                              "HOROVOD_GLOO_IFACE": "eth1"}).network_interface == "10.0.0.0/8"


@pytest.mark.parametrize(("variables", "message"), [
    ({"GCURUN_BACKEND": "gloo"}, "GCURUN_BACKEND='gloo': unknown backend; use one of mpi, "
                                 "tcp, local"),
    ({"GCURUN_TIMEOUT_SECONDS": "soon"}, "GCURUN_TIMEOUT_SECONDS='soon': not a number"),
    ({"GCURUN_TIMEOUT_SECONDS": "0"}, "GCURUN_TIMEOUT_SECONDS='0': must be greater than 0"),
    ({"GCURUN_CMA": "maybe"}, "GCURUN_CMA='maybe': expected 1/0"),
    ({"GCURUN_RANK": "1"}, "GCURUN_SIZE is unset while its twin is set"),
    ({"GCURUN_RANK": "4", "GCURUN_SIZE": "4"}, "GCURUN_RANK=4 is not below GCURUN_SIZE=4"),
    ({"GCURUN_RANK": "-1", "GCURUN_SIZE": "4"}, "GCURUN_RANK='-1': expected an integer >= 0"),
    ({"GCURUN_RENDEZVOUS": "10.0.0.1"}, "GCURUN_RENDEZVOUS='10.0.0.1': expected HOST:PORT"),
    ({"GCURUN_SECRET": "xyz"}, "GCURUN_SECRET is not a hex string of at least 16 bytes"),
    ({"HOROVOD_HIERARCHICAL_ALLREDUCE": "2"}, "HOROVOD_HIERARCHICAL_ALLREDUCE='2': expected "
                                              "1/0"),
    ({"GCURUN_NETWORK_INTERFACE": "eth 0"}, "GCURUN_NETWORK_INTERFACE='eth 0': not an "
                                            "interface name"),
])
def test_bad_values_are_named(variables: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_runtime_env(variables)


def test_the_secret_is_never_shown() -> None:
    with pytest.raises(UsageError) as info:
        parse_runtime_env({"GCURUN_SECRET": "deadbeef"})
    assert "deadbeef" not in str(info.value)


def test_addresses() -> None:
    assert parse_address("[fe80::1]:29400") == ("fe80::1", 29400)
    assert parse_address("node-a:1") == ("node-a", 1)
    with pytest.raises(UsageError, match="port 1-65535"):
        parse_address("node-a:70000")


@pytest.mark.parametrize(("variables", "comm", "backend"), [
    ({}, False, "local"),
    (LAUNCHED, False, "tcp"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, False, "mpi"),
    ({}, True, "mpi"),
    ({**LAUNCHED, "OMPI_COMM_WORLD_SIZE": "8"}, False, "tcp"),
    ({**LAUNCHED, "GCURUN_BACKEND": "mpi"}, False, "mpi"),
    ({"OMPI_COMM_WORLD_SIZE": "2", "GCURUN_BACKEND": "local"}, False, "local"),
])
def test_backend_choice(variables: dict, comm: bool, backend: str) -> None:
    assert choose_backend(parse_runtime_env(variables), comm) == backend


def test_a_communicator_needs_the_mpi_backend() -> None:
    with pytest.raises(UsageError, match="init\\(comm=...\\) needs the mpi backend"):
        choose_backend(parse_runtime_env({"GCURUN_BACKEND": "tcp"}), True)


@pytest.mark.parametrize("environ, level", [
    ({}, None),
    ({"GCURUN_LOG_LEVEL": "debug"}, "DEBUG"),
    ({"HOROVOD_LOG_LEVEL": "trace"}, "TRACE"),
    ({"GCURUN_LOG_LEVEL": "ERROR", "HOROVOD_LOG_LEVEL": "debug"}, "ERROR"),
])
def test_the_log_level_comes_from_gcurun_log_level_or_horovods_name(environ, level):
    assert parse_runtime_env(environ).log_level == level


def test_a_bad_log_level_names_its_variable():
    with pytest.raises(UsageError) as info:
        parse_runtime_env({"HOROVOD_LOG_LEVEL": "loud"})
    assert str(info.value) == ("HOROVOD_LOG_LEVEL='loud': not a log level; use one of TRACE, "
                               "DEBUG, INFO, WARNING, ERROR, FATAL")
