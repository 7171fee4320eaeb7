"""`hybridgpu simulate --workers N`: policies simulated in worker processes give the results
of simulating them one after the other; progress, errors and Ctrl-C cross the processes."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.support.sim import BUNDLED_CLUSTER

from hybridgpu.cli import main
from hybridgpu.errors import UserError
from hybridgpu.sim import parallel
from hybridgpu.sim.compare import POLICIES, compare
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.parallel import run_all
from hybridgpu.sim.spot import load_availability_trace, load_correlated_trace
from hybridgpu.sim.traces import synthetic

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _series(path: Path, data: list[int], gap: float) -> Path:
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


def _bundled(_: Path) -> SimSettings:
    """`hybridgpu simulate`'s own physics: spot interruptions drawn at random, seed 7."""
    return SimSettings(spot_hazard_per_hour=0.05, seed=7)


def _correlated(tmp_path: Path) -> SimSettings:
    """Spot pools that lose shares of their nodes at once (the nodes drawn at random) and
    cannot launch part of the time."""
    drops = _series(tmp_path / "drops.json", [0, 1, 1, 3, 0, 0, 2, 2, 0, 4] * 6, gap=1200)
    closed = _series(tmp_path / "closed.json", [0] * 20 + [1] * 4 + [0] * 12, gap=1800)
    return SimSettings(
        spot_correlated=load_correlated_trace(drops),
        spot_availability=load_availability_trace(closed),
        seed=11,
    )


@pytest.mark.parametrize("physics", [_bundled, _correlated])
def test_two_workers_give_the_results_of_one(
    tmp_path: Path, physics: Callable[[Path], SimSettings]
) -> None:
    config = load_cluster(BUNDLED_CLUSTER)
    jobs = synthetic(seed=7, hours=72)
    settings = physics(tmp_path)
    sequential = compare(config.pools, config.policy.spec, jobs, settings, workers=1)
    assert parallel.can_fork()  # else workers=2 would run in this process too
    side_by_side = compare(config.pools, config.policy.spec, jobs, settings, workers=2)
    assert list(side_by_side) == list(POLICIES)  # every policy, in the same order
    for name, result in sequential.items():
        assert side_by_side[name] == result, name  # every field, the series included
    assert sequential["hybridgpu"].spot_interruptions > 0  # the random draws were exercised


def test_the_cli_prints_the_same_json_with_any_workers(tmp_path: Path, capsys) -> None:
    drops = _series(tmp_path / "drops.json", [0, 1, 1, 3, 0, 0, 2, 2, 0, 4], gap=1200)
    argv = ["simulate", "--no-png", "--json", "--hours", "12", "--spot-correlated", str(drops)]
    outputs = []
    for workers in ("1", "3"):
        assert main([*argv, "--workers", workers]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]


def _pid(step: Callable[[float], None] | None) -> int:
    assert step is not None
    step(0.5)
    return os.getpid()


def test_runs_go_to_worker_processes_and_report_progress_here() -> None:
    seen: list[tuple[str, float]] = []
    pids = run_all(
        {"a": _pid, "b": _pid, "c": _pid},
        workers=2,
        progress=lambda name, fraction: seen.append((name, fraction)),
    )
    assert list(pids) == ["a", "b", "c"]
    assert os.getpid() not in pids.values() and len(set(pids.values())) == 3
    for name in pids:
        assert [f for n, f in seen if n == name] == [0.5, 1.0]  # 1.0 once, when it is done


def _fails(step: Callable[[float], None] | None) -> int:
    raise UserError("reactive: the trace is wrong")


def test_an_error_in_a_worker_is_raised_here_as_it_is() -> None:
    with pytest.raises(UserError) as raised:
        run_all({"a": _pid, "b": _fails}, workers=2)
    assert str(raised.value) == "reactive: the trace is wrong"  # what the CLI prints
    assert raised.value.__notes__[0].startswith("raised in the process simulating b:")


def _process_name(step: Callable[[float], None] | None) -> str:
    import multiprocessing

    return multiprocessing.current_process().name


