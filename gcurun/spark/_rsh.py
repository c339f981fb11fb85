"""Open MPI's rsh/ssh agent under ``gcurun.spark.run(use_mpi=True)``:
``python -m gcurun.spark._rsh [OPTIONS] HOST COMMAND...``.

mpirun (on the Spark driver) runs this where it would run ``ssh HOST COMMAND`` to start
its daemon on HOST. Instead of a shell on HOST, this asks the driver's agent service
(:mod:`gcurun.spark._mpi`) to have the job's Spark task on HOST run ``COMMAND`` (as
``/bin/sh -c``, as sshd would), prints the daemon's output on its own stdout and stderr,
and exits with the daemon's status (128 + the signal that killed it; 255, as ssh does,
when the task or the driver is lost). When mpirun ends it, the driver stops the daemon.

The service's address (:data:`RELAY_VARIABLE`) and the job's secret
(``GCURUN_FUNCTION_SECRET``) come from mpirun's environment, never from a command line.
Leading options (what Open MPI passes to ssh) are ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence

from gcurun.launch.remote.run_function import SECRET_VARIABLE, parse_addresses
from gcurun.rendezvous import wire

RELAY_VARIABLE = "GCURUN_SPARK_DAEMONS"
EXIT_USAGE = 2
EXIT_LOST = 255
SEND_SECONDS = 30.0


def parse_arguments(args: Sequence[str]) -> tuple[str, str]:
    """(HOST, the command line) of the agent's arguments; ssh-style options before HOST
    are skipped. Raises ValueError when either is missing."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest.pop(0)
    if len(rest) < 2:
        raise ValueError("usage: python -m gcurun.spark._rsh [OPTIONS] HOST COMMAND...")
    return rest[0], " ".join(rest[1:])


def exit_status(frame: dict) -> int:
    """The status to exit with for the daemon's ``exit`` frame."""
    if frame.get("signal"):
        return 128 + int(frame["signal"])
    code = frame.get("code")
    return int(code) if code is not None else EXIT_LOST


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    with contextlib.suppress(OSError):
        while view:
            view = view[os.write(fd, view):]


def relay(sock: socket.socket, host: str, command: str) -> int:
    """Ask for ``command`` on ``host``; copy its output here; its exit status."""
    from gcurun.spark.agent import read_frame

    wire.send_all(sock, wire.encode_frame({"op": "launch", "host": host,
                                           "argv": ["/bin/sh", "-c", command]}),
                  time.monotonic() + SEND_SECONDS)
    while True:
        try:
            frame = read_frame(sock)
        except (OSError, wire.WireError):
            sys.stderr.write(f"gcurun.spark: the driver's connection for {host}'s MPI "
                             "daemon ended\n")
            return EXIT_LOST
        if frame.get("op") == "output":
            data = wire.recv_exact(sock, int(frame["bytes"]), time.monotonic() + SEND_SECONDS)
            _write(1 if frame.get("stream") == "stdout" else 2, data)
        elif frame.get("op") == "exit":
            if frame.get("text"):
                sys.stderr.write(f"gcurun.spark: {host}: {frame['text']}\n")
            return exit_status(frame)


def main(argv: Sequence[str] | None = None) -> int:
    from gcurun.spark._output import open_channel
    from gcurun.spark.agent import LABEL, LIVENESS_SECONDS, MAGIC

    try:
        host, command = parse_arguments(sys.argv[1:] if argv is None else argv)
        address = parse_addresses(os.environ[RELAY_VARIABLE])[0]
        secret = bytes.fromhex(os.environ[SECRET_VARIABLE])
    except (ValueError, KeyError) as exc:
        sys.stderr.write(f"gcurun.spark._rsh: {exc}; mpirun runs this under "
                         "gcurun.spark.run(use_mpi=True), which sets "
                         f"{RELAY_VARIABLE} and {SECRET_VARIABLE}\n")
        return EXIT_USAGE

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)    # the closed connection stops the daemon

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    try:
        sock = open_channel(address, secret, MAGIC, LABEL)
    except (OSError, wire.WireError) as exc:
        sys.stderr.write(f"gcurun.spark: cannot reach the driver's agent service at "
                         f"{wire.show_address(address)}: {exc}\n")
        return EXIT_LOST
    try:
        wire.set_liveness(sock, LIVENESS_SECONDS)
        return relay(sock, host, command)
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
