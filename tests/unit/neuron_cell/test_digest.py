"""neuron_cell's digest (`files`, `digest`, `python -m neuron_cell`): equal for two folders exactly when they hold
the same files with the same contents, bytecode aside; `--expect` fails naming the folder, `--root` digests another
package (a bundle's copy of the smoke tests)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from neuron_cell import HOME, digest, files
from neuron_cell.__main__ import main


def copy_of_home(tmp_path: Path) -> Path:
    copy = tmp_path / "neuron_cell"
    shutil.copytree(HOME, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_a_whole_copy_has_the_digest_and_any_change_moves_it(tmp_path: Path) -> None:
    copy = copy_of_home(tmp_path)
    assert files(copy) == files(HOME) and digest(copy) == digest(HOME)
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "x.pyc").write_bytes(b"bytecode")
    assert digest(copy) == digest(HOME)  # bytecode is no part of the package
    (copy / "extra.py").write_text("")
    assert digest(copy) != digest(HOME)
    (copy / "extra.py").unlink()
    (copy / "pins.py").write_text((copy / "pins.py").read_text() + "\n")
    assert digest(copy) != digest(HOME)


def test_main_checks_the_expected_digest_of_this_folder_or_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--expect", digest(HOME)]) == 0
    copy = copy_of_home(tmp_path)
    (copy / "lockgate.py").unlink()
    assert main(["--expect", digest(HOME), "--root", str(copy)]) == 1
    assert f"{copy} has digest {digest(copy)}, not the toolkit's" in capsys.readouterr().err
    assert main(["--root", str(tmp_path / "none")]) == 2
    assert "is not a folder" in capsys.readouterr().err
