"""A small client of Chromium's DevTools protocol over its websocket (stdlib only), for the
browser test: start headless Chromium, open pages, evaluate JavaScript, wait for a
condition with a deadline, take screenshots."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

BROWSER_VARIABLE = "GCURUN_CHROMIUM"
# What the browser answers an evaluation made while the page moves to another document.
BETWEEN_DOCUMENTS = ("navigated or closed", "Cannot find context with specified id",
                     "Execution context was destroyed")


def find_browser() -> str | None:
    """The browser to run: ``$GCURUN_CHROMIUM``, else Debian's ``chromium`` on PATH."""
    named = os.environ.get(BROWSER_VARIABLE)
    if named:
        return named
    return shutil.which("chromium") or shutil.which("chromium-browser")


class WebSocket:
    """The client end of one websocket (RFC 6455): text frames out, masked; frames in."""

    def __init__(self, url: str, timeout: float):
        rest = url.removeprefix("ws://")
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the browser closed the websocket handshake")
            head += chunk
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise ConnectionError(f"websocket handshake refused: {status!r}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytearray([0x81])
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(header) + mask + masked)

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the browser closed the websocket")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            opcode = first & 0x0F
            if opcode == 0x8:
                raise ConnectionError("the browser closed the websocket")
            if opcode in (0x1, 0x2, 0x0):
                message += payload
                if first & 0x80:
                    return message.decode()

    def close(self) -> None:
        self.sock.close()


class Browser:
    """Headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, executable: str, profile_dir: Path, timeout: float = 60.0):
        self.timeout = timeout
        self.process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", f"--user-data-dir={profile_dir}",
             "--window-size=1280,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port = self._port(profile_dir / "DevToolsActivePort")
            self.ws = WebSocket(self._page_url(port), timeout)
        except BaseException:
            self.close()
            raise
        self.next_id = 0
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _port(self, active_port: Path) -> int:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the browser exited with code {self.process.returncode}")
            try:
                return int(active_port.read_text().split()[0])
            except (FileNotFoundError, IndexError, ValueError):
                time.sleep(0.1)
        raise TimeoutError(f"the browser wrote no DevTools port within {self.timeout} s")

    def _page_url(self, port: int) -> str:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                        timeout=self.timeout) as answer:
                targets = json.load(answer)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise TimeoutError("the browser opened no page")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str) -> Any:
        """The value of ``expression`` once it is truthy; TimeoutError naming ``what`` if it
        is not within the timeout. While the page is between two documents (a click or a
        navigation under way) the browser may refuse to evaluate: that counts as not yet."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:
                if not any(words in str(exc) for words in BETWEEN_DOCUMENTS):
                    raise
                value = None
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{what}: not within {self.timeout} s "
                           f"(page {self.evaluate('location.href')})")

    def open(self, url: str) -> None:
        """Load ``url`` and wait until the page and its scripts have loaded."""
        self.call("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && "
                      "document.readyState === 'complete'", f"loading {url}")

    def text(self) -> str:
        return self.evaluate("document.body.innerText")

    def screenshot(self, path: Path) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                  deviceScaleFactor=1, mobile=False)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
