"""neuron_smoke.argtypes: the argparse types the command lines share."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from neuron_smoke.argtypes import MAX_SECONDS, non_negative, positive, seconds


def test_positive_takes_numbers_over_zero_of_its_kind() -> None:
    assert positive(int)("3") == 3 and isinstance(positive(int)("3"), int)
    assert positive(float)("0.5") == 0.5


def test_non_negative_takes_zero_and_more_of_its_kind() -> None:
    assert non_negative(int)("0") == 0 and isinstance(non_negative(int)("0"), int)
    assert non_negative(int)("3") == 3
    assert non_negative(float)("0") == 0.0


@pytest.mark.parametrize(
    ("bounded", "kind", "value", "message"),
    [
        (positive, int, "0", "must be > 0: 0"),
        (positive, int, "-2", "must be > 0: -2"),
        (positive, float, "0", "must be a finite number > 0: 0"),
        (positive, float, "nan", "must be a finite number > 0: nan"),  # nan compares false both ways
        (positive, float, "inf", "must be a finite number > 0: inf"),
        (non_negative, int, "-1", "must be 0 or more: -1"),
        (non_negative, float, "-0.5", "must be a finite number, 0 or more: -0.5"),
        (non_negative, float, "nan", "must be a finite number, 0 or more: nan"),
        (non_negative, float, "inf", "must be a finite number, 0 or more: inf"),
    ],
)
def test_a_number_out_of_bounds_or_not_finite_is_refused(
    bounded: Callable[[Callable[[str], float]], Callable[[str], float]], kind: type, value: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        bounded(kind)(value)


def test_a_value_that_does_not_parse_is_named_with_its_kind_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--n", type=positive(int))
    with pytest.raises(SystemExit):
        parser.parse_args(["--n", "x"])
    assert "argument --n: invalid int value: 'x'" in capsys.readouterr().err


def test_seconds_take_a_time_limit_over_zero_up_to_a_week() -> None:
    assert seconds("0.5") == 0.5 and seconds(str(MAX_SECONDS)) == MAX_SECONDS == 7 * 24 * 3600
    for value in ("0", "-1", "nan", "inf", "1e308", str(MAX_SECONDS + 1)):  # 1e308 overflowed time_t in a stage
        with pytest.raises(argparse.ArgumentTypeError, match=f"over 0 and at most 604800 \\(a week\\): {value}$"):
            seconds(value)
