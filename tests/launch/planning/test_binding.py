"""Binding plans on fake sysfs trees, checked against reviewed tables."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from gcurun.errors import PlanError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.topology import probe_topology
from gcurun.launch.api import Binding, LaunchPlan, RankSpec
from gcurun.launch.planning.binding import (
    LocalRank,
    bind_plan,
    bound_argv,
    format_binding_table,
    omp_num_threads,
    plan_bindings,
)
from tests.fakesys import build_fake_sysfs, eight_gcus


def make_plan(per_host: dict[str, int], devices: bool = True) -> LaunchPlan:
    ranks = []
    for node_rank, (host, count) in enumerate(per_host.items()):
        for local in range(count):
            ranks.append(RankSpec(
                rank=len(ranks), local_rank=local, local_size=count, cross_rank=node_rank,
                cross_size=len(per_host), node_rank=node_rank, host=host,
                is_local=node_rank == 0, device=str(local) if devices else None,
                argv=("python", "train.py"), env={"GCURUN_RANK": str(len(ranks))}))
    return LaunchPlan(ranks=tuple(ranks),
                      hosts=tuple(HostSpec(h, slots=c) for h, c in per_host.items()),
                      launcher="local", accelerator="gcu", device_var="TOPS_VISIBLE_DEVICES",
                      master_addr="127.0.0.1", master_port=29500, workdir="/tmp")


def table(tmp_path, bind_to, map_by="slot", *, nodes=(0, 0, 1, 1, 2, 2, 3, 3), np=8,
          **tree):
    topo = probe_topology(str(build_fake_sysfs(tmp_path, devices=eight_gcus(nodes), **tree)))
    plan, warnings = bind_plan(make_plan({"a": np}), {"a": topo}, bind_to, map_by)
    assert warnings == ()
    return format_binding_table(plan)


def reviewed(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def test_numa_binding_follows_each_device(tmp_path):
    assert table(tmp_path, "numa") == reviewed("""
        RANK  HOST  DEVICE  NUMA     CPUS
        0     a     0       0 (mem)  0-7
        1     a     1       0 (mem)  0-7
        2     a     2       1 (mem)  8-15
        3     a     3       1 (mem)  8-15
        4     a     4       2 (mem)  16-23
        5     a     5       2 (mem)  16-23
        6     a     6       3 (mem)  24-31
        7     a     7       3 (mem)  24-31
        """)


def test_core_binding_takes_successive_cores_of_the_device_node(tmp_path):
    assert table(tmp_path, "core", nodes=(3, 2, 1, 0, 3, 2, 1, 0)) == reviewed("""
        RANK  HOST  DEVICE  NUMA     CPUS
        0     a     0       3 (mem)  24
        1     a     1       2 (mem)  16
        2     a     2       1 (mem)  8
        3     a     3       0 (mem)  0
        4     a     4       3 (mem)  25
        5     a     5       2 (mem)  17
        6     a     6       1 (mem)  9
        7     a     7       0 (mem)  1
        """)


def test_socket_binding_spans_the_device_socket(tmp_path):
    assert table(tmp_path, "socket", nodes=(0, 3, 1, 2, 0, 3, 1, 2)) == reviewed("""
        RANK  HOST  DEVICE  NUMA  CPUS
        0     a     0       0     0-15
        1     a     1       3     16-31
        2     a     2       1     0-15
        3     a     3       2     16-31
        4     a     4       0     0-15
        5     a     5       3     16-31
        6     a     6       1     0-15
        7     a     7       2     16-31
        """)


UNKNOWN = (-1,) * 8


def test_unknown_locality_map_by_slot_fills_nodes_in_blocks(tmp_path):
    assert table(tmp_path, "core", "slot", nodes=UNKNOWN) == reviewed("""
        RANK  HOST  DEVICE  NUMA     CPUS
        0     a     0       0 (mem)  0
        1     a     1       0 (mem)  1
        2     a     2       1 (mem)  8
        3     a     3       1 (mem)  9
        4     a     4       2 (mem)  16
        5     a     5       2 (mem)  17
        6     a     6       3 (mem)  24
        7     a     7       3 (mem)  25
        """)


def test_unknown_locality_map_by_numa_round_robins_nodes(tmp_path):
    assert table(tmp_path, "core", "numa", nodes=UNKNOWN) == reviewed("""
        RANK  HOST  DEVICE  NUMA     CPUS
        0     a     0       0 (mem)  0
        1     a     1       1 (mem)  8
        2     a     2       2 (mem)  16
        3     a     3       3 (mem)  24
        4     a     4       0 (mem)  1
        5     a     5       1 (mem)  9
        6     a     6       2 (mem)  17
        7     a     7       3 (mem)  25
        """)


def test_unknown_locality_map_by_socket_alternates_sockets(tmp_path):
    assert table(tmp_path, "numa", "socket", nodes=UNKNOWN, np=4) == reviewed("""
        RANK  HOST  DEVICE  NUMA     CPUS
        0     a     0       0 (mem)  0-7
        1     a     1       2 (mem)  16-23
        2     a     2       1 (mem)  8-15
        3     a     3       3 (mem)  24-31
        """)


def test_smt_core_binding_gives_both_threads(tmp_path):
    assert table(tmp_path, "core", nodes=(1, 1, 0, 0), np=4, sockets=1, cores_per_node=2,
                 threads_per_core=2) == reviewed("""
        RANK  HOST  DEVICE  NUMA     CPUS
        0     a     0       1 (mem)  2,6
        1     a     1       1 (mem)  3,7
        2     a     2       0 (mem)  0,4
        3     a     3       0 (mem)  1,5
        """)


def test_bind_none_leaves_ranks_unbound(tmp_path):
    assert table(tmp_path, "none", np=2) == reviewed("""
        RANK  HOST  DEVICE  NUMA  CPUS
        0     a     0       -     not bound
        1     a     1       -     not bound
        """)


def small(tmp_path, cores=2):
    return probe_topology(str(build_fake_sysfs(tmp_path, sockets=1, nodes_per_socket=1,
                                               cores_per_node=cores)))


def test_more_ranks_than_cores_is_an_error_with_the_arithmetic(tmp_path):
    ranks = [LocalRank(r, r, str(r)) for r in range(3)]
    with pytest.raises(PlanError) as info:
        plan_bindings(small(tmp_path), ranks, "core", host="node7")
    assert str(info.value) == (
        "--bind-to core on node7: NUMA node 0 gets 3 ranks (ranks 0-2) but has 2 cores "
        "(CPUs 0-1): 3 ranks > 2 cores. Start at most 2 ranks there, use --bind-to none, "
        "or let ranks share cores with --oversubscribe")


def test_devices_crowding_one_node_overflow_it(tmp_path):
    topo = probe_topology(str(build_fake_sysfs(tmp_path, cores_per_node=2,
                                               devices=eight_gcus((0, 0, 0, 1)))))
    with pytest.raises(PlanError, match=r"NUMA node 0 gets 3 ranks \(ranks 4-6\) but has "
                                        r"2 cores \(CPUs 0-1\): 3 ranks > 2 cores"):
        plan_bindings(topo, [LocalRank(4 + r, r, str(r)) for r in range(4)], "numa")


def test_oversubscription_warns_and_shares_cores(tmp_path):
    ranks = [LocalRank(r, r, None) for r in range(3)]
    result = plan_bindings(small(tmp_path), ranks, "core", oversubscribe=True)
    assert [b.cpus for b in result.bindings] == [(0,), (1,), (0,)]
    assert result.warnings == (
        "--bind-to core on localhost: NUMA node 0 gets 3 ranks (ranks 0-2) but has 2 cores "
        "(CPUs 0-1): 3 ranks > 2 cores; ranks will share cores (oversubscription allowed)",)


def test_socket_overflow_names_the_socket(tmp_path):
    topo = small(tmp_path, cores=1)
    with pytest.raises(PlanError, match=r"socket 0 gets 2 ranks \(ranks 0-1\) but has "
                                        r"1 core \(CPUs 0\): 2 ranks > 1 core\. Start at "
                                        r"most 1 rank there"):
        plan_bindings(topo, [LocalRank(0, 0), LocalRank(1, 1)], "socket")


@pytest.mark.parametrize("bind_to,map_by,needle", [
    ("l3cache", "slot", "--bind-to 'l3cache': not a binding; use one of none, core"),
    ("core", "node", "--map-by 'node': not a mapping; use one of slot, numa, socket")])
def test_unknown_modes_are_rejected(tmp_path, bind_to, map_by, needle):
    with pytest.raises(PlanError, match=needle):
        plan_bindings(small(tmp_path), [LocalRank(0, 0)], bind_to, map_by)


def test_bind_plan_per_host_and_omp_threads(tmp_path):
    a = probe_topology(str(build_fake_sysfs(tmp_path / "a", devices=eight_gcus())))
    b = small(tmp_path / "b", cores=4)
    plan = make_plan({"a": 2, "b": 2})
    bound, _ = bind_plan(plan, {"a": a, "b": b}, "numa")
    assert [r.binding for r in bound.ranks] == [
        Binding((0, 1, 2, 3, 4, 5, 6, 7), 0, True), Binding((0, 1, 2, 3, 4, 5, 6, 7), 0, True),
        Binding((0, 1, 2, 3), 0, True), Binding((0, 1, 2, 3), 0, True)]
    assert [r.env["OMP_NUM_THREADS"] for r in bound.ranks] == ["8", "8", "4", "4"]
    assert bound.ranks[0].env["GCURUN_RANK"] == "0"
    kept, _ = bind_plan(plan, {"a": a, "b": b}, "core", user_env={"OMP_NUM_THREADS": "3"})
    assert all("OMP_NUM_THREADS" not in r.env for r in kept.ranks)


def test_bind_plan_needs_every_host_topology(tmp_path):
    with pytest.raises(PlanError, match="topology of host 'b' is unknown"):
        bind_plan(make_plan({"a": 1, "b": 1}), {"a": small(tmp_path)}, "core")


def test_omp_rule():
    b = Binding((0, 1, 2), 0, True)
    assert omp_num_threads(b, {}) == "3"
    assert omp_num_threads(b, {"OMP_NUM_THREADS": "1"}) is None
    assert omp_num_threads(None, {}) is None


def test_bound_argv_forms():
    b = Binding((0, 1, 2, 3, 8), 1, True)
    assert bound_argv(b, ["python", "t.py"], "/usr/bin/numactl") == [
        "/usr/bin/numactl", "--physcpubind=0-3,8", "--membind=1", "--", "python", "t.py"]
    assert bound_argv(Binding((4,), 1, False), ["x"], "numactl") == [
        "numactl", "--physcpubind=4", "--", "x"]
    fallback = bound_argv(b, ["python", "t.py"], None, python="/py")
    assert fallback[0] == "/py" and fallback[1].endswith("bind_exec.py")
    assert fallback[2:] == ["--cpus", "0,1,2,3,8", "--", "python", "t.py"]
    assert bound_argv(b, ["x"], "numactl", numa_known=False)[2:4] == ["--cpus", "0,1,2,3,8"]
    assert bound_argv(None, ["x"], "numactl") == ["x"]


PRINT_AFFINITY = "import os; print(sorted(os.sched_getaffinity(0)))"


@pytest.mark.parametrize("numactl", ["numactl", None])
def test_bound_argv_really_binds(numactl):
    if numactl and not __import__("shutil").which(numactl):
        pytest.skip("numactl is not installed")
    cpu = max(os.sched_getaffinity(0))
    argv = bound_argv(Binding((cpu,), 0, True), [sys.executable, "-c", PRINT_AFFINITY],
                      numactl)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == f"[{cpu}]"


def test_bind_exec_reports_a_missing_command():
    argv = bound_argv(Binding((0,), 0, False), ["no-such-command-xyz"], None)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 127
    assert "cannot run 'no-such-command-xyz'" in out.stderr


def test_bind_exec_restores_sigpipe():
    import signal

    out = subprocess.run(bound_argv(Binding((0,), 0, False), ["cat", "/proc/self/status"],
                                    None), capture_output=True, text=True, timeout=60)
    mask = int(next(line for line in out.stdout.splitlines()
                    if line.startswith("SigIgn:")).split()[1], 16)
    assert not mask & (1 << (signal.SIGPIPE - 1))
