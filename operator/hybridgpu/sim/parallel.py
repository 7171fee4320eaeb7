"""Independent simulations run side by side in worker processes, with their progress.

Each task is one policy's run over the same trace: it shares nothing with the others (its own
``Simulation``, its own random generator seeded from ``SimSettings.seed``), so running them in
processes gives the results of running them one after the other.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import traceback
from collections.abc import Callable, Mapping
from multiprocessing import connection
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TypeVar

from hybridgpu.errors import HybridGPUError, RunsFailed

T = TypeVar("T")
Progress = Callable[[float], None]
Task = Callable[[Progress | None], T]
"""One run: called with a progress callback (the fraction of the trace simulated, 0..1) or
None, returns its result (picklable, to come back from a worker process)."""

PROGRESS_STEP = 0.001
"""A worker reports progress when it moved this much (a bar of 1000 steps): a DLRM run
samples thousands of times."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether worker processes can be forked here (not on Windows)."""
    return "fork" in multiprocessing.get_all_start_methods()


def run_all(
    tasks: Mapping[str, Task[T]],
    *,
    workers: int = 1,
    progress: Callable[[str, float], None] | None = None,
    failed: Callable[[str, Exception, int], None] | None = None,
    doing: str = "simulating",
) -> dict[str, T]:
    """Every task's result by name, in the order of ``tasks``.

    ``workers`` 1 runs them one after the other in this process; more runs up to that many at
    once, each in a worker process of its own, started in the order of ``tasks`` (put the
    longest first, so the others fill the remaining workers beside it). Where processes
    cannot be forked, they run one after the other. ``progress(name, fraction)`` is called in
    this process, with a fraction below 1 while a run goes on and once with 1.0 when it has
    finished. ``doing`` names the work in the workers' process names and in errors
    ("simulating NAME").

    A run that fails does not stop the others: every run goes to its end, those waiting for a
    worker included, and then the failures are raised, all of them, whatever the order they
    happened in. A user fixes every bad input after one run, not one per rerun of minutes, and
    the error is the same each time; the price is waiting for the other runs' end, no longer
    than the whole call takes when nothing fails. So that a user need not wait blind,
    ``failed(name, error, left)`` is called in this process as soon as a run is known to have
    failed, with the number of runs still going or waiting (a CLI says so, and that Ctrl-C
    stops them). One failure is raised as it is (a worker's with a note naming its run and
    its traceback there); several, or a worker process that ended without an exception
    (killed by a signal, out of memory, an exit), raise
    ``RunsFailed``, naming each run and its error, or the worker's signal or exit code, in the
    order of ``tasks``. Ctrl-C (KeyboardInterrupt) stops every run at once.
    """
    workers = min(workers, len(tasks))
    if workers > 1 and can_fork():
        return _in_processes(tasks, workers, progress, failed, doing)
    results: dict[str, T] = {}
    failures: dict[str, Exception] = {}
    for name, task in tasks.items():
        step = (lambda f, n=name: progress(n, min(f, 1 - PROGRESS_STEP))) if progress else None
        try:
            results[name] = task(step)
        except Exception as error:
            failures[name] = error
            if failed is not None:
                failed(name, error, len(tasks) - len(results) - len(failures))
            continue
        if progress is not None:
            progress(name, 1.0)
    _raise_failures(tasks, failures, doing)
    return results


