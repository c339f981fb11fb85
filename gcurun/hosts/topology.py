"""A host's CPU, NUMA and accelerator topology, read from sysfs.

:func:`parse_topology` is pure: it takes the files a sysfs snapshot collected
(:mod:`gcurun.hosts.sysfs_snapshot`, locally or over SSH) and returns a frozen
:class:`Topology`. :func:`probe_topology` does the reading on this host; its ``root`` can
point at a fake tree, so tests describe any machine.

Accelerator device ids (``TOPS_VISIBLE_DEVICES=3``) are matched to PCI functions by
position: device ``i`` is the ``i``-th accelerator of that kind in PCI address order,
which is how the drivers of every supported accelerator number their devices.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from gcurun.errors import GcurunError
from gcurun.hosts import sysfs_snapshot

# PCI vendor ids per accelerator kind. Enflame's is 0x1e36 (pci.ids: "Shanghai Enflame
# Technology Co. Ltd"); 0x1ea0 belongs to Tencent, whose cards are not GCUs.
ACCELERATOR_PCI_VENDORS: Mapping[str, tuple[int, ...]] = {
    "gcu": (0x1E36,),
    "cuda": (0x10DE,),
    "rocm": (0x1002,),
    "ascend": (0x19E5,),
    "mlu": (0xCABC,),
    "none": (),
}
# Kernel driver names that identify an accelerator even under an unexpected vendor id
# (OEM boards re-badged under another vendor).
ACCELERATOR_DRIVERS: Mapping[str, tuple[str, ...]] = {
    "gcu": ("enflame",),
    "cuda": ("nvidia",),
    "rocm": ("amdgpu",),
    "ascend": ("devdrv_device_driver",),
    "mlu": ("cambricon",),
    "none": (),
}

_NODE_CPULIST = re.compile(r"devices/system/node/node(\d+)/cpulist$")
_CPU_TOPOLOGY = re.compile(r"devices/system/cpu/cpu(\d+)/topology/(physical_package_id|core_id)$")
_PCI_CLASS = re.compile(r"bus/pci/devices/([^/]+)/class$")
_MEMTOTAL = re.compile(r"MemTotal:\s*(\d+)\s*kB")


class TopologyError(GcurunError):
    """A sysfs snapshot that cannot be understood (a malformed CPU list, say)."""


@dataclass(frozen=True)
class Cpu:
    """One logical CPU (hardware thread) and where it sits."""

    id: int
    core: int        # core_id, unique within its socket
    socket: int      # physical_package_id
    numa_node: int


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...]           # usable CPUs only; empty for memory-only nodes
    memory_kb: int | None = None


@dataclass(frozen=True)
class PciDevice:
    """A PCI function that may be an accelerator (display, co-processor or accelerator
    class). ``numa_node`` is None where the platform does not report it (``-1``)."""

    bdf: str
    vendor: int
    device: int
    pci_class: int
    numa_node: int | None = None
    driver: str | None = None


@dataclass(frozen=True)
class Topology:
    """What binding decisions need to know about one host.

    ``cpus`` holds the usable CPUs (online, and allowed to this process where that was
    read) in ascending order. ``numa_known`` is False when sysfs had no NUMA nodes and
    one node 0 holding every CPU was assumed.
    """

    cpus: tuple[Cpu, ...]
    numa_nodes: tuple[NumaNode, ...]
    pci_devices: tuple[PciDevice, ...] = ()
    numa_known: bool = True

    @cached_property
    def cores(self) -> tuple[tuple[int, ...], ...]:
        """CPUs grouped by physical core, in order of each core's lowest CPU."""
        groups: dict[tuple[int, int], list[int]] = {}
        for cpu in self.cpus:
            groups.setdefault((cpu.socket, cpu.core), []).append(cpu.id)
        return tuple(sorted((tuple(g) for g in groups.values()), key=lambda g: g[0]))

    @cached_property
    def sockets(self) -> dict[int, tuple[int, ...]]:
        """Socket id -> its usable CPUs."""
        out: dict[int, list[int]] = {}
        for cpu in self.cpus:
            out.setdefault(cpu.socket, []).append(cpu.id)
        return {s: tuple(c) for s, c in sorted(out.items())}

    def node(self, node_id: int) -> NumaNode:
        for node in self.numa_nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def socket_of_node(self, node_id: int) -> int | None:
        """The socket of a node's first CPU; None for a node without CPUs."""
        for cpu in self.cpus:
            if cpu.numa_node == node_id:
                return cpu.socket
        return None

    def cores_of(self, cpus: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The cores whose CPUs all lie in ``cpus`` (in core order)."""
        wanted = set(cpus)
        return tuple(core for core in self.cores if wanted.issuperset(core))

    def accelerators(self, accelerator: str) -> tuple[PciDevice, ...]:
        """The PCI functions of one accelerator kind, in PCI address order."""
        vendors = ACCELERATOR_PCI_VENDORS.get(accelerator, ())
        drivers = ACCELERATOR_DRIVERS.get(accelerator, ())
        found = [d for d in self.pci_devices if d.vendor in vendors or d.driver in drivers]
        return tuple(sorted(found, key=lambda d: d.bdf))

    def device_numa_node(self, accelerator: str, device: str | None) -> int | None:
        """The NUMA node of accelerator ``device`` (an index like ``"3"``), or None when
        it is not a plain index, not present, or its locality is unknown."""
        if device is None or not device.strip().isdigit():
            return None
        found = self.accelerators(accelerator)
        index = int(device)
        if index >= len(found):
            return None
        node = found[index].numa_node
        if node is None or not any(n.id == node and n.cpus for n in self.numa_nodes):
            return None
        return node


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a kernel CPU list (``0-3,8,10-11``) into sorted CPU ids.

    Raises TopologyError for anything else.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise TopologyError(f"CPU list {text.strip()!r}: {part!r} is not N or N-M; "
                                "expected the kernel's format, e.g. 0-3,8")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise TopologyError(f"CPU list {text.strip()!r}: range {part} runs backwards")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: tuple[int, ...] | list[int]) -> str:
    """The kernel's compact form of a CPU set: ``(0, 1, 2, 5)`` -> ``0-2,5``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def _int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def _numa_nodes(files: Mapping[str, str]) -> dict[int, tuple[tuple[int, ...], int | None]]:
    nodes = {}
    for path, text in files.items():
        match = _NODE_CPULIST.match(path)
        if match:
            node = int(match.group(1))
            meminfo = files.get(f"devices/system/node/node{node}/meminfo", "")
            mem = _MEMTOTAL.search(meminfo)
            nodes[node] = (parse_cpulist(text), int(mem.group(1)) if mem else None)
    return dict(sorted(nodes.items()))


def _cpu_facts(files: Mapping[str, str]) -> dict[int, dict[str, int]]:
    facts: dict[int, dict[str, int]] = {}
    for path, text in files.items():
        match = _CPU_TOPOLOGY.match(path)
        value = _int(text)
        if match and value is not None:
            facts.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return facts


def _usable_cpus(files: Mapping[str, str], nodes: Mapping[int, tuple]) -> tuple[int, ...]:
    if "devices/system/cpu/online" in files:
        usable = set(parse_cpulist(files["devices/system/cpu/online"]))
    else:
        usable = {c for cpus, _ in nodes.values() for c in cpus}
    if "@allowed_cpus" in files:
        usable &= set(parse_cpulist(files["@allowed_cpus"]))
    return tuple(sorted(usable))


def _pci_devices(files: Mapping[str, str]) -> tuple[PciDevice, ...]:
    devices = []
    for path, text in sorted(files.items()):
        match = _PCI_CLASS.match(path)
        if not match:
            continue
        base = f"bus/pci/devices/{match.group(1)}"
        vendor, pci_class = _int(files.get(f"{base}/vendor"), 16), _int(text, 16)
        if vendor is None or pci_class is None or f"{base}/numa_node" not in files:
            continue   # not an accelerator candidate (see sysfs_snapshot)
        node = _int(files.get(f"{base}/numa_node"))
        devices.append(PciDevice(
            bdf=match.group(1), vendor=vendor,
            device=_int(files.get(f"{base}/device"), 16) or 0, pci_class=pci_class,
            numa_node=node if node is not None and node >= 0 else None,
            driver=files.get(f"{base}/driver@link")))
    return tuple(devices)


def parse_topology(files: Mapping[str, str]) -> Topology:
    """Build a Topology from a sysfs snapshot (relative path -> file text).

    Without NUMA node directories every usable CPU goes to one assumed node 0
    (``numa_known=False``). CPUs without topology files count as their own core on
    socket 0. Raises TopologyError for a malformed CPU list or no usable CPU at all.
    """
    raw_nodes = _numa_nodes(files)
    usable = _usable_cpus(files, raw_nodes)
    if not usable:
        raise TopologyError("the sysfs snapshot lists no usable CPU (devices/system/cpu/"
                            "online is missing or empty); is the sysfs root right?")
    numa_known = bool(raw_nodes)
    if not numa_known:
        raw_nodes = {0: (usable, None)}
    node_of = {c: n for n, (cpus, _) in raw_nodes.items() for c in cpus}
    facts = _cpu_facts(files)
    cpus = tuple(
        Cpu(id=c, core=facts.get(c, {}).get("core_id", c),
            socket=facts.get(c, {}).get("physical_package_id", 0),
            numa_node=node_of.get(c, min(raw_nodes)))
        for c in usable)
    usable_set = set(usable)
    nodes = tuple(NumaNode(id=n, cpus=tuple(c for c in cpus_ if c in usable_set),
                           memory_kb=mem)
                  for n, (cpus_, mem) in raw_nodes.items())
    return Topology(cpus=cpus, numa_nodes=nodes, pci_devices=_pci_devices(files),
                    numa_known=numa_known)


def parse_topology_json(text: str) -> Topology:
    """Parse the JSON that ``python3 - < sysfs_snapshot.py`` printed on a remote host."""
    try:
        files = json.loads(text)
    except ValueError as exc:
        raise TopologyError(f"topology probe printed no valid JSON ({exc}); "
                            f"output began {text[:80]!r}") from exc
    if not isinstance(files, dict):
        raise TopologyError("topology probe printed JSON that is not an object")
    return parse_topology({str(k): str(v) for k, v in files.items()})


def probe_topology(root: str = "/sys") -> Topology:
    """Read this host's topology (or a fake tree's, when ``root`` points at one)."""
    return parse_topology(sysfs_snapshot.snapshot(root))


def remote_probe_source() -> str:
    """The stdlib-only program to run as ``python3 - /sys`` on a remote host; its stdout
    goes to :func:`parse_topology_json`."""
    with open(sysfs_snapshot.__file__, encoding="utf-8") as fh:
        return fh.read()
