"""The manifest reader against a small manifest written in AWS's n2-manifest.json format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_torch.cli import main
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT

# A manifest of the release the matrix pins (AWS's n2-manifest.json shape), built from the matrix so that a release
# bump edits no test: every pin the same but the last apt package's, which the manifest holds at another version.
RELEASE = load_matrix(REPO_ROOT / "constraints" / "matrix.toml")
VERSION = RELEASE.release.version
INSTANCES = list(RELEASE.instance_families)
DIFFERING = RELEASE.apt.packages[-1]
OTHER_VERSION = f"{DIFFERING.version}.1"


def _package(name: str, version: str, pythons: tuple[str, ...] = ()) -> dict[str, object]:
    return {"name": name, "version": version, "supported_instances": INSTANCES, "supported_python_versions": pythons}


MANIFEST = {
    "manifest_date": "10/19/2026",
    "manifest_version": VERSION,
    "repos_n2": [{"repo_type": "whl", "repo_url": "https://pip.repos.neuron.amazonaws.com/"}],
    "neuron_releases": [
        {
            "neuron_version": VERSION,
            "packages": [
                *(_package("torch-neuronx", f.torch_neuronx.replace("*", "1871"), RELEASE.pythons)
                  for f in RELEASE.families.values()),
                *(_package(name, version, RELEASE.pythons) for name, version in RELEASE.packages.items()),
                *(_package(p.name, OTHER_VERSION if p is DIFFERING else p.version) for p in RELEASE.apt.packages),
            ],
        }
    ],
}  # fmt: skip


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "n2-manifest.json"
    path.write_text(json.dumps(MANIFEST))
    return path


def test_matching_release_reports_only_real_differences(
    capsys: pytest.CaptureFixture[str], manifest: Path, matrix: Matrix
) -> None:
    assert main(["manifest", str(manifest)]) == 0
    out = capsys.readouterr().out
    family = list(RELEASE.families.values())[-1]
    assert f"same     torch-neuronx {family.torch_neuronx} (family {family.name})" in out
    assert f"{VERSION} holds {family.torch_neuronx.replace('*', '1871')}" in out
    assert f"differs  {DIFFERING.name} {DIFFERING.version}" in out and f"pins {OTHER_VERSION}" in out
    pins = len(RELEASE.families) + len(RELEASE.packages) + len(RELEASE.apt.packages)
    assert f"1 of {pins} pins differ" in out
    assert main(["manifest", str(manifest), "--strict"]) == 1


def test_unknown_release_lists_what_the_manifest_holds(capsys: pytest.CaptureFixture[str], manifest: Path) -> None:
    assert main(["manifest", str(manifest), "--release", "2.99.0"]) == 2
    assert f"release '2.99.0' is not in the manifest; it holds {VERSION}" in capsys.readouterr().err


def test_not_a_manifest(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"hello": 1}')
    assert main(["manifest", str(path)]) == 2
    assert "not a Neuron release manifest" in capsys.readouterr().err
