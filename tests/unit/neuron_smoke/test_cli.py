"""Unit tests of neuron_smoke.cli's option parsing (parse_options): the --device and --stages defaults and values,
and what the other options become in Options. Error wording is left to the modules that own it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_smoke import cli, registry
from neuron_smoke.context import Options
from neuron_torch.cellinfo import cell_record
from neuron_torch.matrix import Matrix


@pytest.fixture(autouse=True)
def no_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURON_TORCH_CELL_FILE", raising=False)
    monkeypatch.delenv("NEURON_SMOKE_DEVICE", raising=False)
    monkeypatch.setenv("NEURON_SMOKE_DEFAULT_CELL_FILE", str(tmp_path / "none.json"))


def test_the_defaults_are_the_options_defaults() -> None:
    options, args = cli.parse_options([])
    assert options == Options(stages=registry.NAMES)
    assert options.device == "neuron" and options.stages == registry.NAMES
    assert (options.cell, options.cell_source) == (None, None)
    assert args.report is None and args.junit is None


def test_the_device_comes_from_the_option_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_SMOKE_DEVICE", "cpu")
    assert cli.parse_options([])[0].device == "cpu"
    for device in ("neuron", "cuda", "cpu", "auto"):
        assert cli.parse_options(["--device", device])[0].device == device


def test_an_unknown_device_is_an_argparse_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli.parse_options(["--device", "tpu"])
    assert raised.value.code == 2 and "tpu" in capsys.readouterr().err


def test_stages_are_kept_in_the_order_they_run() -> None:
    first, *_, last = registry.NAMES
    options, _ = cli.parse_options(["--stages", f" {last}, ,{first} "])
    assert options.stages == (first, last)
    assert cli.parse_options(["--stages", ",".join(reversed(registry.NAMES))])[0].stages == registry.NAMES


def test_a_selected_stage_brings_the_stages_it_runs_after() -> None:
    # `--stages matmul` alone used to skip matmul ("stage environment was skipped") and exit 0 with nothing run
    options, args = cli.parse_options(["--stages", "matmul"])
    assert options.stages == ("environment", "device", "matmul")
    assert args.stages_added == ["environment", "device"]
    assert cli.parse_options(["--stages", "device"])[1].stages_added == []


def test_values_reach_the_options(tmp_path: Path, matrix: Matrix) -> None:
    record = cell_record(matrix, matrix.cells[0])
    cell_file = tmp_path / "cell.json"
    cell_file.write_text(json.dumps(record))
    options, args = cli.parse_options(
        [
            *("--cell-file", str(cell_file), "--allow-fallback", "aten::add, mul,"),
            *("--timeout", "1.5", "--iterations", "4", "--warmup", "0", "--expected-devices", "8"),
            *("--nproc", "3", "--launcher", "torchrun", "--throughput-floor", "0", "--strict-fp32"),
            *("--model", "pkg.mod:factory", "--report", str(tmp_path / "r.json")),
        ]
    )
    assert (options.cell, options.cell_source) == (record, str(cell_file))
    assert options.allow_fallback == frozenset({"aten::add", "mul"})
    assert (options.timeout_s, options.iterations, options.warmup, options.expected_devices) == (1.5, 4, 0, 8)
    assert (options.nproc, options.launcher, options.throughput_floor, options.strict_fp32) == (3, "torchrun", 0, True)
    assert options.model == "pkg.mod:factory" and args.report == tmp_path / "r.json"


@pytest.mark.parametrize("option", ["--timeout", "--iterations", "--expected-devices", "--model-rtol"])
def test_counts_and_bounds_must_be_positive(option: str) -> None:
    with pytest.raises(SystemExit):
        cli.parse_options([option, "0"])
