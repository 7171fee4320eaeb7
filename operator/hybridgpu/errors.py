"""The project's own exceptions."""

from __future__ import annotations

import math
from collections.abc import Mapping


class HybridGPUError(Exception):
    """Base of hybridgpu's errors."""


class UserError(HybridGPUError):
    """Input a user can fix (a file, a flag, a manifest): printed as one line, exit code 2."""


class RunsFailed(HybridGPUError):
    """Independent runs done together (``sim.parallel.run_all``) of which several failed, or
    one ended without an exception (a worker process killed): every failure, by the run's
    name, in the order the runs were given, whenever each happened."""

    def __init__(self, doing: str, runs: int, failures: list[tuple[str, Exception]]) -> None:
        self.doing = doing
        """The work, as in "simulating NAME" ("simulating", "replaying")."""
        self.runs = runs
        """How many runs there were (the failed ones among them)."""
        self.failures = failures
        """(run name, its error), in the order the runs were given."""
        lines = [f"{len(failures)} of {runs} runs failed:"]
        lines += [f"  {doing} {name}: {one_line(error)}" for name, error in failures]
        super().__init__("\n".join(lines))

    @property
    def user_errors_only(self) -> bool:
        """Whether every failure is input a user can fix (exit code 2, not a bug's 1)."""
        return all(isinstance(error, UserError) for _, error in self.failures)

    @property
    def bugs(self) -> bool:
        """Whether a failure is an unexpected exception of hybridgpu's, with a traceback."""
        return any(not isinstance(error, HybridGPUError) for _, error in self.failures)


class FigureNotFinite(HybridGPUError):
    """A computed figure (dollars, GPU-hours, a ratio) is inf or nan. Every input is bounded so
    that none can be (hybridgpu.models.limits): this is a bug, reported as an internal error
    that names the figure (exit code 1) instead of printed as if it were a result."""


def require_finite(figures: object, where: str) -> None:
    """FigureNotFinite naming the first number in ``figures`` (a number, or mappings and lists
    of them, nested; other values are skipped) that is inf or nan; ``where`` names the whole,
    e.g. "simulate: on_demand"."""
    if isinstance(figures, float) and not math.isfinite(figures):
        raise FigureNotFinite(
            f"{where} is {figures}, not a number a result can have (a bug: please report it "
            "with the inputs)"
        )
    if isinstance(figures, Mapping):
        for key, value in figures.items():
            require_finite(value, f"{where}.{key}")
    elif isinstance(figures, list | tuple):
        for i, value in enumerate(figures):
            require_finite(value, f"{where}[{i}]")


def one_line(error: Exception) -> str:
    """An error on one line: the project's own in their words, any other with its type."""
    words = str(error) if isinstance(error, HybridGPUError) else f"{type(error).__name__}: {error}"
    return " ".join(words.split())
