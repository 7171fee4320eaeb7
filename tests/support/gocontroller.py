"""What the tests' Go controllers (JobSet, KubeRay) share: the paths their hack/ script prints
after building them (cached by version), and running one as a subprocess against the
session's control plane until its log says it started, stopped on exit."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from support.controlplane import REPO_ROOT


def hack_paths(script: str, command: str = "build") -> dict[str, Path]:
    """The KEY=path lines ``hack/<script> <command>`` prints (built on first use, then cached)."""
    result = subprocess.run(
        [str(REPO_ROOT / "hack" / script), command], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"hack/{script} {command} failed:\n{result.stderr}")
    pairs = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return {key: Path(value) for key, value in pairs.items()}


@contextmanager
def controller_process(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    what: str,
    started: Callable[[bytes], bool],
    timeout: float = 60.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running with its output in ``log_path``, once ``started(log)`` holds (else a
    RuntimeError naming ``what`` with the log's tail); SIGTERM, then SIGKILL, on exit."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout
        while not started(log_path.read_bytes()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start:\n" + log_path.read_text()[-4000:])
            time.sleep(0.2)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
