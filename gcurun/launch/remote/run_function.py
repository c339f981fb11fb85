"""A rank of :func:`gcurun.run`: ``python -m gcurun.launch.remote.run_function``.

It connects to the launcher's function service (an address from ``GCURUN_FUNCTION``,
``host:port`` items tried in turn), proves it knows the job's secret
(``GCURUN_FUNCTION_SECRET``, which never shows on a command line) and checks the
service's proof, receives the pickled function, calls it, and sends back its pickled
result, or the exception's type, message and traceback. A function that raised makes
the rank exit 1, so the launcher stops the other ranks as for any failed rank.

The launcher's side (:mod:`gcurun.launch.function_service`) imports the protocol's names
from here. Besides the standard library it needs gcurun's stdlib-only wire module and,
to load and pickle closures, cloudpickle.
"""

from __future__ import annotations

import functools
import linecache
import os
import pickle
import socket
import sys
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

from gcurun.rendezvous import wire

ADDRESS_VARIABLE = "GCURUN_FUNCTION"
SECRET_VARIABLE = "GCURUN_FUNCTION_SECRET"
MAGIC = b"GCUFN01\n"
LABEL = b"gcurun-function"
CONNECT_SECONDS = 30.0
EXIT_RAISED = 1


def parse_addresses(text: str) -> list[tuple[str, int]]:
    """``a:1,[::1]:2`` -> [('a', 1), ('::1', 2)]. Raises ValueError for a bad item."""
    found = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"{ADDRESS_VARIABLE} item {item!r} is not host:port")
        found.append((host.strip("[]"), int(port)))
    if not found:
        raise ValueError(f"{ADDRESS_VARIABLE} is empty; gcurun.run sets it")
    return found


def send_blob(sock: socket.socket, header: dict[str, Any], data: bytes,
              deadline: float) -> None:
    """A JSON frame saying ``bytes``, then the bytes themselves."""
    wire.send_all(sock, wire.encode_frame({**header, "bytes": len(data)}) + data, deadline)


def recv_blob(sock: socket.socket, deadline: float | None) -> tuple[dict[str, Any], bytes]:
    header = wire.recv_frame(sock, deadline)
    size = header.get("bytes")
    if not isinstance(size, int) or size < 0:
        raise wire.WireError(f"a {header['op']!r} frame without its size")
    return header, wire.recv_exact(sock, size, deadline)


def connect(addresses: list[tuple[str, int]], secret: bytes,
            timeout: float = CONNECT_SECONDS) -> socket.socket:
    """An authenticated connection to the first address that answers as the service.
    Raises ConnectionError naming every address tried, once ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    tried: dict[str, str] = {}
    while True:
        for host, port in addresses:
            shown = wire.show_address((host, port))
            try:
                sock = socket.create_connection((host, port), timeout=max(
                    0.1, min(5.0, deadline - time.monotonic())))
            except OSError as exc:
                tried[shown] = exc.strerror or str(exc)
                continue
            try:
                server_nonce, client_nonce = wire.client_handshake(
                    sock, secret, MAGIC, LABEL, deadline)
                proof = wire.recv_exact(sock, wire.MAC_BYTES, deadline)
                if wire.check_proof(secret, LABEL, server_nonce, client_nonce,
                                    proof) is not None:
                    return sock
                tried[shown] = "it could not prove it knows the job's secret"
            except wire.WireError as exc:
                tried[shown] = str(exc)
            sock.close()
        if time.monotonic() >= deadline:
            listed = "; ".join(f"{a}: {why}" for a, why in tried.items())
            raise ConnectionError(f"cannot reach gcurun.run's launcher ({listed})")
        time.sleep(0.2)


def _code_of(call: Callable[[], Any]) -> types.CodeType | None:
    target = call.func if isinstance(call, functools.partial) else call
    return getattr(target, "__code__", None)


def pack_call(call: Callable[[], Any]) -> bytes:
    """``call`` pickled for the ranks, with the name and lines of the file its function
    comes from: cloudpickle (3.1 and later) ships a function's code under the file name
    ``<dynamic-code>``, of which a rank's traceback could show no line. (Helpers that
    cloudpickle ships by value from other files still show none.) Raises what cloudpickle
    raises for what cannot be pickled."""
    import cloudpickle

    code = _code_of(call)
    filename = code.co_filename if code is not None else ""
    lines = linecache.getlines(filename) if filename else []
    return cloudpickle.dumps((call, filename, lines))


def unpack_call(payload: bytes) -> Callable[[], Any]:
    """The call of :func:`pack_call`, its code under its own file name again and that
    file's lines where tracebacks look for them (the file need not exist on this host)."""
    call, filename, lines = pickle.loads(payload)
    code = _code_of(call)
    if code is not None and lines:
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
        if code.co_filename != filename:
            target = call.func if isinstance(call, functools.partial) else call
            target.__code__ = _renamed(code, filename)
    return call


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` and the code inside it (nested functions, comprehensions) from ``filename``."""
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def outcome(payload: bytes) -> tuple[bool, bytes]:
    """(True, the pickled result) or (False, the pickled error report) of calling the
    function that :func:`pack_call` packed in ``payload``."""
    import cloudpickle

    try:
        return True, cloudpickle.dumps(unpack_call(payload)())
    except BaseException as exc:  # a rank reports everything, SystemExit included
        error = exc
    frames = error.__traceback__.tb_next if error.__traceback__ else None  # not this one
    report: dict[str, Any] = {
        "type": type(error).__name__, "message": str(error),
        "traceback": "".join(traceback.format_exception(type(error), error, frames))}
    try:
        report["exception"] = cloudpickle.dumps(error)
        pickle.loads(report["exception"])
    except Exception:   # an exception that cannot travel: its text still does
        report.pop("exception", None)
    return False, pickle.dumps(report)


def main() -> int:
    # An elastic job's worker is known by its worker id: its rank changes as the job
    # re-forms.
    rank = int(os.environ.get("GCURUN_ELASTIC_WORKER") or os.environ["GCURUN_RANK"])
    secret = bytes.fromhex(os.environ.pop(SECRET_VARIABLE))
    sock = connect(parse_addresses(os.environ[ADDRESS_VARIABLE]), secret)
    deadline = time.monotonic() + CONNECT_SECONDS
    hello = {"op": "hello", "rank": rank, "host": os.environ.get("GCURUN_HOSTNAME", "")}
    wire.send_all(sock, wire.encode_frame(hello), deadline)
    _, payload = recv_blob(sock, deadline)
    ok, data = outcome(payload)
    send_blob(sock, {"op": "result", "rank": rank, "ok": ok}, data, time.monotonic() + 600)
    sock.close()
    return 0 if ok else EXIT_RAISED


if __name__ == "__main__":
    sys.exit(main())
