"""neuron_cell.boundary, the one error boundary of both commands: quoting bounds user data, clip bounds lines, an
interrupt and an unexpected error each end in one line (the latter naming a crash log that holds the traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_cell import boundary


def test_quote_keeps_at_most_the_limit_of_user_data() -> None:
    assert boundary.quote("short") == "'short'"
    long = "x" * 5000
    quoted = boundary.quote(long)
    assert quoted.startswith("'" + "x" * boundary.QUOTE_LIMIT + "'") and "(5000 characters)" in quoted
    assert len(quoted) < boundary.QUOTE_LIMIT + 40
    assert boundary.quote("a\x00b\nc") == repr("a\x00b\nc")  # control characters escaped, never printed raw


def test_clip_cuts_every_line_and_keeps_short_ones() -> None:
    message = "ok line\n" + "y" * 2000
    lines = boundary.clip(message, limit=50).splitlines()
    assert lines[0] == "ok line" and lines[1] == "y" * 50 + "... (cut)"


def test_an_interrupt_is_one_line_and_exit_130(capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise KeyboardInterrupt

    assert boundary.guard("tool", body, "the report says so") == boundary.EXIT_INTERRUPTED == 130
    err = capsys.readouterr().err
    assert err.splitlines() == ["tool: interrupted (Ctrl-C); the report says so"]


def test_an_unexpected_error_names_a_log_holding_the_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))

    def body() -> int:
        raise RuntimeError("boom\nsecond line")

    assert boundary.guard("tool", body) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "internal error: RuntimeError: 'boom'" in err and "Traceback" not in err
    logs = list((tmp_path / "tool").glob("crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in err
    assert "Traceback" in logs[0].read_text() and "RuntimeError: boom" in logs[0].read_text()


def test_a_crash_log_falls_back_to_the_temp_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the state folder would be")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    log = boundary.write_crash_log("tool", ValueError("x"))
    assert log.parent == tmp_path / "tmp" and log.name.startswith("tool-crash-")


def test_the_parser_reports_a_usage_error_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    parser = boundary.OneLineParser(prog="tool")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--n", "x"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "tool: error: argument --n: invalid int value: 'x' (see `tool --help`)"
    ]


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--cell", ""], "--cell"), (["--cell="], "--cell"), (["--out", "  "], "--out"), (["--cell", "c", ""], "dir")],
)
def test_the_parser_refuses_an_empty_value_naming_the_argument(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--cell "$UNSET"` was taken as given: an option left at its default, or '' as a Path, the current folder
    parser = boundary.OneLineParser(prog="tool")
    parser.add_argument("--cell")
    parser.add_argument("--out", type=Path)
    parser.add_argument("dir", nargs="?")
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(argv)
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tool: error: argument {named}: is empty: give a value"), line


def test_the_parser_keeps_its_defaults_and_real_values() -> None:
    parser = boundary.OneLineParser(prog="tool")
    parser.add_argument("--cell", default="d")
    parser.add_argument("--out", type=Path)
    parser.add_argument("dir", nargs="?")
    assert vars(parser.parse_args([])) == {"cell": "d", "out": None, "dir": None}
    assert vars(parser.parse_args(["--cell", "c", "--out", "o", "x"])) == {"cell": "c", "out": Path("o"), "dir": "x"}
