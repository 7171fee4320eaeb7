"""A server a test starts ends with the pytest process that started it, even when that
process is killed (SIGKILL skips every fixture's teardown): before, a killed test run left
its moto_server processes listening."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.controlplane import REPO_ROOT, wait_until

pytestmark = pytest.mark.adapters

STARTER = """
import sys, time
from pathlib import Path
from support.moto import start_moto_server
server = start_moto_server(Path(sys.argv[1]))
print(server.process.pid, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody has reaped yet has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_a_moto_server_ends_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "tests"), str(REPO_ROOT)]))
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path / "moto.log")],
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline()
        assert line.strip(), f"the starter printed no pid (exit {starter.poll()})"
        server = int(line)
        assert running(server)
        starter.kill()
        starter.wait(timeout=10)
        wait_until(
            lambda: not running(server),
            timeout_seconds=30,
            what=f"moto_server {server} to end with its starter",
        )
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(timeout=10)
