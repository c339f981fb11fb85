"""Authentication and framing shared by the rendezvous and the ranks' connections.

Every connection starts with an HMAC-SHA256 challenge-response over the job's secret, in
both directions, with fresh nonces: the secret never crosses the wire, a replayed
handshake fails, and a peer without the secret learns nothing. Control messages are
length-prefixed JSON frames (never pickle: they may come from anyone who can connect).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import struct
import time
from typing import Any

NONCE_BYTES = 32
MAC_BYTES = 32
SECRET_BYTES = 32
FRAME_LIMIT = 16 << 20
FRAME = struct.Struct(">I")

RENDEZVOUS_MAGIC = b"GCURV01\n"
PEER_MAGIC = b"GCUPR01\n"


# What a server sends instead of its proof when the client's proof of the secret is
# wrong: a MAC this exact is never met by chance.
REFUSED = b"GCURUN-REFUSED: wrong secret".ljust(MAC_BYTES, b".")


class WireError(Exception):
    """A connection broke, timed out, or spoke the wrong protocol."""


class WireTimeout(WireError):
    """The deadline passed before the other end said what it had to."""


class WireClosed(WireError):
    """The other end closed (or reset) the connection."""


def new_secret() -> bytes:
    """A fresh per-job secret."""
    return secrets.token_bytes(SECRET_BYTES)


def nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def mac(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, label + b"".join(parts), hashlib.sha256).digest()


def same(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def show_address(address: tuple[str, int]) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise WireTimeout("timed out")
    return left


def recv_exact(sock: socket.socket, nbytes: int, deadline: float | None) -> bytes:
    """Exactly ``nbytes`` from a blocking socket, or WireError (EOF, timeout).
    ``deadline=None`` waits as long as it takes, leaving the socket's timeout alone."""
    data = bytearray()
    while len(data) < nbytes:
        if deadline is not None:
            sock.settimeout(_remaining(deadline))
        try:
            piece = sock.recv(nbytes - len(data))
        except TimeoutError:
            raise WireTimeout("timed out") from None
        except OSError as exc:
            raise WireClosed(str(exc)) from None
        if not piece:
            raise WireClosed("connection closed")
        data += piece
    return bytes(data)


def send_all(sock: socket.socket, data: bytes, deadline: float) -> None:
    sock.settimeout(_remaining(deadline))
    try:
        sock.sendall(data)
    except TimeoutError:
        raise WireTimeout("timed out") from None
    except OSError as exc:
        raise WireClosed(str(exc)) from None


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return FRAME.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise WireError("a frame is not JSON") from None
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise WireError("a frame has no 'op'")
    return message


def recv_frame(sock: socket.socket, deadline: float | None) -> dict[str, Any]:
    (length,) = FRAME.unpack(recv_exact(sock, FRAME.size, deadline))
    if length > FRAME_LIMIT:
        raise WireError(f"a frame of {length} bytes is over the limit of {FRAME_LIMIT}")
    return decode_body(recv_exact(sock, length, deadline))


def client_handshake(sock: socket.socket, secret: bytes, magic: bytes, label: bytes,
                     deadline: float, extra: bytes = b"") -> tuple[bytes, bytes]:
    """The connecting side: answer the server's challenge and check its proof.

    Returns (server's extra bytes after its proof is checked, both nonces joined).
    ``extra`` travels with our answer and is covered by our MAC.
    """
    hello = recv_exact(sock, len(magic) + NONCE_BYTES, deadline)
    if hello[:len(magic)] != magic:
        raise WireError("the other end is not a gcurun endpoint of this kind")
    server_nonce, client_nonce = hello[len(magic):], nonce()
    send_all(sock, client_nonce + extra
             + mac(secret, label + b"-client", server_nonce, client_nonce, extra), deadline)
    return server_nonce, client_nonce


def server_challenge(sock: socket.socket, magic: bytes, deadline: float) -> bytes:
    """The accepting side, first step: send the challenge, return its nonce."""
    server_nonce = nonce()
    send_all(sock, magic + server_nonce, deadline)
    return server_nonce


def check_answer(secret: bytes, label: bytes, server_nonce: bytes, answer: bytes,
                 extra_bytes: int) -> tuple[bytes, bytes] | None:
    """The accepting side: (client nonce, client's extra) if ``answer`` proves the secret."""
    if len(answer) != NONCE_BYTES + extra_bytes + MAC_BYTES:
        return None
    client_nonce = answer[:NONCE_BYTES]
    extra = answer[NONCE_BYTES:NONCE_BYTES + extra_bytes]
    expected = mac(secret, label + b"-client", server_nonce, client_nonce, extra)
    if not same(answer[NONCE_BYTES + extra_bytes:], expected):
        return None
    return client_nonce, extra


def server_proof(secret: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes,
                 extra: bytes = b"") -> bytes:
    return extra + mac(secret, label + b"-server", client_nonce, server_nonce, extra)


def check_proof(secret: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes,
                proof: bytes, extra_bytes: int = 0) -> bytes | None:
    """The connecting side: the server's extra bytes if its ``proof`` is genuine."""
    extra = proof[:extra_bytes]
    expected = mac(secret, label + b"-server", client_nonce, server_nonce, extra)
    return extra if same(proof[extra_bytes:], expected) else None


def set_liveness(sock: socket.socket, seconds: float) -> None:
    """Let the kernel declare ``sock`` broken after about ``seconds`` of silence from the
    other end: keepalive probes for an idle connection, TCP_USER_TIMEOUT for one with
    unacknowledged data (a cut link sends no RST or FIN). A no-op where the options
    do not exist (not TCP, not Linux)."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    probe = max(1, int(seconds // 5))
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", probe), ("TCP_KEEPINTVL", probe),
                        ("TCP_KEEPCNT", max(1, int(seconds // probe) - 1)),
                        ("TCP_USER_TIMEOUT", int(seconds * 1000))):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError:
            pass
