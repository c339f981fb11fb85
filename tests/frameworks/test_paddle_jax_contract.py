"""The variables Paddle's and JAX's distributed modes need, set by hand on two local
processes: the contract gcurun's launcher is to meet (docs/frameworks.md). A real
all-reduce of each runs; the tests skip where the framework is not installed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import skip_without

pytestmark = [pytest.mark.integration]

RANK = str(Path(__file__).resolve().parent / "contract_rank.py")
SECONDS = 120


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_two(framework: str, envs: list[dict[str, str]]) -> list[dict]:
    """Start one rank per environment (added to a copy of ours without any framework's
    or launcher's variables), wait for both, return their reports in rank order."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PADDLE_", "FLAGS_", "JAX_", "MASTER_", "SLURM_", "OMPI_",
                                 "PMIX_", "GCURUN_", "HOROVOD_"))}
    procs = [subprocess.Popen([sys.executable, RANK, framework], env={**base, **env},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for env in envs]
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=SECONDS)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, out in zip(procs, outs, strict=True):
        assert proc.returncode == 0, out[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


def paddle_env(rank: int, endpoints: list[str]) -> dict[str, str]:
    """What ``python -m paddle.distributed.launch --nproc_per_node 2`` sets on a CPU host
    and ``init_parallel_env`` needs."""
    return {
        "PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": "2",
        "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
        "PADDLE_DISTRI_BACKEND": "gloo",  # CPU: no FLAGS_selected_* then
        "PADDLE_RANK_IN_NODE": str(rank), "PADDLE_LOCAL_RANK": str(rank),
        "PADDLE_LOCAL_SIZE": "2", "PADDLE_GLOBAL_RANK": str(rank),
        "PADDLE_GLOBAL_SIZE": "2", "PADDLE_NNODES": "1",
    }


@pytest.mark.paddle
def test_paddle_store_is_paddle_master_whatever_master_port_says():
    skip_without("paddle", "pip install paddlepaddle")
    master, torch_port, *ports = free_ports(4)
    endpoints = [f"127.0.0.1:{p}" for p in ports]
    got = run_two("paddle", [{**paddle_env(r, endpoints),
                              "PADDLE_MASTER": f"127.0.0.1:{master}",
                              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(torch_port)}
                             for r in (0, 1)])
    assert [(r["rank"], r["size"], r["sum"]) for r in got] == [(0, 2, 3.0), (1, 2, 3.0)]
    # Rank 0 serves the job's store on PADDLE_MASTER; torch's MASTER_PORT is not used.
    assert got[0]["listening"] == [master]
    assert got[1]["listening"] == []


@pytest.mark.paddle
def test_paddle_store_without_paddle_master_is_the_first_endpoint():
    skip_without("paddle", "pip install paddlepaddle")
    ports = free_ports(2)
    endpoints = [f"127.0.0.1:{p}" for p in ports]
    got = run_two("paddle", [paddle_env(r, endpoints) for r in (0, 1)])
    assert [r["sum"] for r in got] == [3.0, 3.0]
    assert got[0]["listening"] == [ports[0]]


@pytest.mark.jax
def test_jax_needs_the_count_and_id_passed_beside_its_coordinator_variable():
    skip_without("jax", "pip install jax")
    (port,) = free_ports(1)
    got = run_two("jax", [{"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                           "CONTRACT_NUM_PROCESSES": "2", "CONTRACT_PROCESS_ID": str(r),
                           "JAX_PLATFORMS": "cpu"} for r in (0, 1)])
    assert [(r["rank"], r["size"], r["sum"]) for r in got] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert port in got[0]["listening"]


@pytest.mark.jax
def test_jax_reads_no_process_count_from_the_environment():
    skip_without("jax", "pip install jax")
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    done = subprocess.run(
        [sys.executable, "-c", "import jax; jax.distributed.initialize()"],
        env={**env, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "WORLD_SIZE": "2",
             "RANK": "0", "JAX_PLATFORMS": "cpu"},
        capture_output=True, text=True, timeout=SECONDS)
    assert done.returncode != 0
    assert "Number of processes must be defined" in done.stderr
