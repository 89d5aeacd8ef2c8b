"""argparse types the command lines share (verify-device, its evaluation options, the benchmark scripts)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """A number of `kind` (int or float) over 0; a float must be finite too (nan compares false both ways)."""

    def parse(value: str) -> float:
        number = kind(value)
        if not number > 0 or not math.isfinite(number):
            raise argparse.ArgumentTypeError(
                f"must be > 0: {value}" if kind is int else f"must be a finite number > 0: {value}"
            )
        return number

    parse.__name__ = kind.__name__  # argparse names it in "invalid int value: 'x'"
    return parse
