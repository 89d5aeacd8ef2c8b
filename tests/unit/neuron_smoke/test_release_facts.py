"""neuron_smoke.release_facts: the packaged rendering of the release, or the one NEURON_SMOKE_INSTANCE_FACTS names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_smoke import release_facts
from neuron_smoke.errors import UsageError
from neuron_torch.matrix import load_matrix
from tests import REPO_ROOT, written


def test_the_packaged_release_names_efa_and_the_documented_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(release_facts.ENV, raising=False)
    fabric = release_facts.fabric()
    assert fabric["provider"] == "efa" and fabric["efa_devices"] == {"trn2.48xlarge": 16}
    assert release_facts.logical_devices()["trn2.48xlarge"] == 64


def test_another_release_by_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"logical_devices": {}, "fabric": {"provider": "tcp"}}))
    monkeypatch.setenv(release_facts.ENV, str(path))
    release_facts.check()
    assert release_facts.fabric()["provider"] == "tcp" and release_facts.fabric()["source"] == str(path)


def test_a_release_without_a_fabric_names_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"logical_devices": {"x": 1}}))
    monkeypatch.setenv(release_facts.ENV, str(path))
    assert release_facts.fabric()["provider"] == ""


@pytest.mark.parametrize("content", [None, "not json", "[]", '{"fabric": {}}'])
def test_a_bad_facts_file_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str | None
) -> None:
    path = written(tmp_path / "facts.json", content)
    monkeypatch.setenv(release_facts.ENV, str(path))
    with pytest.raises(UsageError, match="NEURON_SMOKE_INSTANCE_FACTS="):
        release_facts.check()


def test_the_packaged_release_supports_what_the_matrix_supports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(release_facts.ENV, raising=False)
    table = release_facts.instance_table()
    assert table == load_matrix(REPO_ROOT / "constraints" / "matrix.toml").instance_table()
    assert "trn1" in table.unsupported and "trn2.48xlarge" in table.known


def test_facts_without_a_support_table_are_a_usage_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"logical_devices": {}}))
    monkeypatch.setenv(release_facts.ENV, str(path))
    with pytest.raises(UsageError, match=r"no support table.*neuron-torch render"):
        release_facts.instance_table()
