"""Where hosts come from when nobody names them: Grid Engine, LSF and the MPI Operator
read from the variables and files each one sets (written here as each one writes them),
and the order the sources are asked in."""

from __future__ import annotations

import pytest

from gcurun.config.resolve import resolve_settings
from gcurun.errors import HostSpecError, UsageError
from gcurun.hosts.allocation import SOURCES, find_allocation
from gcurun.hosts.api import HostSpec
from gcurun.hosts.gridengine import parse_pe_hostfile
from gcurun.hosts.lsf import parse_mcpu_hosts

# Grid Engine 8.1.9, `qsub -pe gcurun 6` on two hosts (the master host first).
PE_FILE = "node01 4 all.q@node01 UNDEFINED\nnode02 2 all.q@node02 UNDEFINED\n"
QSUB = {"JOB_ID": "17", "NSLOTS": "6", "PE": "gcurun", "SGE_ROOT": "/var/lib/gridengine",
        "PE_HOSTFILE": "/spool/node01/active_jobs/17.1/pe_hostfile"}
# LSF, `bsub -n 6`: the host file has a line per slot; LSB_MCPU_HOSTS a pair per host.
LSF_FILE = "hostA\nhostA\nhostA\nhostA\nhostB\nhostB\n"
BSUB = {"LSB_JOBID": "4242", "LSB_DJOB_HOSTFILE": "/home/u/.lsbatch/1700000000.4242.hostfile",
        "LSB_MCPU_HOSTS": "hostA 4 hostB 2", "LSB_HOSTS": "hostA hostA hostA hostA hostB hostB"}
# kubeflow/mpi-operator v2beta1, an Open MPI MPIJob "pi" with 2 workers, slotsPerWorker 2.
OPERATOR_FILE = ("pi-worker-0.pi.default.svc slots=2\n"
                 "pi-worker-1.pi.default.svc slots=2\n")
LAUNCHER = {"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
            "OMPI_MCA_orte_set_default_slots": "2"}
FILES = {QSUB["PE_HOSTFILE"]: PE_FILE, BSUB["LSB_DJOB_HOSTFILE"]: LSF_FILE,
         "/etc/mpi/hostfile": OPERATOR_FILE,
         "/etc/mpi/hostfile-intel": "pi-worker-0.pi.default.svc:2\n"}


def read(path: str) -> str:
    try:
        return FILES[path]
    except KeyError:
        raise FileNotFoundError(2, "No such file or directory", path) from None


def no_jsrun(name: str) -> str | None:
    return None


def find(env, which=no_jsrun):
    return find_allocation(env, read, which)


def test_the_sources_are_asked_in_the_documented_order():
    assert [name for name, _ in SOURCES] == ["slurm", "gridengine", "lsf", "mpi-operator"]


def test_outside_every_allocation_there_is_none():
    assert find({"PATH": "/bin", "JOB_ID": "3", "NSLOTS": "1"}) is None


def test_a_grid_engine_pe_job_gives_its_hosts_and_slots():
    found = find(QSUB)
    assert (found.label, found.job_id, found.num_tasks) == ("gridengine:PE_HOSTFILE", "17", 6)
    assert found.hosts == (HostSpec("node01", 4), HostSpec("node02", 2))


def test_a_host_on_two_pe_hostfile_lines_gets_the_sum_of_its_slots():
    text = "n1 2 a.q@n1 UNDEFINED\nn1 1 b.q@n1 UNDEFINED\n"
    assert parse_pe_hostfile(text) == (HostSpec("n1", 3),)


@pytest.mark.parametrize(("env", "text", "message"), [
    ({**QSUB, "NSLOTS": "5"}, PE_FILE,
     "NSLOTS='5' but PE_HOSTFILE '/spool/node01/active_jobs/17.1/pe_hostfile' grants 6 slots"),
    (QSUB, "node01 four all.q@node01 UNDEFINED\n",
     "PE_HOSTFILE '/spool/node01/active_jobs/17.1/pe_hostfile' line 1 'node01 four "
     "all.q@node01 UNDEFINED': expected 'HOST SLOTS QUEUE PROCESSORS'"),
    (QSUB, "\n", "PE_HOSTFILE '/spool/node01/active_jobs/17.1/pe_hostfile' lists no host"),
])
def test_a_bad_grid_engine_job_is_named(env, text, message):
    with pytest.raises(HostSpecError, match="^" + message.replace("[", r"\[")
                       .replace(".", r"\.").replace("(", r"\(")):
        find_allocation(env, lambda path: text, no_jsrun)


def test_a_pe_hostfile_that_cannot_be_read_is_named():
    with pytest.raises(HostSpecError) as info:
        find({**QSUB, "PE_HOSTFILE": "/nowhere/pe_hostfile"})
    assert str(info.value) == (
        "PE_HOSTFILE '/nowhere/pe_hostfile' cannot be read: No such file or directory; "
        "run gcurun on the job's master host, where Grid Engine writes it")


def test_lsf_reads_the_host_file_first():
    found = find(BSUB)
    assert (found.label, found.job_id, found.num_tasks) == ("lsf:LSB_DJOB_HOSTFILE", "4242", 6)
    assert found.hosts == (HostSpec("hostA", 4), HostSpec("hostB", 2))


def test_lsf_without_a_host_file_reads_lsb_mcpu_hosts_then_lsb_hosts():
    env = {k: v for k, v in BSUB.items() if k != "LSB_DJOB_HOSTFILE"}
    assert find(env).label == "lsf:LSB_MCPU_HOSTS"
    assert find(env).hosts == (HostSpec("hostA", 4), HostSpec("hostB", 2))
    env.pop("LSB_MCPU_HOSTS")
    assert (find(env).label, find(env).hosts) == \
        ("lsf:LSB_HOSTS", (HostSpec("hostA", 4), HostSpec("hostB", 2)))


