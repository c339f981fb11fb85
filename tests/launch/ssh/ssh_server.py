"""A small SSH server on 127.0.0.1 built on paramiko, for tests that need no root: public
key login, and exec requests run as local ``sh -c`` commands in a home directory with their
stdin, stdout, stderr and exit status carried over the channel, as sshd does."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import threading
from pathlib import Path

import paramiko


class _Interface(paramiko.ServerInterface):
    def __init__(self, server: SSHTestServer) -> None:
        self.server = server

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_none(self, username: str) -> int:
        return paramiko.AUTH_FAILED

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = username == self.server.user and key.asbytes() in self.server.authorized
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.server.commands.append(command.decode())
        threading.Thread(target=_run, args=(channel, command.decode(), self.server.env,
                                            self.server.home), daemon=True).start()
        return True


def _run(channel: paramiko.Channel, command: str, env: dict[str, str], home: str) -> None:
    proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def copy_in() -> None:
        assert proc.stdin is not None
        try:
            while data := channel.recv(65536):
                proc.stdin.write(data)
                proc.stdin.flush()
        except (OSError, EOFError):
            pass
        try:
            proc.stdin.close()
        except OSError:
            pass

    def copy_out(pipe, send) -> None:
        for chunk in iter(lambda: pipe.read1(65536), b""):
            try:
                send(chunk)
            except (OSError, EOFError):
                return

    threads = [threading.Thread(target=copy_out, args=(proc.stdout, channel.sendall)),
               threading.Thread(target=copy_out, args=(proc.stderr, channel.sendall_stderr))]
    threading.Thread(target=copy_in, daemon=True).start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    code = proc.wait()
    try:
        channel.send_exit_status(code if code >= 0 else 128 - code)
        channel.shutdown_write()
        channel.close()
    except (OSError, EOFError):
        pass


class SSHTestServer:
    """Listens on 127.0.0.1, lets ``user`` in with the ``authorized`` keys and runs their
    commands with ``env`` in ``home``."""

    def __init__(self, user: str, authorized: set[bytes], env: dict[str, str],
                 home: str) -> None:
        self.user = user
        self.home = home
        self.authorized = authorized
        self.env = env
        self.host_key = paramiko.ECDSAKey.generate()
        self.commands: list[str] = []
        self.transports: list[paramiko.Transport] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            self.transports.append(t)
            try:
                t.start_server(server=_Interface(self))
            except (paramiko.SSHException, EOFError, OSError):
                continue

    def known_hosts_line(self, key: paramiko.PKey | None = None) -> str:
        key = key or self.host_key
        return f"[127.0.0.1]:{self.port} {key.get_name()} {key.get_base64()}\n"

    def close(self) -> None:
        self.sock.close()
        for t in self.transports:
            t.close()


def write_key(path: Path) -> paramiko.PKey:
    key = paramiko.ECDSAKey.generate()
    key.write_private_key_file(str(path))
    path.with_name(path.name + ".pub").write_text(f"{key.get_name()} {key.get_base64()}\n")
    os.chmod(path, 0o600)
    return key


def public_blob(path: Path) -> bytes:
    return base64.b64decode(path.with_name(path.name + ".pub").read_text().split()[1])
