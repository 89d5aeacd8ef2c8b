"""`neuron-torch bundle`: an offline bundle of a test cell holds what its lock and the apt pins name; tampering is
refused. Its `install.sh` with the network off is test_quickstart.py's (the README's path D, as written, on the
Ubuntu 26.04 twin with the AMI's traits), so the debian12 bundle is not installed a second time here."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_torch.bundle import make_bundle, pip_platforms
from neuron_torch.cli import main
from neuron_torch.errors import NeuronTorchError
from neuron_torch.mirror import apply_mirror, load_mirror
from tests import REPO_ROOT
from tests.testbed.harness import CELL, TEST_MATRIX, built_testbed
from tests.testbed.traits import labelled
from tests.testbed.wheels import FixtureWheel, build_wheel

BUNDLE = REPO_ROOT / ".testbed" / "bundles" / CELL


@functools.cache
def bundle() -> Path:
    """The debian12 cell's bundle, made through the CLI with the test bed's mirror settings (once per session)."""
    bed = built_testbed()
    shutil.rmtree(BUNDLE, ignore_errors=True)
    argv = [
        "--matrix",
        str(TEST_MATRIX),
        "bundle",
        "--cell",
        CELL,
        "--out",
        str(BUNDLE),
        "--mirror",
        str(bed.mirror_file),
    ]
    assert main(argv) == 0
    return BUNDLE


def test_pip_platforms_cover_older_manylinux() -> None:
    tags = pip_platforms("x86_64-manylinux_2_36")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_28_x86_64" in tags and "manylinux2014_x86_64" in tags


def test_bundle_holds_the_lock_the_debs_and_their_sums() -> None:
    out = bundle()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cell"] == CELL
    assert {p["name"] for p in manifest["apt"]["packages"]} == {
        "aws-neuronx-runtime-lib", "aws-neuronx-collectives", "aws-neuronx-tools",
    }  # fmt: skip
    assert manifest["apt"]["key_fingerprint"] == built_testbed().fingerprint
    wheels = {w["name"]: w["version"] for w in manifest["wheels"]}
    assert wheels["torch"] == "2.13.0+cpu" and wheels["torch-neuronx"] == "2.13.3.0.1871"
    check = subprocess.run(["sha256sum", "--quiet", "--strict", "-c", "SHA256SUMS"], cwd=out)
    assert check.returncode == 0
    assert not list(out.rglob("*.pem")) and not list(out.rglob("ca*"))


def test_a_wheel_whose_hash_differs_from_the_lock_is_refused(tmp_path: Path) -> None:
    out = bundle()
    wheels = tmp_path / "wheels"
    nki = labelled("nki", "0.7.0")
    tampered = build_wheel(FixtureWheel("nki", nki, module_source="TAMPERED = True\n"), wheels)
    assert tampered.name in {p.name for p in (out / "wheels").iterdir()}
    locked = [line for line in (out / "lock.txt").read_text().splitlines()]
    start = locked.index(f"nki=={nki} \\")
    requirement = tmp_path / "req.txt"
    requirement.write_text("\n".join(locked[start : start + 2]).rstrip("\\") + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), "--require-hashes",
         "--no-deps", "--target", str(tmp_path / "target"), "-r", str(requirement)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "DO NOT MATCH THE HASHES" in result.stderr


def test_a_key_with_another_fingerprint_is_refused(tmp_path: Path) -> None:
    bed = built_testbed()
    settings = tmp_path / "mirror.toml"
    settings.write_text(bed.mirror_file.read_text().replace(bed.fingerprint, "0" * 40))
    matrix = apply_mirror(bed.matrix, load_mirror(settings))
    with pytest.raises(NeuronTorchError, match="not the pinned 0000"):
        make_bundle(matrix, matrix.cell(CELL), tmp_path / "bundle")
