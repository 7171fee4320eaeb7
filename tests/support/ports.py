"""Free TCP ports on 127.0.0.1 for the servers the tests (and hack/*.sh) start.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the *ephemeral* range,
the same range it draws from for every outgoing connection. Between the moment a test picks
such a port and the moment its server binds it, any client socket on the machine may take it
as its local port, and the server then fails with "address already in use". That happened in
CI: an operator's own burst of connections to the apiserver took the port picked for its
liveness endpoint a few milliseconds before kopf bound it.

So ports are drawn at random from *below* the ephemeral range, where the kernel never puts a
client socket, and each is checked to be bindable now. Only another caller of this module
can still race for the same port, and with a few thousand candidates drawn at random that is
rare; the callers bind within a second.

Runnable without the package (stdlib only), for the shell scripts:
``python3 tests/support/ports.py N`` prints N distinct free ports.
"""

from __future__ import annotations

import random
import socket
import sys
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below this are well-known and registered services' ports
DEFAULT_EPHEMERAL_LOW = 32_768  # Linux's default when the range cannot be read


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1, free now and outside the ephemeral range."""
    high = _ephemeral_low()
    if high - LOWEST < 100 * count:  # an odd range: fall back to the kernel's choice
        return _kernel_ports(count)
    held: list[socket.socket] = []
    try:
        for port in random.sample(range(LOWEST, high), min(high - LOWEST, 200 * count)):
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
            if len(held) == count:
                return [int(s.getsockname()[1]) for s in held]
        raise RuntimeError(f"no {count} free ports on 127.0.0.1 in [{LOWEST}, {high})")
    finally:
        for sock in held:
            sock.close()


def free_port() -> int:
    """One port on 127.0.0.1, free now and outside the ephemeral range."""
    return free_ports(1)[0]


def _kernel_ports(count: int) -> list[int]:
    held = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for sock in held:
            sock.close()


if __name__ == "__main__":
    print(" ".join(str(p) for p in free_ports(int(sys.argv[1]) if len(sys.argv) > 1 else 1)))
