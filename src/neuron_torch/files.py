"""Reading the files a user names (matrix, mirror settings, manifest, lock, CA bundle) with one clear message each
when the path is missing, a folder, unreadable, not UTF-8 or empty; and writing outputs all at once."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from neuron_torch.errors import NeuronTorchError


def read_text(path: Path, what: str, fix: str) -> str:
    """The file's UTF-8 text; a usage error (exit 2) naming the path, the problem and the fix otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NeuronTorchError(f"{path}: no such {what}; {fix}") from None
    except IsADirectoryError:
        raise NeuronTorchError(f"{path}: is a folder, not a {what}; {fix}") from None
    except PermissionError:
        raise NeuronTorchError(f"{path}: cannot read the {what} (permission denied); fix its permissions") from None
    except UnicodeDecodeError as error:
        raise NeuronTorchError(
            f"{path}: the {what} is not UTF-8 text ({error.reason} at byte {error.start}); {fix}"
        ) from None
    except OSError as error:
        raise NeuronTorchError(f"{path}: cannot read the {what} ({error.strerror}); {fix}") from None
    if not text.strip():
        raise NeuronTorchError(f"{path}: the {what} is empty; {fix}")
    return text


def read_json(path: Path, what: str, fix: str) -> object:
    """The file's JSON data; a usage error naming the path and the parse error (or read_text's problem) otherwise."""
    text = read_text(path, what, fix)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise NeuronTorchError(f"{path}: the {what} is not JSON ({error}); {fix}") from None


def check_ca_bundle(path: Path) -> Path:
    """A CA bundle must be a readable PEM file holding at least one certificate."""
    fix = "pass a PEM file of CA certificates (-----BEGIN CERTIFICATE-----) with --ca-bundle or ca_bundle"
    if "-----BEGIN CERTIFICATE-----" not in read_text(path, "CA bundle", fix):
        raise NeuronTorchError(f"{path}: the CA bundle holds no PEM certificate; {fix}")
    return path


def check_new_folder(out: Path, option: str = "--out") -> None:
    """An output folder must be new or empty, and not a file (or under one)."""
    if out.exists() and not out.is_dir():
        raise NeuronTorchError(f"{option} {out} is a file; name a new folder")
    blocker = next((p for p in out.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise NeuronTorchError(f"{option} {out}: {blocker} is a file, so the folder cannot be made; name a new folder")
    if out.is_dir() and any(out.iterdir()):
        raise NeuronTorchError(f"{option} {out} is not empty; name a new folder")
    if blocker is not None and not os.access(blocker, os.W_OK):
        raise NeuronTorchError(f"{option} {out}: {blocker} is not writable; name a folder you can write")


def publish_folder(staged: Path, out: Path) -> None:
    """Move a fully written temporary sibling into place (an empty out folder is replaced)."""
    if out.is_dir():
        out.rmdir()
    staged.replace(out)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
