"""Unit tests of neuron_smoke.cells: where verify-device finds the cell (--cell-file, $NEURON_TORCH_CELL_FILE,
--cell through a stand-in `neuron-torch` on PATH, the installed file) and the pins it expects from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neuron_cell.cellrecord import PINNED
from neuron_smoke import cells
from neuron_smoke.errors import UsageError
from neuron_torch.cellinfo import cell_record
from neuron_torch.matrix import Matrix


@pytest.fixture
def record(matrix: Matrix) -> dict[str, Any]:
    return cell_record(matrix, matrix.cell(matrix.release.default_cell))


@pytest.fixture(autouse=True)
def no_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURON_TORCH_CELL_FILE", raising=False)
    monkeypatch.setenv("NEURON_SMOKE_DEFAULT_CELL_FILE", str(tmp_path / "no-installed-cell.json"))


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_no_source_means_no_cell() -> None:
    assert cells.load_cell(None, None) == (None, None)


def test_the_cell_file_option_comes_before_the_environment_and_the_installed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: dict[str, Any]
) -> None:
    named = _write(tmp_path / "named.json", record)
    other = _write(tmp_path / "env.json", {**record, "id": "from-env"})
    installed = _write(tmp_path / "installed.json", {**record, "id": "installed"})
    monkeypatch.setenv("NEURON_SMOKE_DEFAULT_CELL_FILE", str(installed))
    assert cells.load_cell(None, None) == ({**record, "id": "installed"}, str(installed))
    monkeypatch.setenv("NEURON_TORCH_CELL_FILE", str(other))
    assert cells.load_cell(None, None) == ({**record, "id": "from-env"}, str(other))
    assert cells.load_cell(str(named), None) == (record, str(named))
    assert cells.load_cell(str(named), record["id"]) == (record, str(named))


def test_a_cell_file_of_another_cell_or_schema_is_refused(tmp_path: Path, record: dict[str, Any]) -> None:
    named = _write(tmp_path / "cell.json", record)
    with pytest.raises(UsageError, match=f"--cell 9.9-py3.99-x does not match the id '{record['id']}' in {named}"):
        cells.load_cell(str(named), "9.9-py3.99-x")
    old = _write(tmp_path / "old.json", {**record, "schema": 0})
    with pytest.raises(UsageError, match="the cell record has schema 0"):
        cells.load_cell(str(old), None)
    with pytest.raises(UsageError, match="no such cell file"):
        cells.load_cell(str(tmp_path / "missing.json"), None)


def _neuron_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "neuron-torch"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_the_cell_option_asks_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: dict[str, Any]) -> None:
    _write(tmp_path / "answer.json", record)
    _neuron_torch(tmp_path, monkeypatch, f'test "$1 $3" = "cell --json" && exec /bin/cat {tmp_path / "answer.json"}\n')
    assert cells.load_cell(None, record["id"]) == (record, f"neuron-torch cell {record['id']} --json")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("echo 'no such cell' >&2; exit 2\n", "--json` failed: no such cell"),
        ("echo 'not json'\n", "--json` did not print JSON"),
        ("echo '[1]'\n", "is not a cell record"),
    ],
)
def test_a_failing_cli_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, problem: str
) -> None:
    _neuron_torch(tmp_path, monkeypatch, body)
    with pytest.raises(UsageError) as raised:
        cells.load_cell(None, "2.14-py3.14-x")
    assert problem in str(raised.value) and "neuron-torch cell 2.14-py3.14-x" in str(raised.value)


def test_without_the_cli_the_cell_option_says_to_pass_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="not on PATH to resolve it; pass --cell-file FILE"):
        cells.load_cell(None, "2.14-py3.14-x")


def test_expected_pins_are_the_named_pins_then_the_locked_versions(record: dict[str, Any]) -> None:
    assert cells.expected_pins(record) == [(dist, str(record[key])) for key, dist in PINNED.items()]
    locked = {**record, "nki": None, "locked": {"zeta.Pkg": "1.0", "alpha_pkg": "2.0"}}
    pins = cells.expected_pins(locked)
    assert not any(dist == "nki" for dist, _ in pins)  # a pin the record leaves empty is not expected
    assert pins[-2:] == [("alpha-pkg", "2.0"), ("zeta-pkg", "1.0")]
