"""The one bounded reader of the files a user names (a matrix, mirror settings, a manifest, a lock, a CA bundle, a
cell record, a node report, a baseline index): each problem is one message naming the path, what the file should
be and the fix, raised as InputError. Every command takes it from here: the CLI (neuron_torch.files), verify-device
(neuron_smoke.paths) and the cell record's loader (cellrecord.load), which runs with the cell's own Python.

A file is refused before it is read when it is no regular file (a device or a pipe never ends: /dev/zero) or larger
than `limit`; then when it is not UTF-8, holds NUL bytes (binary data that happens to decode), is empty, or, for
`read_json`, is not JSON. Standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path

# The largest input file read: a release matrix, a manifest or a lock is well under a megabyte; anything near this is
# not one (and reading it whole would only delay the message).
MAX_INPUT_BYTES = 32 * 1024 * 1024


class InputError(ValueError):
    """A file a user named cannot be read as what it should be; `str(error)` names the path, problem and fix."""


def read_text(path: Path, what: str, fix: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The file's UTF-8 text; InputError naming the path, the problem and the fix otherwise."""
    _check_readable_size(path, what, fix, limit)
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}; {fix}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a {what}; {fix}") from None
    except PermissionError:
        raise InputError(f"{path}: cannot read the {what} (permission denied); fix its permissions") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read the {what} ({error.strerror or error}); {fix}") from None
    if len(data) > limit:  # it grew after the size check
        raise InputError(f"{path}: is over {limit} bytes, too large for a {what}; {fix}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        where = f"{error.reason} at byte {error.start}"
        raise InputError(f"{path}: the {what} is not UTF-8 text ({where}); {fix}") from None
    if "\x00" in text:
        raise InputError(f"{path}: the {what} holds NUL bytes, so it is not a text file; {fix}")
    if not text.strip():
        raise InputError(f"{path}: the {what} is empty; {fix}")
    return text


def read_json(path: Path, what: str, fix: str, limit: int = MAX_INPUT_BYTES) -> object:
    """The file's JSON data; InputError naming the path and the parse error (or read_text's problem) otherwise."""
    text = read_text(path, what, fix, limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: the {what} is not JSON ({error}); {fix}") from None


def _check_readable_size(path: Path, what: str, fix: str, limit: int) -> None:
    """Refuse, before reading, what is no regular file or is too large."""
    try:
        if not path.exists() or path.is_dir():
            return  # read_text names these
        if not path.is_file():
            raise InputError(f"{path}: is not a regular file, so not a {what}; {fix}")
        size = path.stat().st_size
    except OSError as error:  # a path through a file, too long a name
        raise InputError(f"{path}: cannot read the {what} ({error.strerror or error}); {fix}") from None
    if size > limit:
        shown = f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size} bytes"
        raise InputError(f"{path}: is {shown}, too large for a {what} (at most {_size(limit)}); {fix}")


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit} bytes"
