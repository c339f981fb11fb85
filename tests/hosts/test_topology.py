from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gcurun.hosts import sysfs_snapshot
from gcurun.hosts.topology import (
    TopologyError,
    format_cpulist,
    parse_cpulist,
    parse_topology,
    parse_topology_json,
    probe_topology,
    remote_probe_source,
)
from tests.fakesys import NVIDIA, FakeDevice, build_fake_sysfs, eight_gcus


def test_parse_cpulist_ranges_and_singles():
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("") == ()


@pytest.mark.parametrize("text,needle", [("0-a", "'0-a' is not N or N-M"),
                                         ("5-2", "range 5-2 runs backwards")])
def test_parse_cpulist_rejects_garbage(text, needle):
    with pytest.raises(TopologyError, match=needle):
        parse_cpulist(text)


def test_format_cpulist_round_trips():
    assert format_cpulist((5, 0, 1, 2, 9, 10)) == "0-2,5,9-10"
    assert parse_cpulist(format_cpulist((5, 0, 1, 2, 9, 10))) == (0, 1, 2, 5, 9, 10)


def test_two_sockets_two_nodes_each(tmp_path):
    root = build_fake_sysfs(tmp_path, devices=eight_gcus())
    topo = probe_topology(str(root))
    assert topo.numa_known
    assert [n.id for n in topo.numa_nodes] == [0, 1, 2, 3]
    assert [n.cpus for n in topo.numa_nodes] == [tuple(range(8 * i, 8 * i + 8))
                                                  for i in range(4)]
    assert {n.memory_kb for n in topo.numa_nodes} == {16 * 1024 * 1024}
    assert topo.sockets == {0: tuple(range(16)), 1: tuple(range(16, 32))}
    assert [topo.socket_of_node(n) for n in range(4)] == [0, 0, 1, 1]
    assert len(topo.cores) == 32


def test_accelerators_sorted_by_pci_address_with_their_nodes(tmp_path):
    root = build_fake_sysfs(tmp_path, devices=eight_gcus((1, 1, 0, 0, 3, 3, 2, -1)))
    topo = probe_topology(str(root))
    gcus = topo.accelerators("gcu")
    assert [d.bdf for d in gcus] == [f"0000:{0x10 + 0x10 * i:02x}:00.0" for i in range(8)]
    assert [topo.device_numa_node("gcu", str(i)) for i in range(8)] == [
        1, 1, 0, 0, 3, 3, 2, None]
    assert gcus[0].vendor == 0x1E36 and gcus[0].driver == "enflame"
    assert topo.device_numa_node("gcu", "8") is None        # no such device
    assert topo.device_numa_node("gcu", "GCU-U53") is None  # not an index
    assert topo.accelerators("cuda") == ()


def test_accelerator_kinds_do_not_mix(tmp_path):
    devs = (FakeDevice(bdf="0000:3b:00.0", vendor=NVIDIA, pci_class=0x030200,
                       numa_node=1, driver="nvidia"),
            FakeDevice(bdf="0000:3b:00.1", vendor=NVIDIA, pci_class=0x040300,
                       numa_node=1, driver="snd_hda_intel"),   # the card's audio part
            FakeDevice(bdf="0000:5e:00.0", numa_node=0))
    topo = probe_topology(str(build_fake_sysfs(tmp_path, devices=devs)))
    assert [d.bdf for d in topo.accelerators("cuda")] == ["0000:3b:00.0"]
    assert [d.bdf for d in topo.accelerators("gcu")] == ["0000:5e:00.0"]


def test_enflame_driver_identifies_a_rebadged_board(tmp_path):
    dev = FakeDevice(bdf="0000:01:00.0", vendor=0x1D17, numa_node=2)
    topo = probe_topology(str(build_fake_sysfs(tmp_path, devices=(dev,))))
    assert topo.device_numa_node("gcu", "0") == 2


def test_smt_siblings_form_one_core(tmp_path):
    root = build_fake_sysfs(tmp_path, sockets=1, nodes_per_socket=2, cores_per_node=2,
                            threads_per_core=2)
    topo = probe_topology(str(root))
    assert topo.cores == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert topo.node(1).cpus == (2, 3, 6, 7)
    assert topo.cores_of(topo.node(1).cpus) == ((2, 6), (3, 7))


def test_without_numa_directories_one_node_is_assumed(tmp_path):
    root = build_fake_sysfs(tmp_path, sockets=1, nodes_per_socket=1, cores_per_node=4,
                            numa=False)
    topo = probe_topology(str(root))
    assert not topo.numa_known
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, (0, 1, 2, 3))]


def test_allowed_cpus_restrict_the_usable_set(tmp_path):
    files = sysfs_snapshot.snapshot(str(build_fake_sysfs(tmp_path)), affinity=False)
    files["@allowed_cpus"] = "2-5,20"
    topo = parse_topology(files)
    assert [c.id for c in topo.cpus] == [2, 3, 4, 5, 20]
    assert topo.node(0).cpus == (2, 3, 4, 5)
    assert topo.node(1).cpus == ()
    assert topo.node(2).cpus == (20,)


def test_a_tree_without_cpus_is_an_error(tmp_path):
    with pytest.raises(TopologyError, match="no usable CPU"):
        probe_topology(str(tmp_path))


def test_this_machine_matches_the_scheduler():
    topo = probe_topology()
    assert {c.id for c in topo.cpus} == set(os.sched_getaffinity(0))
    assert {c for n in topo.numa_nodes for c in n.cpus} == set(os.sched_getaffinity(0))


def test_remote_probe_program_runs_from_stdin(tmp_path):
    root = build_fake_sysfs(tmp_path, devices=eight_gcus())
    out = subprocess.run([sys.executable, "-", str(root)], input=remote_probe_source(),
                         capture_output=True, text=True, timeout=60, check=True,
                         env={"PATH": os.environ.get("PATH", "")}, cwd=str(tmp_path))
    remote = parse_topology_json(out.stdout)
    assert remote == probe_topology(str(root))
    assert "@allowed_cpus" not in json.loads(out.stdout)


def test_bad_probe_output_is_reported():
    with pytest.raises(TopologyError, match="no valid JSON"):
        parse_topology_json("bash: python3: command not found")
