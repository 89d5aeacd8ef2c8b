"""neuron_smoke.evaluate.steps: --steps parsed, and held to the baseline's number of steps (or its lack of a curve)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import steps


def test_a_whole_number_from_1_to_the_limit_parses_and_nothing_else() -> None:
    assert steps.parse("1") == 1 and steps.parse(str(steps.MAX_STEPS)) == steps.MAX_STEPS
    for value in ("0", "-1", "2.0", "", str(steps.MAX_STEPS + 1)):
        with pytest.raises(argparse.ArgumentTypeError, match=f"from 1 to {steps.MAX_STEPS}: {value}$"):
            steps.parse(value)


def test_steps_are_the_baselines_unless_given_and_a_different_number_is_refused(tmp_path: Path) -> None:
    recorded = {"parity": {"steps": 5}}
    assert steps.resolve(None, recorded, tmp_path) == 5
    assert steps.resolve(5, recorded, tmp_path) == 5
    assert steps.resolve(None, {}, None) == 1 and steps.resolve(3, {}, None) == 3
    with pytest.raises(UsageError) as raised:
        steps.resolve(3, recorded, tmp_path)
    assert str(raised.value) == (
        f"--steps 3: the baseline {tmp_path} was recorded with --steps 5; compare with --steps 5 (or leave --steps "
        "out), or record a baseline with --steps 3"
    )
    with pytest.raises(UsageError) as raised:
        steps.resolve(4, {}, tmp_path)  # a baseline without a curve
    assert str(raised.value) == (
        f"--steps 4: the baseline {tmp_path} has no loss curve (it was recorded without --steps); compare without "
        "--steps, or record a baseline with --steps 4"
    )
    assert steps.resolve(1, {}, tmp_path) == 1  # --steps 1: the single step, which every baseline has
