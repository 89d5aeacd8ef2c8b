"""--steps N, torch-free (options.py parses it, validate.py checks it against a baseline before torch is imported):
the number of training steps of the loss-parity check (parity.py), and the baseline's number when none is given."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from neuron_smoke.errors import UsageError

# A parity check of a few steps, not a training run (the curve is kept in the baseline's index.json).
MAX_STEPS = 10_000


def parse(value: str) -> int:
    """--steps' argparse type: a whole number from 1 to MAX_STEPS."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_STEPS:
        raise argparse.ArgumentTypeError(f"must be a whole number of steps from 1 to {MAX_STEPS}: {value}")
    return number


def resolve(given: int | None, index: dict[str, Any], path: Path | None) -> int:
    """--steps against a baseline's (`index`, {} without one): the baseline's N when none is given (1, the single
    step, where it has no curve); a usage error when they differ, before any step."""
    parity = index.get("parity")
    recorded = int(parity.get("steps", 1)) if isinstance(parity, dict) else 1
    if given is None or path is None:
        return given or recorded
    if given != recorded and not isinstance(parity, dict):
        raise UsageError(
            f"--steps {given}: the baseline {path} has no loss curve (it was recorded without --steps); compare "
            f"without --steps, or record a baseline with --steps {given}"
        )
    if given != recorded:
        raise UsageError(
            f"--steps {given}: the baseline {path} was recorded with --steps {recorded}; compare with --steps "
            f"{recorded} (or leave --steps out), or record a baseline with --steps {given}"
        )
    return given
