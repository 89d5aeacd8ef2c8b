"""The manifest reader against a small manifest written in AWS's n2-manifest.json format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_torch.cli import main
from neuron_torch.matrix import Matrix

MANIFEST = {
    "manifest_date": "10/19/2026",
    "manifest_version": "2.33.0",
    "repos_n2": [{"repo_type": "whl", "repo_url": "https://pip.repos.neuron.amazonaws.com/"}],
    "neuron_releases": [
        {
            "neuron_version": "2.33.0",
            "packages": [
                {"name": "torch-neuronx", "version": "2.13.3.0.1871", "supported_instances": ["trn2", "trn3"],
                 "supported_python_versions": ["3.12", "3.13", "3.14"]},
                {"name": "torch-neuronx", "version": "2.14.3.0.1871", "supported_instances": ["trn2", "trn3"],
                 "supported_python_versions": ["3.12", "3.13", "3.14"]},
                {"name": "neuronx-cc", "version": "2.28.7631.0", "supported_instances": ["trn2", "trn3"],
                 "supported_python_versions": ["3.12", "3.13", "3.14"]},
                {"name": "nki", "version": "0.7.0", "supported_instances": ["trn2", "trn3"],
                 "supported_python_versions": ["3.12", "3.13", "3.14"]},
                {"name": "aws-neuronx-dkms", "version": "2.31.7.0", "supported_instances": ["trn2", "trn3"],
                 "supported_python_versions": []},
                {"name": "aws-neuronx-runtime-lib", "version": "2.35.30.0", "supported_instances": ["trn2"],
                 "supported_python_versions": []},
                {"name": "aws-neuronx-collectives", "version": "2.35.43.0", "supported_instances": ["trn2"],
                 "supported_python_versions": []},
                {"name": "aws-neuronx-tools", "version": "2.33.37.0", "supported_instances": ["trn2"],
                 "supported_python_versions": []},
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
    assert "same     torch-neuronx 2.14.3.0.* (family 2.14)" in out
    assert "2.33.0 holds 2.14.3.0.1871" in out
    assert "differs  aws-neuronx-tools 2.33.38.0" in out and "pins 2.33.37.0" in out
    assert "1 of 8 pins differ" in out
    assert main(["manifest", str(manifest), "--strict"]) == 1


def test_unknown_release_lists_what_the_manifest_holds(capsys: pytest.CaptureFixture[str], manifest: Path) -> None:
    assert main(["manifest", str(manifest), "--release", "2.99.0"]) == 2
    assert "release '2.99.0' is not in the manifest; it holds 2.33.0" in capsys.readouterr().err


def test_not_a_manifest(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"hello": 1}')
    assert main(["manifest", str(path)]) == 2
    assert "not a Neuron release manifest" in capsys.readouterr().err
