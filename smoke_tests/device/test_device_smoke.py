"""One test per stage of the device smoke suite; the suite runs once per session (see conftest.py)."""

from __future__ import annotations

import json

import pytest

from neuron_smoke.registry import NAMES
from neuron_smoke.results import FAIL, SKIP, Report


@pytest.mark.parametrize("stage", NAMES)
def test_stage(smoke_report: Report, stage: str) -> None:
    result = smoke_report.stage(stage)
    print(json.dumps({"stage": stage, "numbers": result.numbers, "notes": result.notes}, default=str))
    if result.status == SKIP:
        pytest.skip(f"{stage}: {result.reason}")
    if result.status == FAIL:
        pytest.fail(f"{stage}: " + "; ".join(result.failures), pytrace=False)
