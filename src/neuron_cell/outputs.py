"""Output paths checked before any work, the one implementation both commands use: a file is not given where a folder
is meant (nor the reverse), nothing blocks the path, and its folder (or the nearest one that exists, made when
writing) accepts a new file. Writability is tested by creating and removing a probe file, the one test that holds for
root too (a read-only mount, /sys and /proc refuse root; permission bits do not). Nothing is left behind.

Standard library only; each command maps OutputError to its own usage error.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class OutputError(ValueError):
    """An output path that cannot be written, with the reason and the fix."""


def nearest_existing(path: Path) -> Path:
    """The closest folder above `path` that exists (the current folder for a relative path with none)."""
    return next((p for p in path.parents if p.exists()), Path("."))


def can_create_in(folder: Path, option: str, target: Path) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".neuron-torch-probe-", dir=folder)
    except OSError as error:
        raise OutputError(
            f"{option} {target}: cannot write in {folder} ({error.strerror}); name a folder you can write"
        ) from None
    os.close(fd)
    os.unlink(probe)


def output_file(path: Path, option: str, example: str = "") -> None:
    """A file to write (its missing folders are made when it is written); `example` names a file for the hint."""
    if path.is_dir():
        hint = f", e.g. {path / example}" if example else ""
        raise OutputError(f"{option} {path} is a folder; {option} names the file to write{hint}")
    blocker = nearest_existing(path)
    if not blocker.is_dir():
        raise OutputError(f"{option} {path}: {blocker} is a file, so {path} cannot be written there")
    can_create_in(blocker, option, path)


def output_folder(path: Path, option: str) -> None:
    """A folder to write into (made when missing)."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path} is a file; {option} names a folder")
    blocker = path if path.is_dir() else nearest_existing(path)
    if not blocker.is_dir():
        raise OutputError(f"{option} {path}: {blocker} is a file, so the folder cannot be made there")
    can_create_in(blocker, option, path)
