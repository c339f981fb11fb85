"""Fake sysfs trees for topology and binding tests.

``build_fake_sysfs(tmp_path, ...)`` writes the files a real kernel exposes under /sys for
CPUs, NUMA nodes and PCI devices, so topology code can be pointed at any machine shape.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENFLAME = 0x1E36
NVIDIA = 0x10DE


@dataclass(frozen=True)
class FakeDevice:
    bdf: str
    vendor: int = ENFLAME
    pci_class: int = 0x120000
    numa_node: int = -1
    driver: str | None = "enflame"
    device: int = 0x0021


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _cpulist(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus) + "\n"


def build_fake_sysfs(root: Path, *, sockets: int = 2, nodes_per_socket: int = 2,
                     cores_per_node: int = 8, threads_per_core: int = 1,
                     devices: tuple[FakeDevice, ...] = (), numa: bool = True,
                     node_memory_kb: int = 16 * 1024 * 1024) -> Path:
    """Write a tree with ``sockets x nodes_per_socket`` NUMA nodes.

    CPUs are numbered like Linux does on most x86 servers: first thread of every core
    across the machine, then the second threads (so SMT siblings are ``c`` and
    ``c + cores``).
    """
    total_cores = sockets * nodes_per_socket * cores_per_node
    node_cpus: dict[int, list[int]] = {}
    for core in range(total_cores):
        node = core // cores_per_node
        socket = node // nodes_per_socket
        core_id = core % (nodes_per_socket * cores_per_node)
        for thread in range(threads_per_core):
            cpu = core + thread * total_cores
            node_cpus.setdefault(node, []).append(cpu)
            topo = root / f"devices/system/cpu/cpu{cpu}/topology"
            _write(topo / "physical_package_id", f"{socket}\n")
            _write(topo / "core_id", f"{core_id}\n")
    _write(root / "devices/system/cpu/online", f"0-{total_cores * threads_per_core - 1}\n")
    if numa:
        for node, cpus in node_cpus.items():
            base = root / f"devices/system/node/node{node}"
            _write(base / "cpulist", _cpulist(sorted(cpus)))
            _write(base / "meminfo", f"Node {node} MemTotal:       {node_memory_kb} kB\n"
                                     f"Node {node} MemFree:        {node_memory_kb // 2} kB\n")
    for dev in devices:
        add_pci_device(root, dev)
    return root


def add_pci_device(root: Path, dev: FakeDevice) -> None:
    base = root / "bus/pci/devices" / dev.bdf
    _write(base / "vendor", f"0x{dev.vendor:04x}\n")
    _write(base / "device", f"0x{dev.device:04x}\n")
    _write(base / "class", f"0x{dev.pci_class:06x}\n")
    _write(base / "numa_node", f"{dev.numa_node}\n")
    if dev.driver:
        drv = root / "bus/pci/drivers" / dev.driver
        drv.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(drv, base), base / "driver")


def eight_gcus(nodes: tuple[int, ...] = (0, 0, 1, 1, 2, 2, 3, 3)) -> tuple[FakeDevice, ...]:
    """Eight Enflame GCUs, device i on NUMA node nodes[i], listed out of PCI order on
    purpose (sysfs order must not matter)."""
    devs = [FakeDevice(bdf=f"0000:{0x10 + 0x10 * i:02x}:00.0", numa_node=n)
            for i, n in enumerate(nodes)]
    return tuple(reversed(devs))
