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
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from tests.support.sim import BUNDLED_CLUSTER

from hybridgpu.cli import main
from hybridgpu.errors import RunsFailed, UserError
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


def _first_failure(pids: int) -> Callable[[Callable[[float], None] | None], int]:
    """A task that fails at once, after writing its pid to the pipe ``pids``."""

    def task(step: Callable[[float], None] | None) -> int:
        os.write(pids, f"{os.getpid():>10}".encode())
        raise UserError("the first to fail")

    return task


def _second_failure(pids: int) -> Callable[[Callable[[float], None] | None], int]:
    """A task that fails once the process of ``_first_failure`` has ended: its error is on
    its way to the parent (or there) before this one is raised."""

    def task(step: Callable[[float], None] | None) -> int:
        assert select.select([pids], [], [], 60)[0] == [pids]  # 60 s: only if it never came
        try:
            first = os.pidfd_open(int(os.read(pids, 10)))
        except ProcessLookupError:
            pass  # ended, and its end seen by the parent already
        else:
            assert select.select([first], [], [], 60)[0] == [first]
        raise UserError("the second to fail")

    return task


@pytest.mark.parametrize("first", ["b", "d"])
def test_every_failed_run_is_reported_in_the_order_given(first: str) -> None:
    """b and d fail, one at once and the other after it (d waiting for a worker, in one order):
    one error names both, b then d, whichever failed first; the other runs went on."""
    read, write = os.pipe()
    try:
        tasks: dict[str, Callable[[Callable[[float], None] | None], int]] = {
            "a": _pid,
            "b": _first_failure(write) if first == "b" else _second_failure(read),
            "c": _pid,
            "d": _first_failure(write) if first == "d" else _second_failure(read),
        }
        with pytest.raises(RunsFailed) as raised:
            run_all(tasks, workers=2, doing="replaying")
    finally:
        os.close(read)
        os.close(write)
    second = "the second to fail" if first == "b" else "the first to fail"
    b_error = "the first to fail" if first == "b" else "the second to fail"
    assert str(raised.value) == (
        f"2 of 4 runs failed:\n  replaying b: {b_error}\n  replaying d: {second}"
    )
    assert [name for name, _ in raised.value.failures] == ["b", "d"]
    assert raised.value.user_errors_only


def test_every_failed_run_is_reported_one_after_the_other_too() -> None:
    """--workers 1: the runs after a failed one are still made, and every failure reported."""
    finished: list[str] = []
    with pytest.raises(RunsFailed) as raised:
        run_all(
            {"a": _fails, "b": _pid, "c": _fails},
            workers=1,
            progress=lambda name, fraction: finished.extend([name] if fraction == 1.0 else []),
        )
    assert finished == ["b"]
    assert str(raised.value) == (
        "2 of 3 runs failed:\n"
        "  simulating a: reactive: the trace is wrong\n"
        "  simulating c: reactive: the trace is wrong"
    )


def _waits_for(told: int) -> Callable[[Callable[[float], None] | None], int]:
    """A task that ends once the parent wrote to the pipe ``told`` (60 s: only if never)."""

    def task(step: Callable[[float], None] | None) -> int:
        assert select.select([told], [], [], 60)[0] == [told], "the parent said nothing"
        return os.getpid()

    return task


def test_a_failed_run_is_told_at_once_while_the_others_go_on() -> None:
    """b fails at once; a and c end only when the parent has been told of b's failure (by
    ``failed``, which writes to their pipe): they could not if it were told at the end."""
    read, write = os.pipe()
    told: list[tuple[str, str, int]] = []

    def failed(name: str, error: Exception, left: int) -> None:
        told.append((name, str(error), left))
        os.write(write, b"xx")  # one byte for each run waiting on it

    try:
        with pytest.raises(UserError):
            run_all(
                {"a": _waits_for(read), "b": _fails, "c": _waits_for(read)},
                workers=2,
                failed=failed,
            )
    finally:
        os.close(read)
        os.close(write)
    assert told == [("b", "reactive: the trace is wrong", 2)]  # a going, c waiting


