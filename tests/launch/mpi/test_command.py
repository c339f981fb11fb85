"""mpirun commands per MPI flavour, as snapshots reviewed by hand."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from gcurun.config.api import MPISettings, Settings, SSHSettings
from gcurun.errors import LaunchError, UsageError
from gcurun.hosts.api import HostSpec
from gcurun.launch.mpi.command import (
    TCP_EAGER_LIMIT,
    MPIFlavour,
    build_mpirun_command,
    interface_for,
    is_secret_name,
    job_environment,
    parse_mpirun_version,
    parse_network_interface,
    probe_mpi_flavour,
)
from gcurun.launch.mpi.rank_group import session_base
from gcurun.launch.planning.plan import build_plan
from gcurun.runtime.algorithms.ring import STREAM_BYTES

VERSIONS = {
    "openmpi4": "mpirun (Open MPI) 4.1.5\n\nReport bugs to http://www.open-mpi.org/community/help/\n",
    "openmpi5": "mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/\n",
    "mpich": ("HYDRA build details:\n"
              "    Version:                                 4.1.2\n"
              "    Release Date:                            Wed Jun  7 15:22:45 CDT 2023\n"
              "    CC:                              gcc\n"),
    "intel": ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 "
              "(id: c2e19c2f3e)\nCopyright 2003-2023, Intel Corporation.\n"),
}


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_flavour_detection(name):
    assert parse_mpirun_version(VERSIONS[name]).name == name


def test_openrte_banner_of_older_open_mpi():
    flavour = parse_mpirun_version("+ mpirun.real -vv --allow-run-as-root -version\n"
                                   "mpirun.real (OpenRTE) 4.0.5\n")
    assert flavour == MPIFlavour("openmpi", "4.0.5") and flavour.name == "openmpi4"


def test_unknown_mpirun_is_rejected():
    with pytest.raises(LaunchError, match="printed 'Usage: mpiexec', which is not Open MPI"):
        parse_mpirun_version("Usage: mpiexec\n")


def test_probe_finds_this_hosts_mpirun():
    assert probe_mpi_flavour().kind == "openmpi"


def test_probe_of_a_missing_mpirun():
    with pytest.raises(LaunchError, match="mpirun 'no-such-mpirun' was not found"):
        probe_mpi_flavour("no-such-mpirun")


TWO_HOSTS = (HostSpec("a", slots=2), HostSpec("b", slots=2))


def plan(hosts=TWO_HOSTS, **kw):
    return build_plan(hosts, ["bash", "run.sh"], master_addr="a", master_port=29555,
                      launcher="mpi", workdir="/srv/job",
                      job_env={"FOO": "bar", "API_TOKEN": "s3cret"}, **kw)


SETTINGS = Settings(bind_to="numa", map_by="socket", report_bindings=True,
                    mpi=MPISettings(args=("--mca", "pml", "ob1"),
                                    network_interface="10.0.0.7/24"))
INTERFACES = {"lo": ("127.0.0.1",), "eth1": ("10.0.0.7", "fe80::1%eth1")}


def command(name, settings=SETTINGS, is_root=True, **kw):
    return build_mpirun_command(plan(**kw), settings, parse_mpirun_version(VERSIONS[name]),
                                is_root=is_root, python="/usr/bin/python3",
                                hostfile_path="/tmp/job/hostfile", interfaces=INTERFACES,
                                launcher_env={"PYTHONPATH": "/opt/lib"})


# The job-wide variables of Paddle and JAX (each rank's own ones come from the shim).
FRAMEWORKS = ("PADDLE_GLOBAL_SIZE=4 PADDLE_MASTER=a:29555 PADDLE_NNODES=2 "
              "PADDLE_TRAINERS_NUM=4 PADDLE_TRAINER_ENDPOINTS=a:29556,a:29557,b:29556,b:29557")
JOB = ("FOO=bar GCURUN_BIND_TO=numa 'GCURUN_DEVICES=0,1;0,1' GCURUN_DEVICE_ISOLATION=0 "
       "GCURUN_DEVICE_VAR=TOPS_VISIBLE_DEVICES GCURUN_MPI_HOSTS=a,b GCURUN_MPI_SLOTS=2,2 "
       "JAX_COORDINATOR_ADDRESS=a:29555 MASTER_ADDR=a MASTER_PORT=29555 " + FRAMEWORKS
       + " PYTHONUNBUFFERED=1")


def genv(text):
    return " ".join(f"-genv {item.replace('=', ' ', 1)}" for item in text.split(" "))
TAIL = "--mca pml ob1 /usr/bin/python3 -m gcurun.launch.remote.mpi_shim -- bash run.sh"
EAGER = "--mca btl_tcp_eager_limit 524288 "         # (Open MPI, on several hosts)


def xs(flag):
    return " ".join(f"{flag} {item}" for item in JOB.split(" "))


SNAPSHOTS = {
    "openmpi4": (
        "mpirun --allow-run-as-root -np 4 -H a:2,b:2 --map-by socket --bind-to numa "
        "--tag-output --report-bindings --mca btl_tcp_if_include 10.0.0.0/24 "
        "--mca oob_tcp_if_include 10.0.0.0/24 --wdir /srv/job " + xs("-x")
        + " -x API_TOKEN -x PYTHONPATH " + EAGER + TAIL),
    "openmpi5": (
        "mpirun --allow-run-as-root -np 4 -H a:2,b:2 --map-by package --bind-to numa "
        "--output tag --display bindings --mca btl_tcp_if_include 10.0.0.0/24 "
        "--prtemca oob_tcp_if_include 10.0.0.0/24 --wdir /srv/job " + xs("-x")
        + " -x API_TOKEN -x PYTHONPATH " + EAGER + TAIL),
    "mpich": (
        "mpirun -n 4 -f /tmp/job/hostfile -bind-to numa -map-by socket -prepend-rank "
        "-iface eth1 -wdir /srv/job -genv FOO bar -genv GCURUN_BIND_TO numa "
        "-genv GCURUN_DEVICES '0,1;0,1' -genv GCURUN_DEVICE_ISOLATION 0 "
        "-genv GCURUN_DEVICE_VAR TOPS_VISIBLE_DEVICES "
        "-genv GCURUN_MPI_HOSTS a,b -genv GCURUN_MPI_HYDRA 1 -genv GCURUN_MPI_SLOTS 2,2 "
        "-genv JAX_COORDINATOR_ADDRESS a:29555 -genv MASTER_ADDR a "
        "-genv MASTER_PORT 29555 " + genv(FRAMEWORKS)
        + " -genv PYTHONUNBUFFERED 1 -genvlist API_TOKEN " + TAIL),
    "intel": (
        "mpirun -n 4 -machinefile /tmp/job/hostfile -prepend-rank -iface eth1 -wdir /srv/job "
        "-genv FOO bar -genv GCURUN_BIND_TO numa -genv GCURUN_DEVICES '0,1;0,1' "
        "-genv GCURUN_DEVICE_ISOLATION 0 "
        "-genv GCURUN_DEVICE_VAR TOPS_VISIBLE_DEVICES -genv GCURUN_MPI_HOSTS a,b "
        "-genv GCURUN_MPI_HYDRA 1 -genv GCURUN_MPI_SLOTS 2,2 -genv I_MPI_DEBUG 4 -genv I_MPI_PIN 1 "
        "-genv I_MPI_PIN_DOMAIN numa -genv I_MPI_PIN_ORDER scatter "
        "-genv JAX_COORDINATOR_ADDRESS a:29555 -genv MASTER_ADDR a "
        "-genv MASTER_PORT 29555 " + genv(FRAMEWORKS)
        + " -genv PYTHONUNBUFFERED 1 -genvlist API_TOKEN " + TAIL),
}


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_command_snapshot(name):
    cmd = command(name)
    assert shlex.join(cmd.argv) == SNAPSHOTS[name]
    assert cmd.env == {"API_TOKEN": "s3cret"}           # the secret's value: never in argv
    assert "s3cret" not in " ".join(cmd.argv)
    if name.startswith("openmpi"):
        assert cmd.hostfile is None and cmd.hostfile_path is None
    else:
        assert cmd.hostfile == "a:2\nb:2\n" and cmd.hostfile_path == "/tmp/job/hostfile"


def test_open_mpi_on_several_hosts_sends_the_rings_chunks_eagerly():
    # The limit must take a whole chunk of the runtime's streaming ring, with room for
    # Open MPI's header.
    assert TCP_EAGER_LIMIT >= STREAM_BYTES + (4 << 10)
    one_host = (HostSpec("a", slots=2),)
    mine = dataclasses.replace(SETTINGS, mpi=dataclasses.replace(
        SETTINGS.mpi, args=("--mca", "btl_tcp_eager_limit", "1048576")))
    for name in ("openmpi4", "openmpi5"):
        argv = command(name).argv
        at = argv.index("btl_tcp_eager_limit")
        assert argv[at - 1:at + 2] == ("--mca", "btl_tcp_eager_limit", "524288")
        assert "btl_tcp_eager_limit" not in command(name, hosts=one_host).argv
        # The user's own value wins, given to mpirun or in its environment.
        assert command(name, settings=mine).argv.count("btl_tcp_eager_limit") == 1
        assert "524288" not in command(name, settings=mine).argv
        env = build_mpirun_command(plan(), SETTINGS, parse_mpirun_version(VERSIONS[name]),
                                   is_root=True, python="/usr/bin/python3",
                                   launcher_env={"OMPI_MCA_btl_tcp_eager_limit": "9"})
        assert "btl_tcp_eager_limit" not in env.argv
    for name in ("mpich", "intel"):
        assert "btl_tcp_eager_limit" not in command(name).argv


@pytest.mark.parametrize(("name", "expected"), [
    ("openmpi5", ["--prtemca", "prte_local_tmpdir_base", "/tmp/job"]),
    ("openmpi4", ["--mca", "orte_local_tmpdir_base", "/tmp/job"]),
    ("mpich", None), ("intel", None),
])
def test_open_mpis_session_directory_goes_into_the_jobs_folder(name, expected):
    cmd = build_mpirun_command(plan(), SETTINGS, parse_mpirun_version(VERSIONS[name]),
                               is_root=False, python="/usr/bin/python3",
                               hostfile_path="/tmp/job/hostfile", interfaces=INTERFACES,
                               session_base="/tmp/job")
    if expected is None:
        assert "/tmp/job " not in shlex.join(cmd.argv) + " "
    else:
        assert list(cmd.argv[1:4]) == expected


def test_a_folder_too_deep_for_pmixs_sockets_keeps_the_default():
    assert session_base("/tmp/gcurun-mpi-abcd1234", "node-17") == "/tmp/gcurun-mpi-abcd1234"
    deep = "/scratch/" + "x" * 60
    assert session_base(deep, "node-17") is None


PLAIN = Settings()


@pytest.mark.parametrize("name,expected", [
    ("openmpi4", "mpirun -np 4 -H a:2,b:2 --map-by slot --bind-to none --tag-output"),
    ("openmpi5", "mpirun -np 4 -H a:2,b:2 --map-by slot --bind-to none --output tag"),
    ("mpich", "mpirun -n 4 -f /tmp/job/hostfile -bind-to none -prepend-rank"),
    ("intel", "mpirun -n 4 -machinefile /tmp/job/hostfile -prepend-rank"),
])
def test_defaults_as_non_root(name, expected):
    argv = shlex.join(command(name, PLAIN, is_root=False).argv)
    assert argv.startswith(expected + " ")
    assert "--allow-run-as-root" not in argv
    if name == "intel":
        assert "-genv I_MPI_PIN 0" in argv and "I_MPI_PIN_DOMAIN" not in argv


@pytest.mark.parametrize("name,expected", [
    ("openmpi4", "--map-by slot --bind-to core:overload-allowed --oversubscribe"),
    ("openmpi5", "--map-by slot:OVERSUBSCRIBE --bind-to core:overload-allowed --output"),
])
def test_oversubscription_flags(name, expected):
    argv = shlex.join(command(name, Settings(bind_to="core", oversubscribe=True)).argv)
    assert expected in argv


def test_many_hosts_go_to_a_hostfile_with_slots():
    hosts = tuple(HostSpec(f"n{i:02d}", slots=2) for i in range(9))
    cmd = command("openmpi5", PLAIN, hosts=hosts)
    assert cmd.argv[cmd.argv.index("--hostfile") + 1] == "/tmp/job/hostfile"
    assert "-H" not in cmd.argv
    assert cmd.hostfile == "".join(f"n{i:02d} slots=2\n" for i in range(9))


def test_ipv6_hosts_use_an_open_mpi_hostfile_and_are_refused_by_hydra():
    hosts = (HostSpec("fd00::2", slots=1), HostSpec("fd00::3", slots=1))
    assert command("openmpi4", PLAIN, hosts=hosts).hostfile == \
        "fd00::2 slots=1\nfd00::3 slots=1\n"
    with pytest.raises(LaunchError, match="host 'fd00::2': mpich hostfiles write host:N"):
        command("mpich", PLAIN, hosts=hosts)


def test_interface_by_name_for_every_flavour():
    s = Settings(mpi=MPISettings(network_interface="ib0"))
    assert "btl_tcp_if_include ib0" in shlex.join(command("openmpi5", s).argv)
    assert "-iface ib0" in shlex.join(command("intel", s).argv)


def test_cidr_without_a_matching_interface():
    s = Settings(mpi=MPISettings(network_interface="192.168.9.0/24"))
    with pytest.raises(UsageError, match=r"--network-interface 192.168.9.0/24: no interface "
                                         r"of this host has an address in it \(found: eth1 "):
        command("mpich", s)


@pytest.mark.parametrize("text,needle", [
    ("10.0.0.300/24", "'10.0.0.300/24': not a valid network"),
    ("eth0; rm -rf", "'eth0; rm -rf': not an interface name")])
def test_bad_network_interface(text, needle):
    with pytest.raises(UsageError, match=needle):
        parse_network_interface(text)


def test_interface_lookup_handles_ipv6_scopes():
    assert interface_for("fe80::/64", INTERFACES) == "eth1"


def test_secret_names():
    assert all(map(is_secret_name, ["GCURUN_SECRET", "HF_TOKEN", "DB_PASSWORD",
                                    "AWS_SECRET_ACCESS_KEY", "API_KEY"]))
    assert not any(map(is_secret_name, ["MASTER_PORT", "KEYBOARD", "MONKEY_PATH"]))


def test_variables_that_differ_between_ranks_cannot_go_through_mpirun():
    p = plan()
    ranks = list(p.ranks)
    ranks[1] = type(ranks[1])(**{**ranks[1].__dict__, "env": {**ranks[1].env, "FOO": "baz"}})
    with pytest.raises(LaunchError, match="variable FOO differs between ranks"):
        job_environment(type(p)(**{**p.__dict__, "ranks": tuple(ranks)}))


SSH = Settings(ssh=SSHSettings(config_file="/etc/gcurun/ssh_config", identity_file="/k/id",
                               port=2222, host_key_policy="accept-new"))
SSH_ARGS = "'-F /etc/gcurun/ssh_config -i /k/id -p 2222 -o StrictHostKeyChecking=accept-new'"


@pytest.mark.parametrize("name,expected", [
    ("openmpi4", "--mca plm_rsh_args " + SSH_ARGS),
    ("openmpi5", "--prtemca plm_ssh_args " + SSH_ARGS),
    ("mpich", "-launcher ssh -launcher-exec /tmp/job/ssh"),
    ("intel", "-launcher ssh -launcher-exec /tmp/job/ssh")])
def test_ssh_settings_reach_mpiruns_own_ssh(name, expected):
    cmd = command(name, SSH)
    assert expected in shlex.join(cmd.argv)
    if name in ("mpich", "intel"):      # Hydra has no option for ssh's own arguments
        assert (cmd.ssh_script_path, cmd.ssh_script) == (
            "/tmp/job/ssh", f'#!/bin/sh\nexec ssh {SSH_ARGS[1:-1]} "$@"\n')


def test_default_ssh_settings_add_nothing():
    assert "plm_ssh_args" not in command("openmpi5", PLAIN).argv


def test_per_host_user_cannot_go_through_mpirun():
    hosts = (HostSpec("a", slots=1, user="alice"), HostSpec("b", slots=1))
    with pytest.raises(LaunchError, match="host 'alice@a' has its own user or port"):
        command("openmpi5", PLAIN, hosts=hosts)


LAUNCHER = {"PYTHONPATH": "/opt/lib", "MY_SETTING": "v4lue", "HOROVOD_CYCLE_TIME": "7",
            "HOSTNAME": "launcher", "SSH_AUTH_SOCK": "/tmp/agent", "FOO": "other"}


def forwarded_command(name, mode):
    from gcurun.launch.planning.forwarding import plan_forwarding

    return command(name, forwarding=plan_forwarding(LAUNCHER, mode)).argv


@pytest.mark.parametrize("name", ["openmpi4", "openmpi5"])
def test_open_mpi_exports_the_forwarded_names_and_no_value(name):
    argv = shlex.join(forwarded_command(name, "all"))
    # FOO is the job's own (-x FOO=bar): the plan's value wins, given once.
    assert " -x API_TOKEN -x HOROVOD_CYCLE_TIME -x MY_SETTING -x PYTHONPATH " in argv
    assert "v4lue" not in argv and "-x FOO=bar" in argv and "-x FOO " not in argv
    assert "HOSTNAME" not in argv and "SSH_AUTH_SOCK" not in argv


def test_listed_keeps_mpiruns_x_names_and_the_runtimes_variables():
    argv = shlex.join(forwarded_command("openmpi4", "listed"))
    assert " -x API_TOKEN -x HOROVOD_CYCLE_TIME -x PYTHONPATH " in argv
    assert "MY_SETTING" not in argv


@pytest.mark.parametrize("name", ["mpich", "intel"])
def test_hydra_lists_the_forwarded_names(name):
    argv = forwarded_command(name, "all")
    assert argv[argv.index("-genvlist") + 1] == "API_TOKEN,HOROVOD_CYCLE_TIME,MY_SETTING,PYTHONPATH"
