"""Collect the sysfs files that describe a host's CPUs, NUMA nodes and accelerators.

Standard library only: the same source runs on remote hosts as
``python3 - [ROOT]`` with this file on stdin and prints one JSON object, so the launcher
learns a remote host's topology over SSH without gcurun installed there. The result maps
paths relative to the sysfs root to the files' text; a symlink's target name is stored
under ``PATH@link``, and the CPUs this process may use under ``@allowed_cpus``.
"""

from __future__ import annotations

import json
import os
import re
import sys

# PCI class prefixes of devices that may be accelerators: display controllers (0x03),
# co-processors (0x0b40) and processing accelerators (0x12).
_ACCELERATOR_CLASSES = ("0x03", "0x0b40", "0x12")
_CPU_DIR = re.compile(r"cpu[0-9]+$")
_NODE_DIR = re.compile(r"node[0-9]+$")


def _read(root: str, rel: str, files: dict[str, str]) -> str | None:
    try:
        with open(os.path.join(root, rel), encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    files[rel] = text
    return text


def _listdir(root: str, rel: str) -> list[str]:
    try:
        return sorted(os.listdir(os.path.join(root, rel)))
    except OSError:
        return []


def _cpus(root: str, files: dict[str, str]) -> None:
    _read(root, "devices/system/cpu/online", files)
    for name in _listdir(root, "devices/system/cpu"):
        if _CPU_DIR.match(name):
            for leaf in ("physical_package_id", "core_id"):
                _read(root, f"devices/system/cpu/{name}/topology/{leaf}", files)


def _nodes(root: str, files: dict[str, str]) -> None:
    for name in _listdir(root, "devices/system/node"):
        if _NODE_DIR.match(name):
            _read(root, f"devices/system/node/{name}/cpulist", files)
            _read(root, f"devices/system/node/{name}/meminfo", files)


def _pci(root: str, files: dict[str, str]) -> None:
    for bdf in _listdir(root, "bus/pci/devices"):
        base = f"bus/pci/devices/{bdf}"
        pci_class = _read(root, f"{base}/class", files)
        _read(root, f"{base}/vendor", files)
        if pci_class is None or not pci_class.strip().startswith(_ACCELERATOR_CLASSES):
            continue
        for leaf in ("device", "numa_node"):
            _read(root, f"{base}/{leaf}", files)
        try:
            target = os.readlink(os.path.join(root, base, "driver"))
        except OSError:
            continue
        files[f"{base}/driver@link"] = os.path.basename(target)


def snapshot(root: str = "/sys", affinity: bool | None = None) -> dict[str, str]:
    """Read the topology files under ``root``.

    ``affinity`` adds the CPUs this process may run on (its cgroup/cpuset); by default
    only when ``root`` is the real ``/sys``, since a fake tree describes another machine.
    Missing files are left out; never raises for an incomplete tree.
    """
    files: dict[str, str] = {}
    _cpus(root, files)
    _nodes(root, files)
    _pci(root, files)
    if affinity if affinity is not None else os.path.realpath(root) == "/sys":
        cpus = sorted(os.sched_getaffinity(0))
        files["@allowed_cpus"] = ",".join(str(c) for c in cpus)
    return files


if __name__ == "__main__":
    json.dump(snapshot(sys.argv[1] if len(sys.argv) > 1 else "/sys"), sys.stdout)
