"""stage_throughput.py: where the peak comes from (--peak-tflops, the release's per-device figure, a datasheet), the
numbers of a small CPU run, and the floor that fails a "Neuron device" computing at host speed (the CPU standing in for
it under the neuron name)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from neuron_smoke import release_facts, stage_throughput
from neuron_smoke.backends import CPU, CUDA, NEURON, Backend
from neuron_smoke.context import Context, Options, StageLog


@dataclasses.dataclass(frozen=True)
class CpuNamedNeuron(Backend):
    """The neuron table entry, computing on the CPU."""

    @property
    def device_type(self) -> str:
        return "cpu"


@pytest.fixture(autouse=True)
def packaged_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packaged release's facts (conftest.py empties release_facts.load's cache around each test)."""
    monkeypatch.delenv(release_facts.ENV, raising=False)


def _ctx(backend: Backend = CPU, **options: Any) -> Context:
    return Context(
        options=Options(device="cpu", iterations=2, warmup=1, throughput_size=64, **options), backend=backend
    )


def test_the_peak_and_its_source() -> None:
    assert stage_throughput.peak_tflops(_ctx(peak_tflops=12.5), "cpu", torch.float32) == (12.5, "--peak-tflops")
    neuron = stage_throughput.peak_tflops(_ctx(NEURON, instance_type="trn2.48xlarge"), "neuron", torch.bfloat16)
    assert neuron == release_facts.device_peak("trn2.48xlarge", "bfloat16", 2)
    assert neuron[0] == pytest.approx(667 / 4) and "trn2.48xlarge per logical device at LNC=2" in neuron[1]
    name = next(iter(CUDA.peak_tflops))
    assert stage_throughput.peak_tflops(_ctx(CUDA), f"NVIDIA {name}", torch.float32) == (
        CUDA.peak_for(f"NVIDIA {name}", torch.float32),
        f"NVIDIA {name} datasheet",
    )
    assert stage_throughput.peak_tflops(_ctx(), "cpu", torch.float32)[0] is None
    assert stage_throughput.device_name(_ctx()) == "cpu"


@pytest.mark.parametrize(("lnc", "share"), [(None, 2), ("2", 2), ("1", 1)])
def test_the_neuron_peak_is_the_releases_per_core_figure_at_the_lnc(
    monkeypatch: pytest.MonkeyPatch, lnc: str | None, share: int
) -> None:
    if lnc is None:
        monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    else:
        monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", lnc)
    core = release_facts.core_peaks()["trn2.48xlarge"]
    for dtype in (torch.bfloat16, torch.float32):
        got = stage_throughput.peak_tflops(_ctx(NEURON, instance_type="trn2.48xlarge"), "neuron", dtype)
        assert got[0] == pytest.approx(core[str(dtype).removeprefix("torch.")] * share)
    assert stage_throughput.peak_tflops(_ctx(NEURON), "neuron", torch.float16) == (None, "")


def test_an_unknown_or_undocumented_instance_gets_the_releases_lowest_peak(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    facts = tmp_path / "facts.json"
    peaks = {"fast.x": {"bfloat16": 10.0}, "slow.x": {"bfloat16": 2.0, "float32": 1.0}}
    facts.write_text(json.dumps({"release": "r", "logical_devices": {}, "core_peak_tflops": peaks}))
    monkeypatch.setenv(release_facts.ENV, str(facts))
    release_facts.load.cache_clear()
    try:
        assert release_facts.device_peak("fast.x", "bfloat16", 2) == (
            20.0,
            "fast.x per logical device at LNC=2 (r, dense)",
        )
        unknown, source = release_facts.device_peak(None, "bfloat16", 1)
        assert unknown == 2.0 and "slow.x" in source and "instance type unknown" in source
        assert "trn3.48xlarge has none documented" in release_facts.device_peak("trn3.48xlarge", "bfloat16", 2)[1]
    finally:
        release_facts.load.cache_clear()


def test_a_cpu_run_reports_tflops_without_a_peak() -> None:
    log = StageLog()
    stage_throughput.run(_ctx(), log)
    numbers = log.numbers
    assert log.failures == []
    assert (numbers["size"], numbers["dtype"], numbers["device_name"]) == (64, CPU.throughput_dtype, "cpu")
    assert numbers["tflops"] == pytest.approx(2 * 64**3 / numbers["median_s"] / 1e12)
    assert numbers["peak_tflops"] is None and numbers["percent_of_peak"] is None and numbers["floor_percent"] is None
    assert "peak unknown" in log.summary


def test_off_neuron_a_low_percentage_is_reported_not_failed() -> None:
    log = StageLog()
    stage_throughput.run(_ctx(peak_tflops=1e9), log)
    assert log.failures == [] and log.numbers["percent_of_peak"] < 1
    assert log.numbers["peak_source"] == "--peak-tflops" and "% of 1e+09 peak" in log.summary


def test_on_neuron_throughput_under_the_floor_fails() -> None:
    host_speed = CpuNamedNeuron(**{f.name: getattr(NEURON, f.name) for f in dataclasses.fields(NEURON)})
    slow = StageLog()
    stage_throughput.run(_ctx(host_speed, peak_tflops=1e9), slow)
    assert slow.numbers["floor_percent"] == Options().throughput_floor
    assert len(slow.failures) == 1 and "under the" in slow.failures[0] and "floor" in slow.failures[0]
    fast = StageLog()
    stage_throughput.run(_ctx(host_speed, peak_tflops=1e-9), fast)  # far above any floor
    assert fast.failures == []
    unknown = StageLog()
    stage_throughput.run(_ctx(dataclasses.replace(host_speed, throughput_dtype="int8"), throughput_floor=50.0), unknown)
    assert unknown.failures == [] and unknown.numbers["peak_tflops"] is None  # no documented int8 peak: not failed


def test_inputs_that_do_not_fit_in_memory_fail_naming_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    # the allocator's error was the stage's whole message
    def refuse(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory\nmore")

    monkeypatch.setattr(torch, "randn", refuse)
    log = StageLog()
    stage_throughput.run(_ctx(), log)
    assert log.failures == [
        "the 64x64x64 matmul does not fit in memory ([enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't "
        "allocate memory); give a smaller --throughput-size"
    ]


def test_another_error_is_not_called_a_memory_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise RuntimeError("device lost")

    monkeypatch.setattr(torch, "randn", broken)
    with pytest.raises(RuntimeError, match="device lost"):
        stage_throughput.run(_ctx(), StageLog())
