"""Output paths checked before any work, the one implementation both commands use: a file is not given where a folder
is meant (nor the reverse), nothing blocks the path, and its folder (or the nearest one that exists, made when
writing) accepts a new file. Writability is tested by creating and removing a probe file, the one test that holds for
root too (a read-only mount, /sys and /proc refuse root; permission bits do not). Nothing is left behind. A file
path must not name a device, pipe or socket (write_whole, the one writer of both commands' output files, replaces the
file whole, which would put a regular file where /dev/stdout was).

Standard library only; each command maps OutputError to its own usage error.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

STAGED_SUFFIX = ".tmp"  # write_whole's sibling: .NAME.PID.tmp


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
    if str(path) == "-":
        named = f", e.g. {example}" if example else ""
        raise OutputError(f"{option} -: names a file, not standard output; name the file to write{named}")
    kind = _special(path)
    if kind:
        raise OutputError(
            f"{option} {path} is {kind}, not a file: it is written whole, as a new file that replaces the old; name "
            "a file to write"
        )
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


def is_current_folder(path: Path) -> bool:
    """Whether `path` is the current folder: a folder made beside it and renamed into place cannot replace that one
    (nor should it, under a user's shell)."""
    return path.exists() and path.resolve() == Path.cwd().resolve()


def _special(path: Path) -> str:
    """What an existing path (its link followed) is when it is neither a regular file nor a folder: "" otherwise."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return ""  # missing (or a dangling link, whose target is made)
    kinds = {stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device", stat.S_ISFIFO: "a pipe",
             stat.S_ISSOCK: "a socket"}  # fmt: skip
    return next((name for test, name in kinds.items() if test(mode)), "")


def write_whole(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: a staged sibling of this process (.NAME.PID.tmp) replaces it, and is gone
    whatever happens; it is made with the user's umask (a mkstemp file would be 0600). A link is followed (its file is
    replaced, not the link); a path that is not a regular file (/dev/stdout, /dev/null) is refused: replacing it would
    put a file where the device was."""
    target = path.resolve() if path.is_symlink() else path
    kind = _special(target)
    if kind:
        raise OutputError(f"{path} is {kind}, not a file: not replaced")
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.{os.getpid()}{STAGED_SUFFIX}")
    try:
        staged.write_bytes(data)
        staged.replace(target)
    finally:
        staged.unlink(missing_ok=True)