def test_a_failed_run_is_told_at_once_one_after_the_other_too() -> None:
    told: list[tuple[str, int]] = []
    with pytest.raises(RunsFailed):
        run_all(
            {"a": _fails, "b": _process_name, "c": _fails},
            workers=1,
            failed=lambda name, error, left: told.append((name, left)),
        )
    assert told == [("a", 2), ("c", 0)]


def test_the_progress_lines_say_a_run_failed_once_past_their_quiet_start(capsys) -> None:
    from hybridgpu.sim.cli import _ProgressLines

    quiet = _ProgressLines(quiet_seconds=3600)
    quiet.failed("reactive", UserError("bad\ntrace"), 3)  # a short run: said once, at the end
    assert capsys.readouterr().err == ""
    lines = _ProgressLines(quiet_seconds=0)
    lines("reactive", 0.5)
    lines.failed("reactive", UserError("bad\ntrace"), 3)
    lines.failed("owned_only", ZeroDivisionError("division by zero"), 1)
    lines.failed("on_demand", UserError("the last"), 0)  # nothing goes on: the end says it
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == [
        "hybridgpu simulate: reactive failed: bad trace; the 3 other runs go on and every "
        "error is printed at their end (Ctrl-C stops them)",
        "hybridgpu simulate: owned_only failed: ZeroDivisionError: division by zero; the "
        "other run goes on and every error is printed at their end (Ctrl-C stops them)",
    ]
    assert lines.going == {}


def test_the_progress_bar_says_a_run_failed_above_the_bars_and_frees_its_row(capsys) -> None:
    from hybridgpu.sim.cli import _ProgressBar

    bar = _ProgressBar()
    try:
        bar("hybridgpu", 0.5)
        bar("reactive", 0.25)
        bar.failed("hybridgpu", UserError("bad trace"), 2)
        bar("on_demand", 0.125)  # takes the failed run's row
        assert bar.shown == ["on_demand", "reactive"]
    finally:
        bar.close()
    assert "hybridgpu simulate: hybridgpu failed: bad trace; the 2 other runs go on" in (
        capsys.readouterr().err
    )


def test_the_cli_says_a_run_failed_while_the_others_go_on(monkeypatch, capsys) -> None:
    """`simulate` past its quiet start (here none): the failure is said at once, and again
    with every other one in the error at the end."""
    from hybridgpu.sim import cli

    monkeypatch.setattr(cli._ProgressLines, "__init__", _no_quiet(cli._ProgressLines.__init__))
    failing = {"hybridgpu": UserError("hybridgpu: cannot simulate this")}
    assert _simulate_failing(monkeypatch, failing) == 2
    err = capsys.readouterr().err
    told = "hybridgpu simulate: hybridgpu failed: hybridgpu: cannot simulate this; the "
    assert err.count(told) == 1
    assert err.index(told) < err.index("hybridgpu: error: hybridgpu: cannot simulate this\n")


def _no_quiet(init: Callable[..., None]) -> Callable[..., None]:
    def quiet_none(self: object, **kwargs: float) -> None:
        init(self, **{**kwargs, "quiet_seconds": 0.0})

    return quiet_none


def _killed(step: Callable[[float], None] | None) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("not killed")


def _exits(step: Callable[[float], None] | None) -> int:
    os._exit(3)


def test_a_worker_killed_or_exiting_is_named_with_its_signal_or_exit_code() -> None:
    with pytest.raises(RunsFailed) as raised:
        run_all({"a": _pid, "b": _killed, "c": _pid}, workers=2)
    assert str(raised.value) == (
        "1 of 3 runs failed:\n  simulating b: its process was killed by SIGKILL (signal 9) "
        "before it finished; out of memory?"
    )
    assert not raised.value.user_errors_only  # a bug's exit code, as before
    with pytest.raises(RunsFailed) as raised:
        run_all({"a": _exits, "b": _fails, "c": _killed}, workers=3)
    assert str(raised.value) == (
        "3 of 3 runs failed:\n"
        "  simulating a: its process ended with exit code 3 without a result\n"
        "  simulating b: reactive: the trace is wrong\n"
        "  simulating c: its process was killed by SIGKILL (signal 9) before it finished; "
        "out of memory?"
    )


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


