"""argparse types the command lines share (verify-device, its evaluation options, the benchmark scripts)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """A number of `kind` (int or float) over 0; a float must be finite too (nan compares false both ways)."""
    return _bounded(kind, lambda n: n > 0, "> 0", "a finite number > 0")


def non_negative(kind: Callable[[str], float]) -> Callable[[str], float]:
    """A number of `kind` (int or float) of 0 or more (a count of warm-up steps); a float must be finite too."""
    return _bounded(kind, lambda n: n >= 0, "0 or more", "a finite number, 0 or more")


def _bounded(
    kind: Callable[[str], float], within: Callable[[float], bool], as_int: str, as_float: str
) -> Callable[[str], float]:
    """`kind`'s parse, refusing a number not `within` the bound (said `as_int` or `as_float`, by the kind)."""

    def parse(value: str) -> float:
        number = kind(value)
        if not within(number) or not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"must be {as_int if kind is int else as_float}: {value}")
        return number

    parse.__name__ = kind.__name__  # argparse names it in "invalid int value: 'x'"
    return parse


MAX_SECONDS = 7 * 24 * 3600  # a week: a deadline further off overflows the clocks and timers it is handed to
# A time limit (--timeout, --join-timeout): seconds over 0, at most a week (`--timeout 1e308` overflowed time_t).
seconds = _bounded(
    float, lambda n: 0 < n <= MAX_SECONDS, "", f"a number of seconds over 0 and at most {MAX_SECONDS} (a week)"
)
