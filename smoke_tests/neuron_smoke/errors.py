"""The exceptions that decide an exit code or a stage's status; each carries the message a user should read."""

from __future__ import annotations


class UsageError(Exception):
    """Bad options or inputs (exit 2)."""


class DeviceMissing(Exception):
    """The requested device is not present (exit 3)."""


class Skip(Exception):
    """The stage does not apply here; the message says why."""
