"""A real moto_server on 127.0.0.1 and a fault-injecting proxy in front of it.

Import the fixtures into a test module: ``from support.moto import aws, moto_server, faulty_aws``.

- ``moto_server`` (session): ``moto_server`` on a free 127.0.0.1 port, stopped at the end.
- ``aws`` (per test): moto reset to empty, dummy credentials in the environment (the standard
  boto3 chain reads them), and the endpoint URL.
- ``faulty_aws`` (per test): the same behind :class:`FaultProxy`, which fails chosen API
  actions with throttling errors, 503s or dropped connections (before or after moto acted)
  and counts the requests that reached moto.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class MotoServer:
    endpoint_url: str
    process: subprocess.Popen[bytes]

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass


def _moto_binary() -> str:
    beside = Path(sys.executable).with_name("moto_server")
    if beside.exists():
        return str(beside)
    found = shutil.which("moto_server")
    if found is None:
        raise RuntimeError(
            "moto_server not found: install the test extras (pip install -e .[test])"
        )
    return found


def start_moto_server(log_path: Path) -> MotoServer:
    """Start moto_server on a free 127.0.0.1 port and wait until it answers."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [_moto_binary(), "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = MotoServer(f"http://127.0.0.1:{port}", process)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.endpoint_url}/moto-api/data.json", timeout=2):
                return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    stop_moto_server(server)
    raise RuntimeError("moto_server did not answer within 30 s")


def stop_moto_server(server: MotoServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=10)


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = start_moto_server(tmp_path_factory.mktemp("moto") / "moto_server.log")
    try:
        yield server
    finally:
        stop_moto_server(server)


@pytest.fixture
def aws(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Empty moto behind the standard credential chain; yields the endpoint URL."""
    moto_server.reset()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield moto_server.endpoint_url


# --- fault injection ------------------------------------------------------------------

THROTTLE = "throttle"
"""HTTP 400 Throttling (Auto Scaling) / 503 RequestLimitExceeded (EC2), as AWS sends them."""
UNAVAILABLE = "unavailable"
"""HTTP 503 with no body."""
DROP_BEFORE = "drop_before"
"""Close the connection without forwarding: the call did not happen."""
DROP_AFTER = "drop_after"
"""Forward to moto, then close the connection: the call happened, the client cannot know."""

_EC2_API_VERSION = "2016-11-15"
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}


@dataclass
class Fault:
    action: str
    mode: str
    times: int


@dataclass
class FaultProxy:
    """HTTP proxy on 127.0.0.1 in front of moto that fails chosen actions a number of times."""

    upstream: str
    faults: list[Fault] = field(default_factory=list)
    reached_moto: Counter[str] = field(default_factory=Counter)
    """Requests forwarded to moto, by API action."""
    injected: Counter[str] = field(default_factory=Counter)
    """Faults injected, by API action."""
    fleet_tokens: dict[str, tuple[int, list[tuple[str, str]], bytes]] = field(default_factory=dict)
    """CreateFleet responses by ClientToken: EC2 answers a token it saw (for at least 24 h,
    even after the instances ended) with the first response and launches nothing; moto
    does not, so the proxy does."""
    endpoint_url: str = ""
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, action: str, mode: str, times: int = 1) -> None:
        self.faults.append(Fault(action, mode, times))

    def _take_fault(self, action: str) -> str | None:
        with self._lock:
            for fault in self.faults:
                if fault.action == action and fault.times > 0:
                    fault.times -= 1
                    self.injected[action] += 1
                    return fault.mode
        return None

    def start(self) -> None:
        proxy = self
        upstream = urllib.parse.urlsplit(self.upstream)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                action, version = _action_of(self.headers.get("X-Amz-Target"), body, self.path)
                mode = proxy._take_fault(action)
                token = ""
                if action == "CreateFleet":
                    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
                    token = fields.get("ClientToken", [""])[0]
                    with proxy._lock:
                        remembered = proxy.fleet_tokens.get(token) if token else None
                    if remembered is not None and mode is None:
                        self._reply(*remembered)
                        return
                if mode == DROP_BEFORE:
                    self._drop()
                    return
                if mode in (THROTTLE, UNAVAILABLE):
                    self._fail(mode, version)
                    return
                status, headers, payload = self._forward(body)
                with proxy._lock:
                    proxy.reached_moto[action] += 1
                    if token and status == 200:
                        proxy.fleet_tokens[token] = (status, headers, payload)
                if mode == DROP_AFTER:
                    self._drop()
                    return
                self._reply(status, headers, payload)

            def _reply(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                conn = http.client.HTTPConnection(
                    upstream.hostname or "127.0.0.1", upstream.port, timeout=30
                )
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    return response.status, response.getheaders(), response.read()
                finally:
                    conn.close()

            def _fail(self, mode: str, version: str) -> None:
                if mode == UNAVAILABLE:
                    status, payload = 503, b""
                elif version == _EC2_API_VERSION:
                    status = 503
                    payload = (
                        b"<Response><Errors><Error><Code>RequestLimitExceeded</Code>"
                        b"<Message>Request limit exceeded.</Message></Error></Errors>"
                        b"<RequestID>fault</RequestID></Response>"
                    )
                else:
                    status = 400
                    payload = (
                        b"<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code>"
                        b"<Message>Rate exceeded</Message></Error>"
                        b"<RequestId>fault</RequestId></ErrorResponse>"
                    )
                self.send_response(status)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _drop(self) -> None:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _action_of(target: str | None, body: bytes, path: str) -> tuple[str, str]:
    """API action and version of a request (query protocol form body or JSON X-Amz-Target)."""
    if target:
        return target.rsplit(".", 1)[-1], ""
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    if not fields:
        fields = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    return fields.get("Action", [""])[0], fields.get("Version", [""])[0]


@pytest.fixture
def faulty_aws(aws: str) -> Iterator[FaultProxy]:
    """A FaultProxy in front of the (reset) moto; its endpoint_url is what clients use."""
    proxy = FaultProxy(upstream=aws)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
