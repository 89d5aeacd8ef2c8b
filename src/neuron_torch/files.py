"""Reading the files a user names (matrix, mirror settings, manifest, lock, CA bundle) with one clear message each
when the path is missing, a folder, unreadable, not UTF-8 or empty; and writing outputs all at once."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from neuron_cell import inputs, outputs
from neuron_cell.boundary import quote
from neuron_torch.errors import NeuronTorchError


def read_text(path: Path, what: str, fix: str) -> str:
    """The file's UTF-8 text (neuron_cell.inputs, the one reader); a usage error (exit 2) naming the path, the
    problem and the fix otherwise."""
    try:
        return inputs.read_text(path, what, fix)
    except inputs.InputError as error:
        raise NeuronTorchError(str(error)) from None


def read_json(path: Path, what: str, fix: str) -> object:
    """The file's JSON data (neuron_cell.inputs); a usage error naming the path and the problem otherwise."""
    try:
        return inputs.read_json(path, what, fix)
    except inputs.InputError as error:
        raise NeuronTorchError(str(error)) from None


def tool_env(work: Path, keep: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a pip or uv that a command runs: no user or system pip/uv configuration, so that only the
    matrix decides the sources (KEEP names the variables that still pass), and a temp folder inside WORK, so that
    what the tool leaves when it is stopped (Ctrl-C kills it mid-download) goes with WORK."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_")) or k in keep}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    temp = work / "tmp"
    temp.mkdir(exist_ok=True)
    env["TMPDIR"] = str(temp)
    return env


def check_ca_bundle(path: Path) -> Path:
    """A CA bundle must be a readable PEM file holding at least one certificate."""
    fix = "pass a PEM file of CA certificates (-----BEGIN CERTIFICATE-----) with --ca-bundle or ca_bundle"
    if "-----BEGIN CERTIFICATE-----" not in read_text(path, "CA bundle", fix):
        raise NeuronTorchError(f"{path}: the CA bundle holds no PEM certificate; {fix}")
    return path


def check_new_folder(out: Path, option: str = "--out") -> None:
    """An output folder must be new or empty, and not a file (or under one). It is made elsewhere and renamed into
    place, so it must not be a link (the link would be replaced) nor the current folder (it cannot be)."""
    if out.is_symlink():
        raise NeuronTorchError(f"{option} {out} is a link; name the folder itself ({out.resolve()}) or a new one")
    if out.exists() and not out.is_dir():
        raise NeuronTorchError(f"{option} {out} is a file; name a new folder")
    if outputs.is_current_folder(out):
        raise NeuronTorchError(f"{option} {out} is the current folder; name a new folder, e.g. {option} nt-bundle")
    blocker = next((p for p in out.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise NeuronTorchError(f"{option} {out}: {blocker} is a file, so the folder cannot be made; name a new folder")
    if out.is_dir() and any(out.iterdir()):
        raise NeuronTorchError(f"{option} {out} is not empty; name a new folder")
    if blocker is not None:
        check_can_create_in(blocker, option, out)


def _output(check: Callable[[], None]) -> None:
    try:
        check()
    except outputs.OutputError as error:
        raise NeuronTorchError(str(error)) from None


def check_output_file(path: Path, option: str, example: str = "") -> None:
    """An output file, checked before any work by neuron_cell.outputs (nothing is left behind); `example` names a
    file for the hint when a folder is given."""
    _output(lambda: outputs.output_file(path, option, example))


def check_can_create_in(folder: Path, option: str, target: Path) -> None:
    """A new file can be made in `folder` (neuron_cell.outputs' probe)."""
    _output(lambda: outputs.can_create_in(folder, option, target))


def is_staged(path: Path) -> bool:
    """A sibling replace_text is writing now, perhaps another process's: not yet a file of its folder, and not one to
    remove as left over (seen in CI: a test worker rendering the test release removed another's as an orphan)."""
    return path.name.startswith(".") and path.name.endswith(outputs.STAGED_SUFFIX)


def replace_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all (neuron_cell.outputs.write_whole). The staged sibling is this process's own,
    so that processes writing the same file at once (test workers rendering the test release) never take each
    other's."""
    _output(lambda: outputs.write_whole(path, text.encode("utf-8")))


def find_program(name: str) -> str | None:
    """`name` looked up as a shell would (a path with a slash as it is, else on PATH), as an absolute path: the
    commands run programs from other folders (Packer from the checkout, the resolvers from a work folder), where
    `./packer` or a relative PATH entry would name another file or none."""
    found = shutil.which(name)
    return os.path.abspath(found) if found else None


def check_executable(value: str, variable: str) -> str:
    """A program named by an environment variable must be an executable file (a name is looked up on PATH); its
    absolute path."""
    found = find_program(value)
    if found is None:
        raise NeuronTorchError(
            f"${variable}={quote(value)}: no such executable (not a file with execute permission, nor a program on "
            f"PATH); point ${variable} at the program, or unset it"
        )
    return found


def publish_folder(staged: Path, out: Path) -> None:
    """Move a fully written temporary sibling into place (an empty out folder is replaced)."""
    if out.is_dir():
        out.rmdir()
    staged.replace(out)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
