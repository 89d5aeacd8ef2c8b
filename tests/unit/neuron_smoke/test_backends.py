"""Unit tests of neuron_smoke.backends: device-file discovery (NEURON_SMOKE_DEV_GLOB into tmp_path), `auto`
resolution, the peak tables, and the instance counts rendered from the matrix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from neuron_smoke import backends
from neuron_smoke.backends import BACKENDS, CPU, CUDA, NEURON
from neuron_torch.matrix import Matrix


def _nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: list[str]) -> None:
    for name in names:
        (tmp_path / name).touch()
    monkeypatch.setenv("NEURON_SMOKE_DEV_GLOB", str(tmp_path / "neuron*"))


def test_device_nodes_come_from_the_glob_sorted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _nodes(tmp_path, monkeypatch, ["neuron1", "neuron0", "other"])
    assert NEURON.device_nodes() == [str(tmp_path / "neuron0"), str(tmp_path / "neuron1")]
    monkeypatch.setenv("NEURON_SMOKE_DEV_GLOB", str(tmp_path / "none*"))
    assert NEURON.device_nodes() == []
    assert CPU.device_nodes() is None  # nothing to look for


def test_auto_prefers_neuron_device_files_then_cuda_then_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, backend in BACKENDS.items():
        assert backends.resolve(name) is backend
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _nodes(tmp_path, monkeypatch, ["neuron0"])
    assert backends.resolve("auto") is NEURON
    monkeypatch.setenv("NEURON_SMOKE_DEV_GLOB", str(tmp_path / "none*"))
    assert backends.resolve("auto") is CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backends.resolve("auto") is CPU


def test_peak_for_takes_the_longest_matching_name_case_insensitively() -> None:
    table = CUDA.peak_tflops
    assert CUDA.peak_for("nvidia h100 pcie", torch.bfloat16) == table["H100 PCIe"]["bfloat16"]
    assert CUDA.peak_for("NVIDIA H100 80GB HBM3", torch.float32) == table["H100"]["float32"]
    assert CUDA.peak_for("NVIDIA L40S", torch.bfloat16) == table["L40S"]["bfloat16"]  # not L4's
    assert CUDA.peak_for("NVIDIA H200", torch.float16) is None  # no figure for the dtype
    assert CUDA.peak_for("Tesla V100", torch.float32) is None


def test_neuron_instance_counts_are_the_matrix_documented_ones(matrix: Matrix) -> None:
    documented = {i.type: i.expected_devices for i in matrix.instances.values() if i.expected_devices}
    assert NEURON.devices_per_instance == documented


def test_the_cpu_backend_needs_no_device() -> None:
    assert (CPU.device_type, CPU.device_count(), CPU.import_module()) == ("cpu", 1, None)
    CPU.synchronize()  # a no-op on the CPU
    assert NEURON.import_module is not None and NEURON.module == "torch_neuronx" and NEURON.tracks_fallback
    assert backends.have_tool("sh") is not None and backends.have_tool("no-such-tool-here") is None
