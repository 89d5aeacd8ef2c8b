"""bundle.py's choices that need no test bed: Debian's version ordering and the cell's Debian architecture."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from neuron_torch.bundle import INSTALL_SH, _stanzas, debian_arch, newest
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Matrix

PACKAGES = """Package: aws-neuronx-runtime-lib
Version: 2.35.30.0-9
Filename: pool/main/a/aws-neuronx-runtime-lib_2.35.30.0-9_amd64.deb

Package: aws-neuronx-runtime-lib
Version: 2.35.30.0-10
Filename: pool/main/a/aws-neuronx-runtime-lib_2.35.30.0-10_amd64.deb

Package: aws-neuronx-runtime-lib
Version: 2.35.30.0-10~rc1
Filename: pool/main/a/aws-neuronx-runtime-lib_2.35.30.0-10~rc1_amd64.deb
"""


def test_debian_ordering_picks_10_over_9() -> None:
    stanzas = _stanzas(PACKAGES)
    assert sorted(s["Version"] for s in stanzas)[-1] == "2.35.30.0-9", "a string sort would pick -9"
    assert newest(stanzas)["Version"] == "2.35.30.0-10"  # and ~rc1 sorts before the release


def test_the_index_architecture_comes_from_the_cell(matrix: Matrix) -> None:
    cell = matrix.cells[0]
    assert cell.os.lock_platform.startswith("x86_64-")
    assert debian_arch(cell) == "amd64"
    arm = replace(cell, os=replace(cell.os, lock_platform="aarch64-manylinux_2_39"))
    assert debian_arch(arm) == "arm64"
    odd = replace(cell, os=replace(cell.os, lock_platform="riscv64-manylinux_2_39"))
    with pytest.raises(NeuronTorchError, match=r"riscv64.*no Debian architecture.*lock_platform"):
        debian_arch(odd)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--venv",), 2, "install.sh: --venv needs a directory (usage: install.sh [--venv DIR]"),  # was sh's own error
        (("--prefix", ""), 2, "install.sh: --prefix needs a directory"),
        (("--bogus",), 2, "install.sh: unknown option --bogus (usage: install.sh"),
        (("--help",), 0, "usage: install.sh [--venv DIR] [--prefix DIR] [--no-apt] [--no-pip]"),
    ],
)
def test_install_sh_reads_its_options_before_it_touches_the_bundle(
    args: tuple[str, ...], code: int, message: str, tmp_path: Path
) -> None:
    script = tmp_path / "install.sh"  # a bundle of nothing: the options are refused before SHA256SUMS is read
    shutil.copyfile(INSTALL_SH, script)
    result = subprocess.run(["sh", str(script), *args], capture_output=True, text=True, check=False)
    assert result.returncode == code and message in (result.stderr if code else result.stdout)
    assert "parameter not set" not in result.stderr and "SHA256SUMS" not in result.stderr
