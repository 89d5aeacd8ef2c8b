"""bundle.py's choices that need no test bed: Debian's version ordering and the cell's Debian architecture."""

from __future__ import annotations

from dataclasses import replace

import pytest

from neuron_torch.bundle import _stanzas, debian_arch, newest
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
