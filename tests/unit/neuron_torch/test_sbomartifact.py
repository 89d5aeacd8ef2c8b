"""neuron_torch.sbomartifact: the SBOMs' tag derived from the image digest, the repository of any reference, and the
artifact written as skopeo's `dir:` folder and read back: an OCI 1.1 manifest naming the image as its subject, one
CycloneDX layer per SBOM; one for another image, with other files or of another shape is refused by name."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from neuron_torch.errors import NeuronTorchError
from neuron_torch.sbomartifact import SBOM_FILES, check_artifact, repository_of, sbom_tag, sha256, write_layout

IMAGE = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json"}).encode()
FILES = {
    "sbom-venv.cdx.json": b'{"bomFormat": "CycloneDX"}\n',
    "sbom-apt.cdx.json": b'{"bomFormat": "CycloneDX", "x": 1}\n',
}
SUMS = {name: hashlib.sha256(data).hexdigest() for name, data in FILES.items()}


def test_the_tag_and_the_repository() -> None:
    assert sbom_tag("sha256:" + "a" * 64) == f"sha256-{'a' * 64}.sbom"
    for reference in ("r.io:5000/ml/neuron-torch:tag", "r.io:5000/ml/neuron-torch@sha256:" + "a" * 64,
                      "r.io:5000/ml/neuron-torch:tag@sha256:" + "a" * 64):  # fmt: skip
        assert repository_of(reference) == "r.io:5000/ml/neuron-torch"
    assert repository_of("neuron-torch:c") == "neuron-torch"


def test_the_artifact_names_its_image_and_reads_back(tmp_path: Path) -> None:
    manifest = json.loads(write_layout(tmp_path, FILES, IMAGE))
    assert manifest["artifactType"] == "application/vnd.cyclonedx+json"
    assert manifest["config"] == {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256(b"{}"), "size": 2}
    assert manifest["subject"] == {"mediaType": json.loads(IMAGE)["mediaType"], "digest": sha256(IMAGE),
                                   "size": len(IMAGE)}  # fmt: skip
    titles = [layer["annotations"]["org.opencontainers.image.title"] for layer in manifest["layers"]]
    assert titles == list(SBOM_FILES) and (tmp_path / "version").is_file()
    assert check_artifact(tmp_path, sha256(IMAGE), SUMS) == {name: sha256(data) for name, data in FILES.items()}


@pytest.mark.parametrize(
    ("subject", "sums", "problem"),
    [
        (b'{"other": 1}', SUMS, "name another image as their subject"),
        (IMAGE, {**SUMS, "sbom-apt.cdx.json": "0" * 64}, "sbom-apt.cdx.json is not the file the image's SHA256SUMS"),
    ],
)
def test_sboms_of_another_image_or_other_files_are_refused(
    tmp_path: Path, subject: bytes, sums: dict[str, str], problem: str
) -> None:
    write_layout(tmp_path, FILES, subject)
    with pytest.raises(NeuronTorchError, match=problem) as error:
        check_artifact(tmp_path, sha256(IMAGE), sums)
    assert error.value.exit_code == 1


def test_an_artifact_of_another_shape_is_refused(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text('{"layers": []}')
    with pytest.raises(NeuronTorchError, match="are no SBOM artifact of neuron-torch's"):
        check_artifact(tmp_path, sha256(IMAGE), SUMS)
    write_layout(tmp_path, FILES, IMAGE)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["layers"] = manifest["layers"][:1]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(NeuronTorchError, match=r"hold \['sbom-venv.cdx.json'\], not"):
        check_artifact(tmp_path, sha256(IMAGE), SUMS)
