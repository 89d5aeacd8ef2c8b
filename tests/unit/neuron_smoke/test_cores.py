"""Unit tests of neuron_smoke.cores: the NeuronCore list syntax, the cores a run may use (device nodes, LNC and
the runtime's variables), the split between the collective ranks and this process, and prepare()'s once-per-process
restriction of this process (its state and the environment restored after each test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neuron_smoke import cores
from neuron_smoke.cores import PHYSICAL_CORES_PER_DEVICE, VISIBLE, CorePlan
from neuron_smoke.errors import UsageError


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (VISIBLE, "NEURON_RT_NUM_CORES", "NEURON_LOGICAL_NC_CONFIG"):
        monkeypatch.setenv(name, "")  # recorded, so that what prepare() sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setattr(cores, "_state", {"plan": None, "error": "", "prepared": False})


def test_lnc_is_1_or_2(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cores.lnc() == cores.LNC_DEFAULT
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", " 1 ")
    assert cores.lnc() == 1
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "4")
    with pytest.raises(UsageError, match="NEURON_LOGICAL_NC_CONFIG='4': the Neuron runtime accepts only 1 or 2"):
        cores.lnc()


def test_core_lists_parse_and_format_both_ways() -> None:
    assert cores.parse_cores("3") == (3,)
    assert cores.parse_cores(" 0 - 3 ") == (0, 1, 2, 3)
    assert cores.parse_cores("5,0,2-3,3") == (0, 2, 3, 5)
    assert cores.format_cores(()) == ""
    for spec in ("0", "0-3", "0,2-3", "1,3,5-9,11"):
        assert cores.format_cores(cores.parse_cores(spec)) == spec
    for listed in [(0, 1, 2, 5), (7,), (0, 2, 4), tuple(range(64))]:
        assert cores.parse_cores(cores.format_cores(listed)) == listed


@pytest.mark.parametrize("spec", ["", "a", "3-1", "1,", "-2", "0-"])
def test_a_bad_core_list_is_refused(spec: str) -> None:
    with pytest.raises(UsageError, match=f"{VISIBLE}={spec!r} is not a core list"):
        cores.parse_cores(spec)


def test_available_cores_from_the_nodes_and_the_lnc(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cores.available_cores(2) == (tuple(range(2 * PHYSICAL_CORES_PER_DEVICE // 2)), False)
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    assert cores.available_cores(2) == (tuple(range(2 * PHYSICAL_CORES_PER_DEVICE)), False)
    assert cores.available_cores(0) == ((), False)


def test_the_runtime_variables_restrict_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VISIBLE, "4-7")
    assert cores.available_cores(1) == ((4, 5, 6, 7), True)
    monkeypatch.setenv("NEURON_RT_NUM_CORES", "2")
    assert cores.available_cores(1) == ((4, 5), True)
    monkeypatch.delenv(VISIBLE)
    assert cores.available_cores(1) == ((0, 1), True)
    monkeypatch.setenv("NEURON_RT_NUM_CORES", "two")
    with pytest.raises(UsageError, match="NEURON_RT_NUM_CORES='two' is not a number"):
        cores.available_cores(1)


def test_the_ranks_take_the_first_cores_and_this_process_the_next() -> None:
    available = tuple(range(PHYSICAL_CORES_PER_DEVICE // cores.LNC_DEFAULT))
    plan = cores.plan(1, 2)
    assert plan == CorePlan(available, (available[2],), available[:2], False)
    assert plan.to_dict() == {"available": len(available), "process": "2", "ranks": "0-1", "user_restricted": False}
    assert cores.rank_env(plan, 1) == {VISIBLE: str(available[1])}
    too_few = cores.plan(1, len(available))
    assert (too_few.process, too_few.ranks) == (available, ())


def test_prepare_restricts_this_process_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VISIBLE, "8-11")
    monkeypatch.setenv("NEURON_RT_NUM_CORES", "4")
    cores.prepare(4, 2)
    plan = cores.current()
    assert plan is not None and (plan.ranks, plan.process, plan.user_restricted) == ((8, 9), (10,), True)
    assert cores.error() == ""
    assert os.environ[VISIBLE] == "10" and "NEURON_RT_NUM_CORES" not in os.environ
    cores.prepare(4, 1)  # a second call does not plan again from this process's own cores
    assert cores.current() is plan and os.environ[VISIBLE] == "10"


def test_prepare_keeps_a_bad_setting_for_the_device_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VISIBLE, "oops")
    cores.prepare(1, 2)
    assert cores.current() is None and "is not a core list" in cores.error()
    assert os.environ[VISIBLE] == "oops"


def test_prepare_before_torch_reads_the_device_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_SMOKE_DEV_GLOB", str(tmp_path / "neuron*"))
    cores.prepare_before_torch("auto", 2)  # auto without device files: not a Neuron run
    cores.prepare_before_torch("cpu", 2)
    assert cores._state["prepared"] is False
    for index in range(2):
        (tmp_path / f"neuron{index}").touch()
    cores.prepare_before_torch("auto", 2)
    plan = cores.current()
    assert plan is not None and len(plan.available) == 2 * PHYSICAL_CORES_PER_DEVICE // cores.LNC_DEFAULT
    assert plan.ranks == (0, 1) and plan.process == (2,)
