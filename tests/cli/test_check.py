"""`gcurun check` on a fake machine: 2 sockets x 2 NUMA nodes x 8 CPUs, 8 GCUs."""

from __future__ import annotations

import subprocess
import sys

from tests.fakesys import build_fake_sysfs, eight_gcus
from tests.helpers import ROOT


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gcurun", "check", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                               "COLUMNS": "200"})


def test_check_lists_versions_numa_nodes_and_devices(tmp_path):
    sysfs = build_fake_sysfs(tmp_path, devices=eight_gcus())
    res = check("--sysfs", str(sysfs))
    assert res.returncode == 0, res.stderr
    lines = [" ".join(line.split()) for line in res.stdout.splitlines()]
    from gcurun import __version__

    assert any(line.startswith(f"gcurun {__version__} ") for line in lines)
    assert any(line.startswith(f"python {sys.version.split()[0]} ") for line in lines)
    assert any(line.startswith("mpi ") for line in lines)
    assert any(line.startswith("mpirun ") for line in lines)
    assert any(line.startswith("numactl ") for line in lines)
    nodes = [line for line in lines if line.startswith("numa node ")]
    assert nodes == ["numa node 0 cpus 0-7, 16384 MiB", "numa node 1 cpus 8-15, 16384 MiB",
                     "numa node 2 cpus 16-23, 16384 MiB", "numa node 3 cpus 24-31, 16384 MiB"]
    devices = [line for line in lines if line.startswith("gcu device ")]
    assert len(devices) == 8
    assert devices[0].endswith("(enflame), numa node 0")
    assert devices[7].endswith("(enflame), numa node 3")


def test_check_says_when_no_device_is_found(tmp_path):
    sysfs = build_fake_sysfs(tmp_path)
    res = check("--sysfs", str(sysfs), "--accelerator", "cuda")
    assert res.returncode == 0, res.stderr
    assert "cuda devices none found on the PCI bus" in " ".join(res.stdout.split())
