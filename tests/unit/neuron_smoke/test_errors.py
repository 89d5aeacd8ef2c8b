"""Unit tests of neuron_smoke.errors: the three exceptions are distinct kinds carrying the user's message, and a
stage that raises one gets the status that kind stands for (skip, device missing, failure)."""

from __future__ import annotations

import pytest

from neuron_smoke.backends import BACKENDS
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import DeviceMissing, Skip, UsageError
from neuron_smoke.runner import Stage, run_stage


@pytest.mark.parametrize("kind", [UsageError, DeviceMissing, Skip])
def test_each_kind_carries_its_message_and_is_no_other_kind(kind: type[Exception]) -> None:
    error = kind("what to fix")
    assert str(error) == "what to fix"
    others = tuple(k for k in (UsageError, DeviceMissing, Skip) if k is not kind)
    assert not isinstance(error, others)


def _raise(error: Exception) -> Stage:
    def stage(ctx: Context, log: StageLog) -> None:
        if isinstance(error, DeviceMissing):
            log.fail("earlier failure")
        raise error

    return Stage("device", "t", stage)


def test_a_stage_status_follows_the_kind_raised() -> None:
    ctx = Context(Options(device="cpu"), BACKENDS["cpu"])
    skipped = run_stage(_raise(Skip("needs 2 devices")), ctx)
    assert (skipped.status, skipped.reason, skipped.device_missing) == ("skip", "needs 2 devices", False)
    missing = run_stage(_raise(DeviceMissing("no neuron device")), ctx)
    assert (missing.status, missing.device_missing) == ("fail", True)
    assert missing.failures == ["earlier failure", "no neuron device"]
    usage = run_stage(_raise(UsageError("bad --model")), ctx)
    assert (usage.status, usage.device_missing, usage.failures) == ("fail", False, ["UsageError: bad --model"])