def _simulate_failing(monkeypatch: pytest.MonkeyPatch, errors: Mapping[str, Exception]) -> int:
    """`hybridgpu simulate --hours 2 --workers 2`'s exit code with the policies named in
    ``errors`` raising their error (the forked workers inherit the patched run)."""
    run = Simulation.run

    def failing(self: Simulation) -> object:
        if self.name in errors:
            raise errors[self.name]
        return run(self)

    monkeypatch.setattr(Simulation, "run", failing)
    return main(["simulate", "--no-png", "--hours", "2", "--workers", "2"])


def test_a_user_error_in_a_worker_is_one_line_and_exit_2(monkeypatch, capsys) -> None:
    assert (
        _simulate_failing(monkeypatch, {"reactive": UserError("reactive: cannot simulate this")})
        == 2
    )
    err = capsys.readouterr().err
    assert err == "hybridgpu: error: reactive: cannot simulate this\n"


def test_policies_failing_side_by_side_are_a_line_each_and_exit_2(monkeypatch, capsys) -> None:
    failing = {
        name: UserError(f"{name}: cannot simulate this") for name in ("owned_only", "reactive")
    }
    assert _simulate_failing(monkeypatch, failing) == 2
    assert capsys.readouterr().err == (
        "hybridgpu: error: 2 of 5 runs failed:\n"
        "  simulating reactive: reactive: cannot simulate this\n"
        "  simulating owned_only: owned_only: cannot simulate this\n"
    )


def test_a_bug_among_failed_policies_is_exit_1_with_the_way_to_its_traceback(
    monkeypatch, capsys
) -> None:
    failing = {
        "hybridgpu": ZeroDivisionError("division by zero"),
        "on_demand": UserError("on_demand: cannot simulate this"),
    }
    assert _simulate_failing(monkeypatch, failing) == 1
    assert capsys.readouterr().err == (
        "hybridgpu: error: 2 of 5 runs failed:\n"
        "  simulating hybridgpu: ZeroDivisionError: division by zero\n"
        "  simulating on_demand: on_demand: cannot simulate this\n"
        "(run with --debug for the tracebacks)\n"
    )


def test_a_killed_worker_is_named_with_its_signal_and_exit_1(monkeypatch, capsys) -> None:
    run = Simulation.run

    def killed(self: Simulation) -> object:
        if self.name == "on_demand":
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would
        return run(self)

    monkeypatch.setattr(Simulation, "run", killed)
    assert main(["simulate", "--no-png", "--hours", "2", "--workers", "2"]) == 1
    assert capsys.readouterr().err == (
        "hybridgpu: error: 1 of 5 runs failed:\n"
        "  simulating on_demand: its process was killed by SIGKILL (signal 9) before it "
        "finished; out of memory?\n"
    )


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


def test_a_run_of_jobs_that_all_end_at_zero_reports_its_progress() -> None:
    """The loaders skip 0 s jobs; a caller of the engine need not: its progress divided by
    the trace's end, 0 here (ZeroDivisionError before)."""
    from hybridgpu.models.snapshot import Criticality
    from hybridgpu.sim.compare import simulation
    from hybridgpu.sim.traces import TraceJob

    config = load_cluster(BUNDLED_CLUSTER)
    jobs = [TraceJob("instant", 0, 0, 1, Criticality.STANDARD)]
    seen: list[float] = []
    result = simulation(
        "hybridgpu", config.pools, config.policy.spec, jobs, SimSettings(), seen.append
    ).run()
    assert seen and all(f == 1.0 for f in seen)
    assert result.unfinished_jobs == 0