def test_the_workers_are_named_after_the_work_they_do() -> None:
    """`hybridgpu plan` replays in the same workers: its processes and errors say so."""
    names = run_all({"a": _process_name, "b": _process_name}, workers=2, doing="replaying")
    assert names == {"a": "hybridgpu replaying a", "b": "hybridgpu replaying b"}
    with pytest.raises(UserError) as raised:
        run_all({"a": _pid, "fleet": _fails}, workers=2, doing="replaying")
    assert raised.value.__notes__[0].startswith("raised in the process replaying fleet:")


def test_a_user_error_in_a_worker_is_one_line_and_exit_2(monkeypatch, capsys) -> None:
    run = Simulation.run

    def failing(self: Simulation) -> object:
        if self.name == "reactive":
            raise UserError("reactive: cannot simulate this")
        return run(self)

    monkeypatch.setattr(Simulation, "run", failing)  # the forked workers inherit it
    assert main(["simulate", "--no-png", "--hours", "2", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err == "hybridgpu: error: reactive: cannot simulate this\n"


_FOREVER = """
import os, sys
from hybridgpu.sim.parallel import run_all

def forever(step):
    os.write(1, f"{os.getpid()}\\n".encode())  # one write: lines do not interleave
    while True:
        step(0.5)

"""
"""A parent whose workers run until stopped, each printing its pid once it runs."""


@contextlib.contextmanager
def _forever(tmp_path: Path, tail: str) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """Start ``_FOREVER`` + ``tail`` in a session of its own; yield it and its two running
    workers' pids. Whatever the test does, the whole session is killed at the end: workers
    that spin forever must not outlive a failed test."""
    script = tmp_path / "forever.py"
    script.write_text(_FOREVER + textwrap.dedent(tail))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
    )
    try:
        assert proc.stdout is not None
        yield proc, [int(proc.stdout.readline()) for _ in range(2)]  # both running
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def test_ctrl_c_stops_every_worker(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: the parent stops its workers and exits 130,
    with no traceback and no process left behind."""
    tail = """
        try:
            run_all({"a": forever, "b": forever, "c": forever}, workers=2)
        except KeyboardInterrupt:
            sys.exit(130)
        """
    with _forever(tmp_path, tail) as (proc, workers):
        ends = [os.pidfd_open(pid) for pid in workers]
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
        for end in ends:
            assert select.select([end], [], [], 0)[0] == [end]  # the worker has ended
            os.close(end)


def test_workers_end_when_their_parent_is_killed(tmp_path: Path) -> None:
    tail = """
        run_all({"a": forever, "b": forever}, workers=2)
        """
    with _forever(tmp_path, tail) as (proc, workers):
        ends = [os.pidfd_open(pid) for pid in workers]
        proc.kill()  # the parent alone: its workers stay in the session
        proc.wait(timeout=60)
        for end in ends:
            assert select.select([end], [], [], 60)[0] == [end]  # waits for the worker to end
            os.close(end)


def test_the_progress_bar_has_a_row_per_run_going() -> None:
    from hybridgpu.sim.cli import _ProgressBar

    bar = _ProgressBar()
    try:
        bar("hybridgpu", 0.5)
        bar("hybridgpu", 1.0)
        bar("autoscaler_spot", 0.25)  # one after the other: the same row, reset
        assert bar.shown == ["autoscaler_spot"]
        bar("reactive", 0.5)  # side by side: a second row
        assert bar.shown == ["autoscaler_spot", "reactive"]
        bar("autoscaler_spot", 1.0)
        bar("on_demand", 0.125)  # takes the finished run's row
        assert bar.shown == ["on_demand", "reactive"]
        assert [b.n for b in bar.bars] == [125, 500]
    finally:
        bar.close()


def test_the_progress_bar_starts_no_thread_the_workers_would_be_forked_beside() -> None:
    import threading

    from hybridgpu.sim.cli import _ProgressBar

    bar = _ProgressBar()
    try:
        bar("hybridgpu", 0.5)
        # tqdm's monitor, once started by any bar of this process, would still run.
        assert not [t for t in threading.enumerate() if type(t).__name__ == "TMonitor"]
    finally:
        bar.close()
