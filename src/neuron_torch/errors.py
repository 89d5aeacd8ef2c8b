"""The one exception type of the library: it carries the message a user should read and the exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class NeuronTorchError(Exception):
    """A problem the user can fix; `str(error)` names the problem and the fix."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class MatrixError(NeuronTorchError):
    """The matrix file is malformed: the message names the file, the key and the problem."""

    def __init__(self, path: object, key: str, problem: str) -> None:
        super().__init__(f"{path}: {key}: {problem}")
        self.key = key


class UnsupportedError(NeuronTorchError):
    """A request (cell, family, Python, OS, instance) that the release does not support."""
