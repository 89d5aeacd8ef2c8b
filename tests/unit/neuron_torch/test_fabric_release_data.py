"""The fabric in the release data (matrix_schema's [fabric] and per-instance efa_devices, render's instance facts):
the release names efa, the test release tcp; a bad provider names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_torch.errors import MatrixError
from neuron_torch.matrix import load_matrix
from neuron_torch.render import instance_facts
from tests import REPO_ROOT

CONSTRAINTS = REPO_ROOT / "constraints"


def test_the_release_names_efa_and_the_test_release_tcp() -> None:
    release, test = load_matrix(CONSTRAINTS / "matrix.toml"), load_matrix(CONSTRAINTS / "test-matrix.toml")
    assert release.fabric.provider == "efa" and release.instances["trn2.48xlarge"].efa_devices == 16
    assert release.instances["trn3.48xlarge"].efa_devices == 0  # not documented
    facts = instance_facts(test)["fabric"]
    assert isinstance(facts, dict) and facts["provider"] == "tcp" and facts["efa_devices"] == {}


def test_a_bad_provider_names_its_key(tmp_path: Path) -> None:
    text = (CONSTRAINTS / "test-matrix.toml").read_text().replace('provider = "tcp"', 'provider = "T C P"')
    (tmp_path / "constraints").mkdir()
    path = tmp_path / "constraints" / "matrix.toml"
    path.write_text(text)
    with pytest.raises(MatrixError, match=r"fabric\.provider: 'T C P' is not a libfabric provider name"):
        load_matrix(path)


def test_a_release_without_a_fabric_names_none(tmp_path: Path) -> None:
    text = (CONSTRAINTS / "test-matrix.toml").read_text()
    start = text.index("[fabric]")
    text = text[:start] + text[text.index("[apt]") :]
    (tmp_path / "constraints").mkdir()
    path = tmp_path / "constraints" / "matrix.toml"
    path.write_text(text)
    assert load_matrix(path).fabric.provider == ""
