"""Ray nodes on namespace hosts: ``ray start`` run inside a host's network namespace
(the head on one host, workers joining it on the bridge's addresses), and stopped by
killing every Ray process inside that namespace (``ray stop`` would stop every Ray on
this machine, other tests' too)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.cluster.netns import NetnsHost, processes_in

HEAD_PORT = 6379
START_SECONDS = 240
STOP_SECONDS = 30
# What Ray's processes on a node have in their command lines.
RAY_MARKS = ("ray/core/src/ray", "ray/_private", "ray/dashboard", "ray/autoscaler",
             "ray::", "default_worker.py", "raylet", "gcs_server")
# Ray 2.60 turns token authentication on for a head started here unless told not to;
# the hosts share one file system, so every node and driver gets the same setting.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_agent_register_timeout_ms": "300000",
           "RAY_raylet_start_wait_time_s": "300",
           "RAY_USAGE_STATS_ENABLED": "0"}


def ray_environment(pythonpath: str) -> dict[str, str]:
    return {**os.environ, **RAY_ENV, "PYTHONPATH": pythonpath}


def start_node(host: NetnsHost, temp_dir: Path, pythonpath: str, *, cpus: int,
               head: NetnsHost | None = None) -> None:
    """``ray start`` inside ``host``: the head (``head`` None) or a worker of ``head``.
    Raises RuntimeError with Ray's last words when it does not start in time."""
    ray = shutil.which("ray") or "ray"
    argv = ["ip", "netns", "exec", host.netns, ray, "start", f"--num-cpus={cpus}",
            f"--node-ip-address={host.address}", "--disable-usage-stats"]
    if head is None:
        argv += ["--head", f"--port={HEAD_PORT}", f"--temp-dir={temp_dir}",
                 "--include-dashboard=false"]
    else:
        argv += [f"--address={head.address}:{HEAD_PORT}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=START_SECONDS,
                          env=ray_environment(pythonpath), cwd=str(temp_dir))
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"ray start on {host.name} failed:\n{tail}")


def ray_processes(host: NetnsHost) -> list[int]:
    return processes_in(host, *RAY_MARKS)


def kill_raylet(host: NetnsHost) -> list[int]:
    """SIGKILL the raylet of ``host`` (the node dies; its workers follow)."""
    pids = processes_in(host, "ray/core/src/ray/raylet/raylet")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def stop_node(host: NetnsHost) -> list[int]:
    """Stop every Ray process inside ``host``: SIGTERM, then SIGKILL what is left after
    STOP_SECONDS. Returns the pids still alive after that (none, normally)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in ray_processes(host):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_SECONDS
        while ray_processes(host) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not ray_processes(host):
            return []
    return ray_processes(host)
