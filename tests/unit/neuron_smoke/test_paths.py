"""neuron_smoke.paths: verify-device's file arguments checked before torch (outputs writable and of the right kind,
inputs small UTF-8 text, a baseline's safetensors whole), each refusal naming the option and the fix."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from neuron_smoke import paths
from neuron_smoke.errors import UsageError


def test_an_output_file_may_be_new_but_not_a_folder_or_under_a_file(tmp_path: Path) -> None:
    paths.output_file(tmp_path / "new" / "report.json", "--report")  # its folders are made when it is written
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []  # the probe left nothing
    with pytest.raises(UsageError, match=r"--report .* is a folder; --report names the file"):
        paths.output_file(tmp_path, "--report")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(UsageError, match=r"plain is a file, so .* cannot be written there"):
        paths.output_file(tmp_path / "plain" / "report.json", "--report")


def test_an_output_folder_is_refused_where_root_cannot_write() -> None:
    with pytest.raises(UsageError, match=r"--record /proc/nt-unit-probe/x: cannot write in /proc"):
        paths.output_folder(Path("/proc/nt-unit-probe/x"), "--record")


def test_read_json_takes_the_one_reader_and_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = tmp_path / "cell.json"
    good.write_text('{"id": "x"}')
    assert paths.read_json(good, "cell file", "fix it") == {"id": "x"}
    (tmp_path / "json").write_bytes(b"{not json")
    with pytest.raises(UsageError, match=r"json: the cell file is not JSON \(.*\); fix it$"):
        paths.read_json(tmp_path / "json", "cell file", "fix it")
    monkeypatch.setattr(paths, "MAX_INPUT_BYTES", 4)
    with pytest.raises(UsageError, match=r"is 11 bytes, too large for a cell file \(at most 4 bytes\); fix it"):
        paths.read_json(good, "cell file", "fix it")


def _safetensors(path: Path, header: dict[str, object], data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_a_whole_safetensors_file_passes_and_a_truncated_one_is_named(tmp_path: Path) -> None:
    header = {"__metadata__": {"schema": "x"}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    whole = tmp_path / "whole.safetensors"
    _safetensors(whole, header, b"\x00" * 8)
    paths.check_safetensors(whole, "--baseline b")
    cut = tmp_path / "cut.safetensors"
    _safetensors(cut, header, b"\x00" * 3)
    with pytest.raises(UsageError, match=r"is truncated \(.* of .* bytes\); record the baseline again"):
        paths.check_safetensors(cut, "--baseline b")
    (tmp_path / "foreign").write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(UsageError, match="no safetensors file"):
        paths.check_safetensors(tmp_path / "foreign", "--baseline b")
    _safetensors(tmp_path / "nooffsets", {"w": {"dtype": "F32"}}, b"")
    with pytest.raises(UsageError, match="tensor 'w' has no data offsets"):
        paths.check_safetensors(tmp_path / "nooffsets", "--baseline b")


def test_a_baseline_needs_its_index_of_the_schema_and_its_tensors(tmp_path: Path) -> None:
    from neuron_smoke.evaluate import BASELINE_SCHEMA

    with pytest.raises(UsageError, match=r"no index.json there; record one with --record"):
        paths.check_baseline(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"schema": "other/9"}))
    with pytest.raises(UsageError, match=r"index.json schema 'other/9', expected"):
        paths.check_baseline(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"schema": BASELINE_SCHEMA, "format": "safetensors"}))
    with pytest.raises(UsageError, match=r"tensors\.safetensors is missing"):
        paths.check_baseline(tmp_path)
