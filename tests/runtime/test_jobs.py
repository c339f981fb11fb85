"""The runtime on real rank processes: the one body of checks at 1-4 ranks on both
backends, peer death, stalls, and strangers knocking on the ranks' listeners."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from gcurun.rendezvous import wire
from gcurun.rendezvous.server import RendezvousServer
from gcurun.runtime.transport.tcp_connections import CONNECT_EXTRA, PEER_LABEL
from tests.helpers import ROOT, wait_for
from tests.runtime.jobs import MPIRUN, run_job, run_local, run_tcp

pytestmark = pytest.mark.integration
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")

# Chunks of 64 KiB make the larger tensors pipeline in several chunks, some of them
# moved by single-copy reads (tcp, same host) and some through the socket.
CHUNKED = {"GCURUN_CHUNK_BYTES": "65536"}
JOBS = [
    pytest.param("tcp", 1, {}, id="tcp-1"),
    pytest.param("tcp", 2, CHUNKED, id="tcp-2"),
    pytest.param("tcp", 3, {**CHUNKED, "GCURUN_CMA": "0", "GCURUN_SHM": "0"},
                 id="tcp-3-unix-sockets-only"),
    pytest.param("tcp", 4, CHUNKED, id="tcp-4"),
    pytest.param("mpi", 1, {}, id="mpi-1", marks=[pytest.mark.mpi, needs_mpi]),
    pytest.param("mpi", 2, CHUNKED, id="mpi-2", marks=[pytest.mark.mpi, needs_mpi]),
    pytest.param("mpi", 3, {}, id="mpi-3", marks=[pytest.mark.mpi, needs_mpi]),
    pytest.param("mpi", 4, CHUNKED, id="mpi-4",
                 marks=[pytest.mark.mpi, needs_mpi, pytest.mark.long]),  # tcp-4 by default
]


@pytest.mark.parametrize(("backend", "size", "env"), JOBS)
def test_every_collective_on_processes(backend: str, size: int, env: dict) -> None:
    job = run_job(backend, size, "collectives.py", env=env)
    assert job.returncodes == [0] * len(job.returncodes), job.stderr
    for rank in range(size):
        lines = job.lines(f"rank {rank} of {size} ok")
        assert len(lines) == 1, job.stdout + job.stderr
        assert f"backend={backend}" in lines[0]
        assert f"local={rank}/{size} cross=0/1" in lines[0]


def test_a_plain_process_runs_alone() -> None:
    job = run_local("collectives.py")
    assert job.returncodes == [0], job.stderr
    assert "rank 0 of 1 ok" in job.stdout and "backend=local" in job.stdout


def test_topology_follows_the_launchers_hosts() -> None:
    hosts = ["node-a", "node-a", "node-b", "node-b"]
    job = run_tcp(4, "collectives.py", "101", hosts=hosts)
    assert job.returncodes == [0] * 4, job.stderr
    for rank, where in enumerate(["0/2 cross=0/2", "1/2 cross=0/2", "0/2 cross=1/2",
                                  "1/2 cross=1/2"]):
        assert f"local={where}" in job.lines(f"rank {rank} of 4 ok")[0]


def test_ranks_that_shut_down_together_abort_nothing() -> None:
    """Every rank shuts down at once: the last cycle's allgather ends on each rank in its
    own time, and a rank that leaves first closes its links while others still read its
    last bytes from the shared-memory rings. That is no failure: nobody aborts (it cost
    a rank a second's wait for an abort, then aborted the job)."""
    for _ in range(2):
        job = run_tcp(8, "clean_exit.py", timeout=120)
        assert job.returncodes == [0] * 8, job.stdout + job.stderr
        left = job.lines("rank")
        assert len(left) == 8, job.stdout + job.stderr
        assert all("called shutdown(), so no collective can run" in line for line in left), \
            left
        assert job.aborts == [], job.aborts


@pytest.mark.parametrize("ops", ["large", "small"])
def test_a_dead_peer_makes_the_others_raise_tcp(ops: str) -> None:
    # The timeout is far away: only noticing the death can end the wait in time. Small
    # ops run in the engine's quick cycles on the calling thread.
    job = run_job("tcp", 3, "peer_death.py", "1", ops, env={"GCURUN_TIMEOUT_SECONDS": "300"},
                  timeout=60)
    assert job.returncodes == [0, 17, 0], job.stderr
    first = "step.0" if ops == "large" else "warmup"
    for rank in (0, 2):
        raised = job.lines(f"rank {rank} raised PeerFailureError: allreduce '{first}'")
        assert len(raised) == 1, job.stdout + job.stderr
        assert "rank 1" in raised[0]
        assert job.lines(f"rank {rank} refused the next call: allreduce 'after': the job "
                         "failed earlier")
    assert any("rank 1 (host localhost) lost its connection" in a for a in job.aborts)


@pytest.mark.mpi
@needs_mpi
def test_a_dead_peer_stops_an_mpi_job() -> None:
    job = run_job("mpi", 3, "peer_death.py", "1", env={"GCURUN_TIMEOUT_SECONDS": "300"},
                  timeout=60)
    assert job.returncodes == [17], job.stdout + job.stderr
    assert "rank" not in job.stdout or "was never told" not in job.stdout


@pytest.mark.parametrize("backend", ["tcp", pytest.param("mpi", marks=[pytest.mark.mpi,
                                                                        needs_mpi])])
def test_a_stalled_rank_ends_in_a_timeout(backend: str, tmp_path: Path) -> None:
    job = run_job(backend, 3, "stall.py", str(tmp_path), "1",
                  env={"GCURUN_TIMEOUT_SECONDS": "1.5"}, timeout=60)
    assert job.returncodes == [0] * len(job.returncodes), job.stdout + job.stderr
    assert job.lines("rank 1 stalled until the others gave up")
    for rank in (0, 2):
        raised = job.lines(f"rank {rank} raised")
        assert len(raised) == 1, job.stdout
        assert "allreduce 'stalled.op'" in raised[0]
        assert "no progress for 1.5 s waiting for rank" in raised[0]
    # Somebody timed out on rank 1 itself.
    assert "waiting for rank 1" in job.stdout


def test_strangers_at_the_ranks_listeners_are_refused_and_logged(tmp_path: Path) -> None:
    def intrude(server: RendezvousServer, procs: list[subprocess.Popen]) -> None:
        wait_for("both ranks ready", lambda: all(
            (tmp_path / f"rank-{r}.ready").exists() for r in range(2)) or any(
            p.poll() is not None for p in procs))
        for info in server.registered().values():
            host, port = info["tcp"]
            _garbage((host, port))
            _wrong_secret((host, port))
            _garbage(bytes.fromhex(info["unix"]), b"\x00garbage\xff" * 2)
        (tmp_path / "go").touch()

    job = run_tcp(2, "intruders.py", str(tmp_path), while_running=intrude, timeout=60)
    assert job.returncodes == [0, 0], job.stderr
    assert len(job.lines("rank")) == 2
    refusals = [line for line in job.stderr.splitlines() if "refused a connection" in line]
    assert len(refusals) == 6, job.stderr
    assert sum("failed authentication" in line for line in refusals) == 4, job.stderr
    assert sum("connection closed" in line for line in refusals) == 2, job.stderr


def _connect(address: tuple[str, int] | bytes) -> socket.socket:
    if isinstance(address, bytes):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(address)
        return sock
    return socket.create_connection(address, timeout=10)


def _garbage(address: tuple[str, int] | bytes,
             junk: bytes = b"GET / HTTP/1.0\r\n\r\n" + bytes(range(256)) * 4) -> None:
    with _connect(address) as sock:
        try:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return  # the rank already refused us and closed: what the test wants
        _drain(sock)


def _wrong_secret(address: tuple[str, int]) -> None:
    with _connect(address) as sock:
        deadline = time.monotonic() + 10
        wire.client_handshake(sock, b"not the job's secret at all", wire.PEER_MAGIC,
                              PEER_LABEL, deadline, CONNECT_EXTRA.pack(0, 1, 0, 1))
        _drain(sock)


def _drain(sock: socket.socket) -> None:
    """Read until the rank closes the connection (it must)."""
    sock.settimeout(10)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("size", [3, 4])
def test_sub_communicators(size: int) -> None:
    job = run_job("mpi", size, "subcomm.py")
    assert job.returncodes == [0], job.stdout + job.stderr
    for rank in range(size):
        assert job.lines(f"rank {rank} ok:"), job.stdout


@pytest.mark.parametrize("size", [2, 3])
def test_large_allreduces_stream_over_sockets(size: int) -> None:
    """Ranks whose bytes go by socket (as between hosts) reduce each chunk as it
    arrives, with the next in flight: large tensors, fused groups and every op come out
    exact, and the exchanges were left in flight."""
    job = run_tcp(size, "streaming.py", env={"GCURUN_CMA": "0", "GCURUN_SHM": "0"})
    assert job.returncodes == [0] * size, job.stdout + job.stderr
    for rank in range(size):
        lines = job.lines(f"rank {rank} of {size} ok: ")
        assert len(lines) == 1, job.stdout + job.stderr
        assert int(lines[0].split(", ")[1].split()[0]) > 0, lines[0]


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("size", [2, 3])
def test_large_allreduces_stream_over_mpi_as_between_hosts(size: int) -> None:
    """The mpi transport's exchanges left in flight (as in a job on several hosts):
    every rank cuts the ring's chunks alike, so every message matches its receive, and
    the results come out exact."""
    job = run_job("mpi", size, "streaming.py", "mpi")
    assert job.returncodes == [0], job.stdout + job.stderr
    for rank in range(size):
        lines = job.lines(f"rank {rank} of {size} ok: ")
        assert len(lines) == 1, job.stdout + job.stderr
        assert int(lines[0].split(", ")[1].split()[0]) > 0, lines[0]


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize(("size", "env"), [
    pytest.param(2, {}, id="2-single-copy"),
    pytest.param(3, {}, id="3-single-copy"),
    pytest.param(3, {"GCURUN_CMA": "0"}, id="3-shared-memory-rings"),
    pytest.param(3, {"GCURUN_CMA": "0", "GCURUN_SHM": "0"}, id="3-unix-sockets"),
])
def test_messages_of_several_pieces_on_both_transports(size: int, env: dict) -> None:
    """sendrecv_parts around a ring, each sender cutting its messages its own way: tcp
    (one descriptor and one read of all pieces, or the pieces as a stream; more pieces
    than a descriptor lists) and mpi (a message per piece; pieces, and single buffers,
    over the message limit in several); then, on tcp, single buffers and pieces on
    either side, where two ranks that read each other take the quick large exchange on a
    side that may."""
    job = run_job("mpi", size, "parts.py", env=env)
    assert job.returncodes == [0], job.stdout + job.stderr
    # Of the 7 mixed exchanges, each rank may take the quick way in 3 of the 4 large ones.
    quick = 3 if size == 2 and not env else 0
    for rank in range(size):
        assert job.lines(f"rank {rank} of {size} parts ok: 36 exchanges, {quick} quick"), \
            job.stdout + job.stderr


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("size", [2, 3])
def test_the_engines_repeated_allreduces_on_both_transports(size: int) -> None:
    """The engine's synchronous allreduce, as the allreduce benchmark calls it, on real
    mpi and tcp transports with the default chunk: small and large tensors called again
    and again, in place and not, one tensor in place again and again, a strided tensor on
    one rank, mismatches after success. Every large name takes quick cycles; two ranks
    keep one tensor's exchanges prepared."""
    job = run_job("mpi", size, "communicators.py")
    assert job.returncodes == [0], job.stdout + job.stderr
    names = "big.average,big.held,big.held.average,big.held.min,big.max,big.min,big.scaled," \
        "big.sum"
    ways = f"quick [{names}], " + ("one tensor held" if size == 2 else "none held")
    for rank in range(size):
        lines = job.lines(f"rank {rank} of {size} communicators ok: mpi ")
        assert len(lines) == 1, job.stdout + job.stderr
        mpi, tcp = lines[0].split(": ", 1)[1].split("; ")
        assert mpi.endswith(ways) and tcp.startswith("tcp ") and tcp.endswith(ways), lines[0]
        assert mpi.split()[1] == tcp.split()[1], lines[0]      # the same checks on both


QUICK_BENCH = (str(ROOT / "benchmarks" / "allreduce.py"), "--max-bytes", "8192", "--rounds",
               "1", "--seconds", "0.001")


@pytest.mark.mpi
@needs_mpi
def test_the_benchmark_compares_both_rings_with_native_mpi() -> None:
    job = run_job("mpi", 2, *QUICK_BENCH)
    assert job.returncodes == [0], job.stderr
    header = next(line for line in job.stdout.splitlines() if "size" in line)
    for column in ("ring(mpi)", "ring(tcp)", "native", "ring(mpi)/native", "ring(tcp)/native"):
        assert column in header
    rows = [line.split() for line in job.stdout.splitlines() if not line.startswith("#")]
    assert [row[0] for row in rows] == ["8", "4096", "8192"]
    # size count type, then "| time algbw busbw" per variant and "| ratio" per ring
    assert all(len(row) == 3 + 3 * 4 + 2 * 2 for row in rows), job.stdout


def test_the_benchmark_runs_on_the_tcp_backend_alone() -> None:
    job = run_tcp(2, *QUICK_BENCH)
    assert job.returncodes == [0, 0], job.stderr
    header = next(line for line in job.stdout.splitlines() if "size" in line)
    assert "ring(tcp)" in header and "native" not in header and "ring(mpi)" not in header


def _table(stdout: str) -> dict[str, list[float]]:
    """The rows of a benchmark's table by their first column (lines not starting '#')."""
    rows = [line.split() for line in stdout.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    return {row[0]: [float(value) for value in row[1:]] for row in rows}


def test_the_engine_phases_benchmark_times_the_rings_inside_each_step() -> None:
    job = run_tcp(2, str(ROOT / "benchmarks" / "engine_phases.py"), "--steps", "1")
    assert job.returncodes == [0, 0], job.stderr
    rows = _table(job.stdout)
    assert set(rows) == {"single", "views", "fused"}, job.stdout
    for values in rows.values():
        step, rings, transfers, reductions, rest, outside, versus_single = values
        # The clocks nest: transfers and reductions inside the rings, the rings in a step.
        assert 0 < transfers < rings < step and 0 < reductions < rings, job.stdout
        assert abs(rings - transfers - reductions - rest) < 0.02, job.stdout
        assert abs(step - rings - outside) < 0.02, job.stdout
    assert rows["single"][-1] == 1.0


@pytest.mark.mpi
@needs_mpi
def test_the_overhead_benchmark_sets_each_way_against_native_mpi() -> None:
    job = run_job("mpi", 2, str(ROOT / "benchmarks" / "allreduce_overhead.py"), "--rounds",
                  "1", "--bytes", "65536")
    assert job.returncodes == [0], job.stderr
    rows = _table(job.stdout)
    assert list(rows) == ["gcurun", "exch+ring", "ring", "prepared", "mpi4py", "native"], \
        job.stdout
    assert rows["native"] == [rows["native"][0], 0.0, 1.0]
    assert all(values[0] > 0 for values in rows.values())


@pytest.mark.parametrize(("backend", "size"), [
    pytest.param("tcp", 2, id="tcp-2"), pytest.param("tcp", 3, id="tcp-3"),
    pytest.param("mpi", 2, id="mpi-2", marks=[pytest.mark.mpi, needs_mpi]),
    pytest.param("mpi", 4, id="mpi-4", marks=[pytest.mark.mpi, needs_mpi])])
def test_process_sets_on_the_numpy_api(backend: str, size: int) -> None:
    """Sets on their own engines: every kind of call, errors raised on every member."""
    job = run_job(backend, size, "process_sets.py")
    assert set(job.returncodes) == {0}, job.stdout + job.stderr
    for rank in range(size):
        assert len(job.lines(f"rank {rank} of {size} process sets ok:")) == 1, \
            job.stdout + job.stderr
