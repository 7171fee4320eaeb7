"""Servers and operators the tests start end with the pytest process that started them, even
when it is killed (SIGTERM or SIGKILL skip fixture teardown): ``subprocess.Popen(...,
preexec_fn=DIE_WITH_PARENT)``."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child: get SIGTERM when the thread that started it dies (Linux prctl)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


DIE_WITH_PARENT: Callable[[], None] | None = die_with_parent if sys.platform == "linux" else None
