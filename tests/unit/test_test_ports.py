"""The ports the tests give their servers never come from the ephemeral range, where any
client connection (the operator's own, to the apiserver) may take them before the server
binds (a CI run failed so: kopf's liveness endpoint found its port taken)."""

from __future__ import annotations

import socket
import subprocess
import sys

from support.ports import _ephemeral_low, free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(10_000 <= port < _ephemeral_low() for port in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_the_shell_scripts_get_the_same_ports() -> None:
    from support.controlplane import REPO_ROOT

    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests" / "support" / "ports.py"), "3"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(set(out)) == 3
    assert all(10_000 <= int(port) < _ephemeral_low() for port in out)
