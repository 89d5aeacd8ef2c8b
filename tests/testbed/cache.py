"""Content-keyed stamps: a stage is rebuilt only when the hash of its inputs changes.

A stage's key hashes what it is built from (the matrix data it reads, the code that builds it, the package lists);
its stamp file holds the key of the last successful build. Nothing is keyed on time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent


def key(*parts: object, code: Iterable[str] = ()) -> str:
    """A hash of the parts (their repr) and of the named builder modules' source in this package."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode())
        digest.update(b"\0")
    for module in sorted({"cache.py", *code}):
        digest.update((HERE / module).read_bytes())
    return digest.hexdigest()[:16]


class Stamps:
    """Per-stage stamp files under one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, stage: str) -> Path:
        return self.folder / f"{stage}.key"

    def fresh(self, stage: str, stage_key: str, *outputs: Path) -> bool:
        stamp = self._path(stage)
        return stamp.is_file() and stamp.read_text() == stage_key and all(p.exists() for p in outputs)

    def mark(self, stage: str, stage_key: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._path(stage).write_text(stage_key)

    def forget(self, stage: str) -> None:
        self._path(stage).unlink(missing_ok=True)
