"""The bill of materials of the test cell's image (test_image's fixture, so this file is in its lane): written by the
image build (neuron_cell.sbom) into /etc/neuron-torch/bom, labelled with the digest of its SHA256SUMS, valid
CycloneDX, and the same package set as the image's own `pip list` and `dpkg-query`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from neuron_torch.cli import main
from neuron_torch.packageset import differences, package_set
from tests import REPO_ROOT
from tests.integration.test_image import BuiltImage, image  # noqa: F401 (the session's image of the test cell)
from tests.testbed.harness import CELL, DOCKER, TEST_MATRIX, docker

BOM = "/etc/neuron-torch/bom"
LIST = f"""
cd {BOM} && sha256sum -c --quiet SHA256SUMS && cat SHA256SUMS && echo '@@' && cat sbom-venv.cdx.json && echo '@@' &&
cat sbom-apt.cdx.json && echo '@@' && cat version-info.json && echo '@@' && python -m pip list --format json &&
echo '@@' && dpkg-query -W -f '${{db:Status-Abbrev}} ${{Package}} ${{Version}}\\n'
"""


def test_the_image_carries_its_bill_of_materials_and_the_label_names_it(image: BuiltImage) -> None:  # noqa: F811
    validation = pytest.importorskip("cyclonedx.validation.json", reason="cyclonedx-python-lib is in the dev extras")
    from cyclonedx.schema import SchemaVersion

    out = docker("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", image.tag, "-c", LIST).stdout
    sums, venv, apt, info_text, pip_list, dpkg = out.split("@@\n")
    label = docker("image", "inspect", "--format", '{{index .Config.Labels "io.neuron-torch.bom"}}', image.tag)
    assert label.stdout.strip() == "sha256:" + hashlib.sha256(sums.encode()).hexdigest()

    validator = validation.JsonStrictValidator(SchemaVersion.V1_6)
    assert validator.validate_str(venv) is None and validator.validate_str(apt) is None
    listed = {(entry["name"].lower().replace("_", "-"), entry["version"]) for entry in json.loads(pip_list)}
    components = json.loads(venv)["components"]
    assert {(c["name"], c["version"]) for c in components} == listed
    torch = next(c for c in components if c["name"] == "torch")
    assert (
        torch["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu" and torch["properties"][0]["name"] == "neuron-torch:lock-sha256"
    )
    installed = {tuple(line.split()[1:]) for line in dpkg.splitlines() if line[1:2] == "i"}
    assert {(c["name"], c["version"]) for c in json.loads(apt)["components"]} == installed

    info = json.loads(info_text)
    matrix = image.matrix
    assert (info["cell"], info["release"]) == (CELL, matrix.release.name) and info["python"].startswith("3.11.")
    for package in matrix.apt.scoped("image"):
        assert info["packages"]["apt"][package.name].startswith(package.version)
    assert set(info["neuron"]) == {"runtime", "collectives", "tools"}, "no driver in an image"
    assert info["locked"]["torch"] == "2.13.0+cpu" and info["pinned"]["pip"]["torch"] == "2.13.0+cpu"
    base = matrix.cell(CELL).os.base_image
    digest = docker("image", "inspect", "--format", "{{.Id}}", base).stdout.strip()  # local-only: its id
    assert info["base_image"] == {"reference": f"{base}@{digest}", "digest": digest}


def expected_revision(digits: int = 40) -> str:
    """The checkout's commit as an image's labels and tags name it: `digits` hex digits, `-dirty` when edited."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=REPO_ROOT).stdout

    dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    return git("rev-parse", f"--short={digits}", "HEAD").strip() + ("-dirty" if dirty else "")


def test_the_image_names_the_commit_and_the_pinned_base_it_was_built_from(image: BuiltImage) -> None:  # noqa: F811
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", image.tag).stdout)
    assert labels["org.opencontainers.image.revision"] == expected_revision()
    assert len(expected_revision().removesuffix("-dirty")) == 40
    assert labels["org.opencontainers.image.version"] == f"{image.matrix.release.name}-{CELL}"
    base = image.matrix.cell(CELL).os.base_image
    found = json.loads(docker("image", "inspect", "--format", "{{json .}}", base).stdout)
    assert labels["org.opencontainers.image.base.name"] == f"{base}@{found['Id']}", "as pinned by the mirror"
    assert labels["org.opencontainers.image.base.digest"] == found["Id"]
    layers = json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", image.tag).stdout)
    assert layers[: len(found["RootFS"]["Layers"])] == found["RootFS"]["Layers"], "built on that base"


REBUILT = f"neuron-torch-rebuild-test:{CELL}"


def test_a_rebuild_of_the_same_commit_has_the_same_package_set_and_a_difference_is_named(
    image: BuiltImage,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The rebuild reuses the build cache (as CI's second build of a commit does): what it proves is the comparison,
    `build image --compare` on the real image; a rebuild without the cache is the same command with --no-cache."""
    argv = ["--matrix", str(TEST_MATRIX), "build", "image", "--cell", CELL, "--mirror", str(image.mirror)]
    changed = f"neuron-torch-rebuild-test:{CELL}-changed"
    try:
        before = package_set(DOCKER, image.tag)
        assert main([*argv, "--network", "host", "--tag", REBUILT, "--compare", image.tag]) == 0
        out = capsys.readouterr().out
        counts = f"{len(before['pip'])} pip and {len(before['apt'])} apt packages"
        assert f"same package set as {image.tag}: {counts}" in out and "torch" in before["pip"], out[-2000:]
        # One package gone and the bill of materials written again, as an image whose venv changed would have it.
        dockerfile = (
            f"FROM {REBUILT}\nUSER root\nRUN /opt/neuron-torch/venv/bin/python -m pip uninstall -y -q filelock && "
            "PYTHONPATH=/opt/neuron-torch/lib /opt/neuron-torch/venv/bin/python -m neuron_cell.sbom "
            "--out /etc/neuron-torch/bom\n"
        )
        classic = {**os.environ, "DOCKER_BUILDKIT": "0"}  # FROM a local tag, no registry asked
        subprocess.run([DOCKER, "build", "--quiet", "--network", "none", "--tag", changed, "-"], input=dockerfile,
                       text=True, capture_output=True, check=True, env=classic)  # fmt: skip
        after = package_set(DOCKER, changed)
        assert differences(before, after) == [f"pip filelock {before['pip']['filelock']}: gone"]
        assert after["apt"] == before["apt"]
    finally:
        docker("rmi", "-f", REBUILT, changed, check=False)
