"""A TCP proxy on 127.0.0.1 that cuts its first connection part-way through a response.

It forwards bytes both ways without looking into them (TLS passes through: the apiserver's
certificate names 127.0.0.1, so a client pointed at the proxy's port verifies it as before).
The first connection is closed, both ways, once ``cut_after_bytes`` have gone from the
server to the client: to the client it is the apiserver closing a watch mid-stream. Later
connections are held (accepted, not forwarded) until :meth:`release`, so a test can change
the cluster between the cut and the client's next request.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttingProxy:
    def __init__(self, upstream_port: int, cut_after_bytes: int) -> None:
        self.upstream_port = upstream_port
        self.cut_after_bytes = cut_after_bytes
        self.connections = 0
        self.cut = threading.Event()
        """Set once the first connection has been cut."""
        self._released = threading.Event()
        self._stopped = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def release(self) -> None:
        self._released.set()

    def stop(self) -> None:
        self._stopped.set()
        self._released.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                first = self.connections == 0
                self.connections += 1
                self._sockets.append(client)
            threading.Thread(target=self._serve, args=(client, first), daemon=True).start()

    def _serve(self, client: socket.socket, first: bool) -> None:
        if not first:
            self._released.wait()
        if self._stopped.is_set():
            client.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        with self._lock:
            self._sockets.append(upstream)
        limit = self.cut_after_bytes if first else None
        up = threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True)
        up.start()
        self._pump(upstream, client, limit)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if first:
            self.cut.set()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while limit is None or sent < limit:
                want = 65536 if limit is None else min(65536, limit - sent)
                data = source.recv(want)
                if not data:
                    break
                target.sendall(data)
                sent += len(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)
