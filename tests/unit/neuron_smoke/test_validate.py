"""neuron_smoke.validate: the environment variables verify-device reads are checked like flags, the outputs before any
work, and the evaluation's rules before torch."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from neuron_smoke import validate
from neuron_smoke.errors import UsageError


def namespace(**given: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "device": None, "report": None, "junit": None, "record": None, "eval_report": None, "baseline": None,
        "shapes": None, "model": None, "steps": None, "precision": None, "fail_on": None, "full_tensor_limit": None,
        "sweep_steps": None, "instance_type": None, "throughput_size": None,
    }  # fmt: skip
    return argparse.Namespace(**{**base, **given})


def test_the_device_flag_wins_then_the_variable_then_neuron(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURON_SMOKE_DEVICE", raising=False)
    assert validate.device(namespace()) == "neuron"
    monkeypatch.setenv("NEURON_SMOKE_DEVICE", "cpu")
    assert validate.device(namespace()) == "cpu"
    assert validate.device(namespace(device="cuda")) == "cuda"
    monkeypatch.setenv("NEURON_SMOKE_DEVICE", "garbage")
    with pytest.raises(UsageError, match=r"NEURON_SMOKE_DEVICE='garbage': must be one of neuron, cuda, cpu, auto"):
        validate.device(namespace())


def test_the_switches_take_0_1_or_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in validate.SWITCHES:
        monkeypatch.setenv(name, "1")
    validate.check_environment()
    monkeypatch.setenv("NEURON_SMOKE_IMDS", "yes")
    with pytest.raises(UsageError, match=r"NEURON_SMOKE_IMDS='yes': must be 0 or 1"):
        validate.check_environment()


def test_a_throughput_size_larger_than_the_hosts_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # --throughput-size 10000000 ran, and failed at the stage with the allocator's 400000000000000-byte error
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 2**20}  # 4 GiB: two 16384x16384 float32 inputs fill 2 GiB
    monkeypatch.setattr(validate.os, "sysconf", lambda name: pages[name])
    validate.check_throughput_size(namespace())
    validate.check_throughput_size(namespace(throughput_size=16384))
    with pytest.raises(UsageError) as raised:
        validate.check_throughput_size(namespace(throughput_size=32768))  # 8 GiB
    assert str(raised.value) == (
        "--throughput-size 32768: the two 32768x32768 float32 inputs need 8.0 GiB, more than this host's 4.0 GiB of "
        "memory; give a smaller N, or leave --throughput-size out for the device's default"
    )


def test_an_instance_type_on_neuron_must_be_one_the_release_supports() -> None:
    validate.check_instance_type(namespace(device="neuron", instance_type="trn2.48xlarge"))
    validate.check_instance_type(namespace(device="cuda", instance_type="p5.48xlarge"))  # cuda's table, not judged
    validate.check_instance_type(namespace(device="cpu", instance_type="trn1.32xlarge"))  # the stage notes it unused
    with pytest.raises(UsageError, match=r"^--instance-type: instance type trn1.32xlarge is not supported: Trn1"):
        validate.check_instance_type(namespace(device="neuron", instance_type="trn1.32xlarge"))


def test_report_and_junit_need_files_of_their_own(tmp_path: Path) -> None:
    validate.check_outputs(namespace(report=tmp_path / "r.json", junit=tmp_path / "r.xml"))
    with pytest.raises(UsageError, match="both name"):
        validate.check_outputs(namespace(report=tmp_path / "r.json", junit=tmp_path / "r.json"))


def test_a_record_folder_that_holds_something_else_is_refused(tmp_path: Path) -> None:
    (tmp_path / "stranger.txt").write_text("not a baseline")
    with pytest.raises(UsageError, match="exists and is not a baseline directory"):
        validate.check_outputs(namespace(record=tmp_path))
    (tmp_path / "index.json").write_text("{}")  # a baseline directory: recorded again in place
    validate.check_outputs(namespace(record=tmp_path))


def test_the_current_folder_is_refused_as_the_record_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `cd base && verify-device --record .` replaced the folder under the shell, which then listed it empty
    monkeypatch.chdir(tmp_path)
    for here in (Path("."), tmp_path):
        with pytest.raises(UsageError, match=r"is the current folder; name a folder for the baseline, e\.g\. --record"):
            validate.check_outputs(namespace(record=here))
    validate.check_outputs(namespace(record=Path("base")))


def test_the_evaluations_rules(tmp_path: Path) -> None:
    validate.check_evaluation(namespace())
    with pytest.raises(UsageError, match="--eval-report DIR goes with --record"):
        validate.check_evaluation(namespace(eval_report=tmp_path))
    with pytest.raises(UsageError, match=r"--precision goes with --record.*; the stages take --strict-fp32"):
        validate.check_evaluation(namespace(precision="fp32"))
    with pytest.raises(UsageError, match="--sweep-steps goes with --shapes"):
        validate.check_evaluation(namespace(record=tmp_path / "a", model="m:f", sweep_steps=3))
    with pytest.raises(UsageError, match="record a baseline first"):
        validate.check_evaluation(namespace(record=tmp_path / "a", baseline=tmp_path / "b", model="m:f"))
    with pytest.raises(UsageError, match="need --model"):
        validate.check_evaluation(namespace(record=tmp_path / "a"))
    with pytest.raises(UsageError, match="--shapes: 'x' is not a shape"):
        validate.check_evaluation(namespace(shapes="x", model="m:f"))
    with pytest.raises(UsageError, match="--steps need --model"):
        validate.check_evaluation(namespace(steps=3))


def test_a_baseline_of_other_steps_is_refused_before_torch(tmp_path: Path) -> None:
    from neuron_smoke.evaluate import BASELINE_SCHEMA

    (tmp_path / "index.json").write_text(json.dumps({"schema": BASELINE_SCHEMA, "parity": {"steps": 5}}))
    (tmp_path / "tensors.pt").write_bytes(b"")
    validate.check_evaluation(namespace(baseline=tmp_path, model="m:f"))  # the baseline's 5
    with pytest.raises(UsageError, match=f"--steps 3: the baseline {tmp_path} was recorded with --steps 5"):
        validate.check_evaluation(namespace(baseline=tmp_path, model="m:f", steps=3))
