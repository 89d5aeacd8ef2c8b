"""stage_device.py on a host without a device: the CPU pass, a missing or unopenable Neuron device, neuron-ls's
answers (its process stood in), a first device use that fails, and the device count against the core plan and the
instance type (from the backends' tables, which neuron_instances.json renders from the matrix)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from neuron_smoke import cores, stage_device
from neuron_smoke.backends import CPU, CUDA, NEURON, Backend
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import DeviceMissing


@pytest.fixture(autouse=True)
def _no_imds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_SMOKE_IMDS", "0")
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)


def _ctx(backend: Backend = NEURON, **options: Any) -> Context:
    return Context(options=Options(device=backend.name, **options), backend=backend)


def _nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> list[str]:
    for i in range(count):
        (tmp_path / f"neuron{i}").write_text("")
    monkeypatch.setenv("NEURON_SMOKE_DEV_GLOB", str(tmp_path / "neuron*"))
    return sorted(str(tmp_path / f"neuron{i}") for i in range(count))


def test_the_cpu_passes_with_one_device() -> None:
    log = StageLog()
    stage_device.run(_ctx(CPU), log)
    assert log.failures == [] and log.numbers["device_count"] == 1 and log.summary == "1 cpu device(s)"
    assert "device_files" not in log.numbers  # the CPU has none to look for
    assert log.notes == []


def test_an_expected_count_on_the_cpu_is_said_to_be_unchecked() -> None:
    # --expected-devices 4 --device cpu passed with one device and no word of the option
    log = StageLog()
    stage_device.run(_ctx(CPU, expected_devices=4), log)
    assert log.failures == [] and log.numbers["device_count"] == 1
    assert log.notes == ["--expected-devices 4 not checked: torch counts the CPU as one device"]


def test_an_instance_type_on_the_cpu_is_said_to_be_unused() -> None:
    log = StageLog()
    stage_device.run(_ctx(CPU, instance_type="trn2.48xlarge"), log)
    assert log.failures == [] and log.notes == [
        "--instance-type trn2.48xlarge not used: it sets what a neuron or cuda run expects"
    ]


def test_no_neuron_device_files_is_a_missing_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _nodes(tmp_path, monkeypatch, 0)
    log = StageLog()
    with pytest.raises(DeviceMissing) as raised:
        stage_device.run(_ctx(), log)
    assert str(raised.value).startswith("no neuron device") and NEURON.missing_help in str(raised.value)
    assert log.numbers["device_files"] == []


def test_a_bad_core_setting_fails_before_the_device_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = _nodes(tmp_path, monkeypatch, 2)
    monkeypatch.setattr(cores, "error", lambda: "NEURON_RT_VISIBLE_CORES='x' is not a core list")
    log = StageLog()
    stage_device.run(_ctx(), log)
    assert log.failures == ["NEURON_RT_VISIBLE_CORES='x' is not a core list"]
    assert log.numbers == {"device_files": nodes}


def test_a_node_this_user_may_not_open_is_a_permission_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = _nodes(tmp_path, monkeypatch, 2)
    os.chmod(nodes[1], 0o640)
    real_access = os.access
    monkeypatch.setattr(cores, "error", lambda: "")
    monkeypatch.setattr(os, "access", lambda p, mode: False if p == nodes[1] else real_access(p, mode))
    log = StageLog()
    stage_device.run(_ctx(), log)
    (failure,) = log.failures
    assert failure == stage_device.permission_help(nodes[1])
    assert nodes[1] in failure and "mode 0640" in failure and f"gid {os.stat(nodes[1]).st_gid}" in failure
    assert "permission problem" in failure


def test_torch_without_a_device_is_a_missing_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _nodes(tmp_path, monkeypatch, 1)
    monkeypatch.setattr(cores, "error", lambda: "")
    monkeypatch.setattr(stage_device, "have_tool", lambda name: None)
    log = StageLog()
    stage_device.run(_ctx(), log)  # torch_neuronx is not installed here
    assert len(log.failures) == 1 and log.failures[0].startswith(f"cannot import {NEURON.module}: ")
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 0)
    importable = dataclasses.replace(NEURON, module=None)
    with pytest.raises(DeviceMissing, match="torch reports 0 devices"):
        stage_device.run(_ctx(importable), StageLog())


def _neuron_ls(monkeypatch: pytest.MonkeyPatch, returncode: int = 0, stdout: str = "", timeout: bool = False) -> None:
    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert cmd == ["/opt/bin/neuron-ls", "--json-output"]
        if timeout:
            raise subprocess.TimeoutExpired(cmd, 1)
        return subprocess.CompletedProcess(cmd, returncode, stdout, "driver error")

    monkeypatch.setattr(stage_device, "have_tool", lambda name: f"/opt/bin/{name}")
    monkeypatch.setattr(stage_device.subprocess, "run", fake_run)


@pytest.mark.parametrize(
    ("answer", "devices", "failure"),
    [
        ({"stdout": '[{"neuron_device": 0}, {"neuron_device": 1}]'}, 2, None),
        ({"stdout": '{"neuron_devices": [{"id": 0}]}'}, 1, None),
        ({"stdout": "[]"}, 0, "lists no Neuron devices"),
        ({"returncode": 2}, None, "exited 2: driver error"),
        ({"stdout": "not json"}, None, "printed no JSON"),
        ({"timeout": True}, None, "timed out"),
    ],
)
def test_neuron_ls_answers(
    answer: dict[str, Any], devices: int | None, failure: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _neuron_ls(monkeypatch, **answer)
    log = StageLog()
    stage_device._neuron_ls(_ctx(), log)
    assert log.numbers.get("neuron_ls_devices") == devices
    if failure is None:
        assert log.failures == []
    else:
        assert len(log.failures) == 1 and failure in log.failures[0]


def test_without_neuron_ls_its_check_is_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage_device, "have_tool", lambda name: None)
    log = StageLog()
    stage_device._neuron_ls(_ctx(), log)
    assert log.failures == [] and len(log.notes) == 1 and "neuron-ls" in log.notes[0]


def test_a_first_use_with_a_wrong_answer_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "ones", lambda n, device=None: torch.zeros(n))
    log = StageLog()
    assert not stage_device._first_use(NEURON, log)
    assert log.failures == ["first use of the device: (1 + 1) summed over 2 elements gave 2.0, expected 4"]
    assert stage_device._first_use(CPU, StageLog())  # the CPU needs no first use


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ("NRT: device not available (held by pid 12)", "held by another process"),
        ("Permission denied", "permission"),
        ("nrt_init failed", "first use of the device failed"),
    ],
)
def test_a_first_use_error_is_read(message: str, words: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise RuntimeError(f"{message}\nmore detail")

    monkeypatch.setattr(torch, "ones", refuse)
    log = StageLog()
    assert not stage_device._first_use(NEURON, log)
    (failure,) = log.failures
    assert words in failure and failure.endswith(message)


def test_the_accelerator_must_be_the_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    log = StageLog()
    stage_device._accelerator(CUDA, log)
    assert log.numbers["accelerator"] is None and log.failures == ["torch.accelerator reports 'none', expected 'cuda'"]
    cpu_log = StageLog()
    stage_device._accelerator(CPU, cpu_log)
    assert cpu_log.failures == []


def _plan(process: int, available: int, restricted: bool = False) -> cores.CorePlan:
    cores_ = tuple(range(available))
    return cores.CorePlan(cores_, cores_[-process:], cores_[: available - process], restricted)


def _instance() -> tuple[str, int]:
    """An instance type of the table and its device count at the default LNC."""
    name, count = sorted(NEURON.devices_per_instance.items())[0]
    return name, count


def test_the_neuron_count_against_this_process_and_the_whole_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    name, full = _instance()
    nodes = ["/dev/neuron"] * (full * cores.LNC_DEFAULT // cores.PHYSICAL_CORES_PER_DEVICE)
    monkeypatch.setattr(cores, "current", lambda: _plan(1, full))
    log = StageLog()
    stage_device._neuron_count(_ctx(instance_type=name), log, 1, nodes)
    assert log.failures == [] and log.numbers["expected_device_count"] == full == log.numbers["visible_cores"]
    wrong = StageLog()
    stage_device._neuron_count(_ctx(instance_type=name), wrong, 2, nodes)
    assert len(wrong.failures) == 1 and "this process may use 1" in wrong.failures[0]
    fewer = StageLog()
    monkeypatch.setattr(cores, "current", lambda: _plan(1, full - 1))
    stage_device._neuron_count(_ctx(instance_type=name), fewer, 1, nodes)
    assert fewer.failures == [f"{full - 1} NeuronCore(s) visible to this run, expected {full} for {name}"]


def test_the_instance_count_is_not_compared_when_part_of_it_is_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    name, full = _instance()
    monkeypatch.setattr(cores, "current", lambda: _plan(1, 4, restricted=True))
    restricted = StageLog()
    stage_device._neuron_count(_ctx(instance_type=name), restricted, 1, ["/dev/neuron0"])
    assert restricted.failures == [] and restricted.numbers["expected_device_count"] is None
    assert restricted.numbers["instance_device_count"] == full and "NEURON_RT_VISIBLE_CORES" in restricted.notes[0]
    monkeypatch.setenv("NEURON_SMOKE_CONTAINER", "1")
    monkeypatch.setattr(cores, "current", lambda: _plan(1, 4))
    container = StageLog()
    stage_device._neuron_count(_ctx(instance_type=name), container, 1, ["/dev/neuron0"])
    assert container.failures == [] and "passed to this container" in container.notes[0]
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")  # every physical core a device: twice the table's count
    assert stage_device._whole_instance(_ctx(), StageLog(), name, 10**3, False) == full * 2


def test_an_unlisted_size_is_noted_and_expected_devices_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "current", lambda: _plan(1, 4))
    unknown = StageLog()  # a size of a supported family the release does not list: its count is unknown
    stage_device._neuron_count(_ctx(instance_type="trn3.3xlarge"), unknown, 1, [])
    assert unknown.failures == [] and "trn3.3xlarge" in unknown.notes[0]
    given = StageLog()
    stage_device._neuron_count(_ctx(instance_type="trn3.3xlarge", expected_devices=8), given, 1, [])
    assert given.failures == ["4 NeuronCore(s) visible to this run, expected 8 for trn3.3xlarge"]


@pytest.mark.parametrize(
    ("instance", "given", "reason"),
    [
        ("trn1.32xlarge", False, "is not supported: Trn1 is not listed for TorchNeuron"),
        ("inf2.48xlarge", False, "is not supported: Inf2"),
        ("x9.tiny", True, "supported families: trn2, trn3"),
    ],
)
def test_an_instance_type_the_release_refuses_fails_with_its_reason(
    instance: str, given: bool, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a Trn1 host (IMDS's answer) passed the device stage with "expected device count unknown"
    monkeypatch.setattr(cores, "current", lambda: _plan(1, 4))
    monkeypatch.setattr(stage_device, "instance_type_from_imds", lambda: instance)
    log = StageLog()
    stage_device._neuron_count(_ctx(instance_type=instance if given else None, expected_devices=4), log, 1, [])
    (failure,) = log.failures
    source = "--instance-type" if given else "IMDS"
    assert reason in failure and failure.endswith(f"(the instance type from {source})")
    assert log.numbers["instance_type"] == instance and "expected_device_count" not in log.numbers


def test_the_gpu_count_against_the_instance_table() -> None:
    name, expected = sorted(CUDA.devices_per_instance.items())[0]
    log = StageLog()
    stage_device._expected_count(_ctx(CUDA, instance_type=name), log, expected + 1)
    assert log.failures == [f"{expected + 1} cuda device(s) visible, expected {expected} for {name}"]
    ok = StageLog()
    stage_device._expected_count(_ctx(CUDA, instance_type=name), ok, expected)
    assert ok.failures == [] and ok.notes == []
    unknown = StageLog()
    stage_device._expected_count(_ctx(CUDA), unknown, 1)
    assert unknown.failures == [] and "unknown" in unknown.notes[0]
