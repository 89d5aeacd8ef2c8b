"""neuron_cell.cellrecord, the one checked loader: a record is a JSON object with an id and the schema version of
cell.schema.json (refused otherwise, naming the source, the version found and the one read), complete when asked;
load() refuses a missing, oversized, non-UTF-8 or non-JSON file with one RecordError naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neuron_cell import cellrecord
from neuron_cell.cellrecord import PINNED, RecordError, check, load, problem, schema, schema_version
from tests import written


@pytest.fixture
def record() -> dict[str, Any]:
    """A complete record: every key the schema requires (values are not the loader's concern)."""
    data: dict[str, Any] = {key: "x" for key in schema()["required"]}
    return {**data, "schema": schema_version(), "id": "2.14-py3.14-ubuntu26.04"}


def test_the_schema_file_defines_the_version_and_the_pins() -> None:
    loaded = json.loads(cellrecord.SCHEMA_FILE.read_text(encoding="utf-8"))
    assert schema_version() == loaded["properties"]["schema"]["const"]
    assert set(PINNED) <= set(loaded["properties"])  # every pinned key is a field of the record


def test_a_current_record_passes(record: dict[str, Any]) -> None:
    assert problem(record, "cell.json", complete=True) is None
    assert check(record, "cell.json", complete=True) is record
    minimal = {"schema": schema_version(), "id": "c"}  # the targets' readers need only the schema and the id
    assert check(minimal, "cell.json") is minimal


@pytest.mark.parametrize("data", [[], "cell", None, {"schema": 1}])
def test_not_a_record(data: object) -> None:
    assert problem(data, "cell.json") == "cell.json is not a cell record (expected a JSON object with an 'id')"


def test_another_schema_version_is_refused_naming_both(record: dict[str, Any]) -> None:
    newer = {**record, "schema": schema_version() + 1}
    found = problem(newer, "/etc/neuron-torch/cell.json")
    assert found is not None
    assert found.startswith(
        f"/etc/neuron-torch/cell.json: the cell record has schema {schema_version() + 1}; this checkout reads cell "
        f"record schema {schema_version()} only"
    )
    old = {k: v for k, v in record.items() if k != "schema"}
    assert "no 'schema' field (written before schema 1)" in (problem(old, "old.json") or "")
    assert "schema '1'" in (problem({**record, "schema": "1"}, "s.json") or "")  # a string is not the version
    with pytest.raises(RecordError, match="the cell record has schema"):
        check(newer, "x")


def test_complete_wants_every_required_key(record: dict[str, Any]) -> None:
    required = schema()["required"]
    missing = [key for key in required if key not in ("schema", "id")][:2]
    partial = {k: v for k, v in record.items() if k not in missing}
    assert problem(partial, "c.json") is None
    assert problem(partial, "c.json", complete=True) == (
        f"c.json: a cell record of schema {schema_version()} without {', '.join(missing)}: write it again"
    )


def test_an_unreadable_schema_is_named(record: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schema.cache_clear()
    monkeypatch.setattr(cellrecord, "SCHEMA_FILE", tmp_path / "cell.schema.json")
    try:
        found = problem(record, "c.json")
    finally:
        schema.cache_clear()
    assert found is not None and found.startswith(f"cannot read the cell record schema {tmp_path / 'cell.schema.json'}")
    assert found.endswith("copy neuron_cell whole from a checkout")


def test_load_reads_and_checks(record: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(record))
    assert load(path, complete=True) == record
    path.write_text(json.dumps({**record, "schema": 0}))
    for source, named in ((None, f"cell file {path}"), ("installed record", "installed record")):
        with pytest.raises(RecordError) as raised:
            load(path, source)
        assert str(raised.value).startswith(f"{named}: the cell record has schema 0;")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "{path}: no such cell file; pass a cell record"),
        (b"\xff{}", "{path}: the cell file is not UTF-8 text (invalid start byte at byte 0); pass a cell record"),
        (b'{"id": ', "{path}: the cell file is not JSON (Expecting value"),
        (b" " * (cellrecord._MAX_BYTES + 1), "{path}: is 1 MB, too large for a cell file (at most 1 MiB); pass"),
    ],
    ids=["missing", "not-utf8", "not-json", "too-large"],
)
def test_load_refuses_what_is_not_a_record_file(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = written(tmp_path / "cell.json", content)
    with pytest.raises(RecordError) as raised:
        load(path)
    assert str(raised.value).startswith(message.format(path=path))
