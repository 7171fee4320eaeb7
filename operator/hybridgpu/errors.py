"""The project's own exceptions."""


class HybridGPUError(Exception):
    """Base of hybridgpu's errors."""


class UserError(HybridGPUError):
    """Input a user can fix (a file, a flag, a manifest): printed as one line, exit code 2."""
