"""neuron_cell.outputs, the one check of output paths both commands run before any work: a folder where a file is
meant (and the reverse), a path under a file, a folder root cannot write in; the probe leaves nothing behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from neuron_cell import outputs


def test_a_new_file_in_a_new_folder_passes_and_leaves_nothing(tmp_path: Path) -> None:
    outputs.output_file(tmp_path / "a" / "b" / "report.json", "--report")
    outputs.output_folder(tmp_path / "new-folder", "--record")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_given_for_a_file_is_named_with_an_example(tmp_path: Path) -> None:
    with pytest.raises(outputs.OutputError, match=r"--report .* is a folder; --report names the file to write, e\.g\."):
        outputs.output_file(tmp_path, "--report", "report.json")
    with pytest.raises(outputs.OutputError, match=r"names the file to write$"):
        outputs.output_file(tmp_path, "--out")


def test_a_file_given_for_a_folder_or_in_the_way_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    with pytest.raises(outputs.OutputError, match="is a file; --record names a folder"):
        outputs.output_folder(plain, "--record")
    with pytest.raises(outputs.OutputError, match="plain is a file, so the folder cannot be made there"):
        outputs.output_folder(plain / "sub", "--record")
    with pytest.raises(outputs.OutputError, match=r"plain is a file, so .*report\.json cannot be written there"):
        outputs.output_file(plain / "report.json", "--report")


def test_a_folder_root_cannot_write_in_is_refused_by_the_probe() -> None:
    assert outputs.nearest_existing(Path("/proc/nt-outputs-probe/x")) == Path("/proc")
    with pytest.raises(outputs.OutputError, match=r"cannot write in /proc \(.*\); name a folder you can write"):
        outputs.output_file(Path("/proc/nt-outputs-probe/x"), "--report")


def test_a_path_that_is_no_file_is_refused_before_any_work(tmp_path: Path) -> None:
    # `verify-device --report /dev/stdout` as root replaced the /dev/stdout link with a regular file
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to(fifo)
    for path, kind in ((fifo, "a pipe"), (tmp_path / "link", "a pipe"), (Path("/dev/null"), "a character device")):
        with pytest.raises(outputs.OutputError, match=f"--report {path} is {kind}, not a file: it is written whole"):
            outputs.output_file(path, "--report", "report.json")
    with pytest.raises(outputs.OutputError, match=r"--report -: names a file, not standard output; .* report\.json$"):
        outputs.output_file(Path("-"), "--report", "report.json")


def test_write_whole_writes_a_new_file_and_leaves_no_staged_sibling(tmp_path: Path) -> None:
    target = tmp_path / "new" / "report.json"
    outputs.write_whole(target, b"one")
    outputs.write_whole(target, b"two")
    assert target.read_bytes() == b"two" and sorted(p.name for p in target.parent.iterdir()) == ["report.json"]


def test_write_whole_follows_a_link_and_refuses_a_device(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(real)
    outputs.write_whole(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"  # the link's file replaced, not the link
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "stdout").symlink_to(fifo)
    with pytest.raises(outputs.OutputError, match="stdout is a pipe, not a file: not replaced"):
        outputs.write_whole(tmp_path / "stdout", b"x")
    assert (tmp_path / "stdout").is_symlink() and stat.S_ISFIFO(fifo.stat().st_mode)
    assert not list(tmp_path.glob(".*.tmp"))
