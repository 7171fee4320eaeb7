"""No call of the operator to the apiserver waits forever: one that names no timeout gets
(CONNECT_SECONDS, READ_SECONDS), so an apiserver that accepted a request and never answers
(a connection lost in a restart) fails the call instead of hanging the tick that made it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
from kubernetes import client

from hybridgpu import kubeclient

pytestmark = pytest.mark.unit


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A server on 127.0.0.1 that accepts connections, reads, and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)  # accept() wakes up to see ``stop``
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        server.close()
        for conn in held:
            conn.close()


def kubeconfig(tmp_path: Path, port: int) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return str(path)


def test_a_call_to_an_apiserver_that_never_answers_fails_instead_of_hanging(
    tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubeclient, "READ_SECONDS", 0.3)
    api = kubeclient.api_client(kubeconfig(tmp_path, silent_server))
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            client.CoreV1Api(api).list_node()
            outcome.append(None)
        except BaseException as err:  # the test reports what it was
            outcome.append(err)

    started = time.monotonic()
    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(30)
    assert not caller.is_alive(), "the call still waits after 30 s"
    assert isinstance(outcome[0], urllib3.exceptions.HTTPError), outcome
    assert time.monotonic() - started < 30
    api.close()


def test_a_call_that_names_its_timeout_keeps_it(
    tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubeclient, "READ_SECONDS", 3600.0)  # would hang the test
    api = kubeclient.api_client(kubeconfig(tmp_path, silent_server))
    with pytest.raises(urllib3.exceptions.HTTPError):
        client.CoreV1Api(api).list_node(_request_timeout=(1, 0.3))
    api.close()


def test_the_connection_pool_holds_every_watch_stream_and_then_some(tmp_path: Path) -> None:
    api = kubeclient.api_client(kubeconfig(tmp_path, 1))
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == kubeclient.CONNECTIONS
    assert kubeclient.CONNECTIONS >= 24
    api.close()