def test_with_jsrun_the_launch_node_runs_no_rank():
    # A CSM cluster (Summit's kind): the job script runs on a launch node listed first.
    env = {"LSB_JOBID": "9", "LSB_MCPU_HOSTS": "batch1 1 a01n01 42 a01n02 42"}
    found = find(env, which=lambda name: "/opt/ibm/jsm/bin/jsrun")
    assert found.hosts == (HostSpec("a01n01", 42), HostSpec("a01n02", 42))
    assert found.num_tasks == 84


@pytest.mark.parametrize(("text", "message"), [
    ("hostA 4 hostB", "LSB_MCPU_HOSTS='hostA 4 hostB': expected pairs 'HOST SLOTS', got 3 "
                      "words"),
    ("hostA 0", "LSB_MCPU_HOSTS='hostA 0': '0' after host 'hostA' is not a slot count"),
])
def test_a_bad_lsb_mcpu_hosts_is_named(text, message):
    with pytest.raises(HostSpecError, match="^" + message.replace("(", r"\(")):
        parse_mcpu_hosts(text)


def test_lsf_with_no_host_named_is_refused():
    with pytest.raises(HostSpecError, match="^LSB_JOBID='9' is set but none of "
                                            "LSB_DJOB_HOSTFILE, LSB_MCPU_HOSTS, LSB_HOSTS"):
        find({"LSB_JOBID": "9"})


def test_an_mpi_operator_launcher_gives_the_workers():
    found = find(LAUNCHER)
    assert found.label == "mpi-operator:/etc/mpi/hostfile"
    assert found.hosts == (HostSpec("pi-worker-0.pi.default.svc", 2),
                           HostSpec("pi-worker-1.pi.default.svc", 2))
    assert (found.num_tasks, found.slots_per_host, found.host_key_policy) == \
        (4, 2, "accept-new")


def test_an_intel_mpi_launcher_reads_its_own_variable_and_form():
    env = {"K_MPI_JOB_ROLE": "launcher", "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile-intel",
           "I_MPI_PERHOST": "2"}
    assert find(env).hosts == (HostSpec("pi-worker-0.pi.default.svc", 2),)


def test_a_worker_pod_is_no_launcher():
    assert find({**LAUNCHER, "K_MPI_JOB_ROLE": "worker"}) is None


def test_slurm_comes_before_the_others():
    slurm = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "s1", "SLURM_JOB_CPUS_PER_NODE": "1",
             "SLURM_TASKS_PER_NODE": "1"}
    assert find({**QSUB, **BSUB, **LAUNCHER, **slurm}).source == "slurm"
    assert find({**QSUB, **BSUB, **LAUNCHER}).source == "gridengine"
    assert find({**BSUB, **LAUNCHER}).source == "lsf"


def test_settings_take_the_allocation_unless_a_layer_names_hosts(tmp_path):
    pe = tmp_path / "pe_hostfile"
    pe.write_text(PE_FILE)
    env = {**QSUB, "PE_HOSTFILE": str(pe)}
    settings = resolve_settings({}, None, env)
    assert (settings.np, settings.sources["np"], settings.sources["hosts"]) == \
        (6, "gridengine:PE_HOSTFILE", "gridengine:PE_HOSTFILE")
    given = resolve_settings({"hosts": (HostSpec("x", 1),), "np": 1}, None, env)
    assert (given.hosts, given.sources["hosts"]) == ((HostSpec("x", 1),), "cli")


def test_an_elastic_job_in_a_launcher_pod_uses_the_operators_discovery_script(tmp_path):
    (tmp_path / "hostfile").write_text(OPERATOR_FILE)
    script = tmp_path / "discover_hosts.sh"
    script.write_text("#!/bin/sh\necho pi-worker-0.pi.default.svc\n")
    script.chmod(0o555)
    env = {**LAUNCHER, "OMPI_MCA_orte_default_hostfile": str(tmp_path / "hostfile")}
    settings = resolve_settings({"elastic.min_np": 2}, None, env)
    assert settings.elastic.host_discovery_script == str(script)
    assert (settings.elastic.slots, settings.sources["elastic.slots"]) == (2, "mpi-operator")
    assert settings.ssh.host_key_policy == "accept-new"
    static = resolve_settings({"ssh.host_key_policy": "strict"}, None, env)
    assert (static.elastic.host_discovery_script, static.ssh.host_key_policy) == \
        (None, "strict")


def test_a_malformed_allocation_is_a_usage_error():
    with pytest.raises(UsageError):
        resolve_settings({}, None, {"LSB_JOBID": "1", "LSB_MCPU_HOSTS": "a"})


def test_a_launcher_whose_hostfile_is_missing_is_told_where_the_operator_mounts_it():
    with pytest.raises(HostSpecError) as info:
        find({"K_MPI_JOB_ROLE": "launcher", "HYDRA_HOST_FILE": "/etc/mpi/gone"})
    assert str(info.value) == (
        "HYDRA_HOST_FILE '/etc/mpi/gone' cannot be read: No such file or directory; the MPI "
        "Operator mounts it in the launcher pod; run gcurun in the launcher's container")
    with pytest.raises(HostSpecError, match="^the MPI Operator's hostfile '/etc/mpi/hostfile' "
                                            "cannot be read"):
        find_allocation({"K_MPI_JOB_ROLE": "launcher"}, lambda path: read(path + ".gone"),
                        no_jsrun)
