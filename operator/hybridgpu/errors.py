"""The project's own exceptions."""


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


def one_line(error: Exception) -> str:
    """An error on one line: the project's own in their words, any other with its type."""
    words = str(error) if isinstance(error, HybridGPUError) else f"{type(error).__name__}: {error}"
    return " ".join(words.split())
