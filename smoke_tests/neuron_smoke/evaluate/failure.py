"""A step of the user's model that raised, as a finding instead of a traceback: the error, the op and the module that
were running, and the line of the user's code (`file:line`, the innermost frame outside torch and this harness)."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import torch

import neuron_smoke

_NOT_THEIRS = (str(Path(torch.__file__).parent), str(Path(neuron_smoke.__file__).parent), "contextlib.py")


# What a user's model may raise in a step: any error, and SystemExit (a script's own check that calls sys.exit, such as
# stopping on a NaN loss), which would otherwise end verify-device with the user's code and no report. Never
# KeyboardInterrupt: Ctrl-C still ends the run.
USER_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit)


class StepFailed(Exception):
    """Raised by a captured step that failed; `finding` says where."""

    def __init__(self, finding: dict[str, Any]) -> None:
        super().__init__(finding["error"])
        self.finding = finding


def where(error: BaseException) -> str | None:
    """`file:line` of the innermost frame of the traceback in the user's code, else the innermost frame."""
    frames = traceback.extract_tb(error.__traceback__)
    theirs = [f for f in frames if not any(part in f.filename for part in _NOT_THEIRS)]
    chosen = theirs or list(frames)
    return f"{chosen[-1].filename}:{chosen[-1].lineno}" if chosen else None


def finding(error: BaseException, phase: str, module: str | None, op: str | None) -> dict[str, Any]:
    text = str(error).strip()
    first = text.splitlines()[0][:300] if text else ""
    return {
        "phase": phase,
        "error": f"{type(error).__name__}: {first}" if first else type(error).__name__,
        "module": module,
        "op": op,
        "where": where(error),
    }
