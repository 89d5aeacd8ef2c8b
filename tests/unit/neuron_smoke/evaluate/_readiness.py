"""What readiness.scan finds in a model with nothing to report, for the tests of readiness, report and sections."""

from __future__ import annotations

from typing import Any


def nothing_found() -> dict[str, Any]:
    """A clean scan's findings (a fresh dict each call: tests may edit it)."""
    return {
        "unsupported": [],
        "float64": [],
        "fallback": [],
        "fallback_tracked": False,
        "compile_failure": None,
        "findings": 0,
    }
