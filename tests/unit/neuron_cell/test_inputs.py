"""neuron_cell.inputs, the one bounded reader: every way a named file can fail to be small UTF-8 text (or JSON) is
one message naming the path, what it should be and the fix; a device or an oversized file is never read."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_cell.inputs import InputError, read_json, read_text
from tests import written

FIX = "pass a release matrix"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "{path}: no such matrix file; " + FIX),
        (b"\xff\xfe", "{path}: the matrix file is not UTF-8 text (invalid start byte at byte 0); " + FIX),
        (b"a\x00b", "{path}: the matrix file holds NUL bytes, so it is not a text file; " + FIX),
        (b" \n\t", "{path}: the matrix file is empty; " + FIX),
        (b"x" * 65, "{path}: is 65 bytes, too large for a matrix file (at most 64 bytes); " + FIX),
    ],
    ids=["missing", "not-utf8", "nul", "empty", "too-large"],
)
def test_read_text_names_the_problem_the_path_and_the_fix(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = written(tmp_path / "m.toml", content)
    with pytest.raises(InputError) as raised:
        read_text(path, "matrix file", FIX, limit=64)
    assert str(raised.value) == message.format(path=path)


def test_folders_devices_and_paths_through_files_are_refused_before_reading(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r": is a folder, not a matrix file; "):
        read_text(tmp_path, "matrix file", FIX)
    with pytest.raises(InputError, match=r"/dev/zero: is not a regular file, so not a matrix file; "):
        read_text(Path("/dev/zero"), "matrix file", FIX)  # it never ends: read, it would hang
    plain = written(tmp_path / "plain", "text")
    with pytest.raises(InputError, match=r"under: cannot read the matrix file \(Not a directory\); "):
        read_text(plain / "under", "matrix file", FIX)


def test_read_json_returns_the_data_or_names_the_parse_error(tmp_path: Path) -> None:
    good = written(tmp_path / "r.json", '{"id": "x"}')
    assert read_json(good, "node report", FIX) == {"id": "x"}
    bad = written(tmp_path / "b.json", "{not json")
    with pytest.raises(InputError, match=r"b.json: the node report is not JSON \(Expecting property name"):
        read_json(bad, "node report", FIX)
    assert read_text(good, "node report", FIX) == '{"id": "x"}'
