"""A real moto_server on 127.0.0.1 and a fault-injecting proxy in front of it.

Import the fixtures into a test module: ``from support.moto import aws, moto_server, faulty_aws``.

- ``moto_server`` (session): ``moto_server`` on a free 127.0.0.1 port, stopped at the end.
- ``aws`` (per test): moto reset to empty, dummy credentials in the environment (the standard
  boto3 chain reads them), and the endpoint URL.
- ``faulty_aws`` (per test): the same behind :class:`support.faultproxy.FaultProxy`, which
  fails chosen API actions with throttling errors, 429s, 503s, dropped or timed-out
  responses (before or after moto acted), lists instances late, and counts the requests
  that reached moto.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.children import DIE_WITH_PARENT
from support.faultproxy import (
    DELAY_AFTER,
    DROP_AFTER,
    DROP_BEFORE,
    THROTTLE,
    TOO_MANY,
    UNAVAILABLE,
    FaultProxy,
)
from support.ports import free_port

REGION = "us-east-1"


@dataclass
class MotoServer:
    endpoint_url: str
    process: subprocess.Popen[bytes]

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        # A hang guard, not a deadline: at load 40 a reset took over 10 s and three adapter
        # tests errored in their set-up.
        with urllib.request.urlopen(request, timeout=60):
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
            preexec_fn=DIE_WITH_PARENT,
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


@pytest.fixture
def faulty_aws(aws: str) -> Iterator[FaultProxy]:
    """A FaultProxy in front of the (reset) moto; its endpoint_url is what clients use."""
    proxy = FaultProxy(upstream=aws)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


__all__ = [
    "DELAY_AFTER",
    "DROP_AFTER",
    "DROP_BEFORE",
    "REGION",
    "THROTTLE",
    "TOO_MANY",
    "UNAVAILABLE",
    "FaultProxy",
    "MotoServer",
    "aws",
    "faulty_aws",
    "moto_server",
]