def _in_processes(
    tasks: Mapping[str, Task[T]],
    workers: int,
    progress: Callable[[str, float], None] | None,
    failed: Callable[[str, Exception, int], None] | None,
    doing: str,
) -> dict[str, T]:
    # fork, not spawn: a child starts as a copy of this process, with the trace, the pools and
    # the task's closure already in memory (copy-on-write), where spawn would import hybridgpu
    # again and pickle the jobs to every worker; and it keeps this process's hash seed, so
    # anything ordered by a set of strings comes out as it does here. (A child runs only the
    # simulator's code, which takes no lock another thread here could hold at the fork.)
    context = multiprocessing.get_context("fork")
    waiting = list(tasks)
    running: dict[Connection, tuple[str, BaseProcess]] = {}
    results: dict[str, T] = {}
    failures: dict[str, Exception] = {}

    def fail(name: str, error: Exception) -> None:
        failures[name] = error
        if failed is not None:
            failed(name, error, len(tasks) - len(results) - len(failures))

    try:
        while waiting or running:
            while waiting and len(running) < workers:
                name = waiting.pop(0)
                reader, writer = context.Pipe(duplex=False)
                worker: BaseProcess = context.Process(
                    target=_work,
                    args=(tasks[name], writer, os.getpid(), progress is not None),
                    name=f"hybridgpu {doing} {name}",
                    daemon=True,  # terminated at this process's exit, whatever happens
                )
                worker.start()
                writer.close()  # the worker's end: the reader sees EOF once the worker ends
                running[reader] = (name, worker)
            for ready in connection.wait(list(running)):
                assert isinstance(ready, Connection)
                name, worker = running[ready]
                try:
                    kind, value = ready.recv()
                except EOFError:
                    del running[ready]
                    ready.close()
                    worker.join()
                    if name not in results and name not in failures:
                        fail(name, WorkerDied(_death(worker.exitcode)))
                    continue
                if kind == "progress":
                    if progress is not None:
                        progress(name, value)
                elif kind == "done":
                    results[name] = value
                    if progress is not None:
                        progress(name, 1.0)
                else:
                    error, where = value
                    error.add_note(f"raised in the process {doing} {name}:\n{where}")
                    fail(name, error)
    finally:
        # Ctrl-C (which the workers ignore), or an error here: stop the runs still going.
        for _, worker in running.values():
            worker.terminate()
        for reader, (_, worker) in running.items():
            worker.join()
            reader.close()
    _raise_failures(tasks, failures, doing)
    return {name: results[name] for name in tasks}


class WorkerDied(HybridGPUError):
    """A worker process that ended without a result or an exception: killed by a signal (the
    kernel's out-of-memory killer sends SIGKILL), or exited."""


def _death(exitcode: int | None) -> str:
    """How a worker process ended without a word, from its exit code (-N: signal N)."""
    if exitcode is not None and exitcode < 0:
        try:
            how = f"{signal.Signals(-exitcode).name} (signal {-exitcode})"
        except ValueError:
            how = f"signal {-exitcode}"
        oom = "; out of memory?" if exitcode == -signal.SIGKILL else ""
        return f"its process was killed by {how} before it finished{oom}"
    return f"its process ended with exit code {exitcode} without a result"


def _raise_failures(tasks: Mapping[str, object], failed: dict[str, Exception], doing: str) -> None:
    """Raise the failed runs' errors (see ``run_all``), if any, in the order of ``tasks``."""
    failures = [(name, failed[name]) for name in tasks if name in failed]
    if len(failures) == 1 and not isinstance(failures[0][1], WorkerDied):
        raise failures[0][1]
    if failures:
        error = RunsFailed(doing, len(tasks), failures)
        for name, failure in failures:  # the tracebacks, for --debug
            notes = getattr(failure, "__notes__", None)
            if notes:  # a worker's: its traceback there
                error.add_note("\n".join(notes))
            elif not isinstance(failure, WorkerDied):
                where = "".join(traceback.format_exception(failure))
                error.add_note(f"raised {doing} {name}:\n{where}")
        raise error


def _work(task: Task[T], results: Connection, parent: int, report_progress: bool) -> None:
    """A worker process: run the task, send its progress and then its result (or error)."""
    # Ctrl-C in a terminal reaches the whole process group: the parent stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sent = -1.0

    def step(fraction: float) -> None:
        nonlocal sent
        if os.getppid() != parent:
            os._exit(1)  # the parent was killed: nobody waits for this run
        if report_progress and fraction - sent >= PROGRESS_STEP:
            sent = fraction
            results.send(("progress", min(fraction, 1 - PROGRESS_STEP)))

    try:
        results.send(("done", task(step)))
    except Exception as error:
        results.send(("error", (_picklable(error), traceback.format_exc())))
    results.close()


def _picklable(error: Exception) -> Exception:
    """The error itself when it survives pickling (a UserError does), else its words."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error
