"""The SBOMs pushed beside a published image, as an OCI artifact in the image's repository.

Its tag is `sha256-<image digest hex>.sbom` (cosign's convention for an attached SBOM): whoever holds the image's
digest finds its SBOMs without a record. The manifest (OCI image manifest 1.1) has the artifact type
`application/vnd.cyclonedx+json`, the empty config, one layer per SBOM (`sbom-venv.cdx.json`, `sbom-apt.cdx.json`,
named by the `org.opencontainers.image.title` annotation, the bytes the image holds in /etc/neuron-torch/bom) and the
image's manifest as its `subject`, so a registry with the OCI referrers API lists it under the image too.

`write_layout` makes the containers-image `dir:` folder skopeo pushes as it is (`--preserve-digests`, so it can be
signed like the image); `check_artifact` reads one back: it names the image, and each SBOM is the file the image's
SHA256SUMS (named by its `io.neuron-torch.bom` label) names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from neuron_torch.errors import EXIT_FAILED, NeuronTorchError

SBOM_FILES = ("sbom-venv.cdx.json", "sbom-apt.cdx.json")
MEDIA_TYPE = "application/vnd.cyclonedx+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
TITLE = "org.opencontainers.image.title"


def sbom_tag(image_digest: str) -> str:
    return image_digest.replace(":", "-") + ".sbom"


def repository_of(reference: str) -> str:
    """REG/PATH/NAME of a reference REG/PATH/NAME[:TAG][@DIGEST]."""
    name = reference.split("@", 1)[0]
    folder, _, last = name.rpartition("/")
    return f"{folder}/{last.split(':', 1)[0]}" if folder else last.split(":", 1)[0]


def sha256(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def _blob(folder: Path, content: bytes) -> dict[str, object]:
    (folder / sha256(content).removeprefix("sha256:")).write_bytes(content)
    return {"digest": sha256(content), "size": len(content)}


def write_layout(folder: Path, files: Mapping[str, bytes], subject: bytes) -> bytes:
    """The artifact of `files` (name: content) for the image whose manifest is `subject`, as a `dir:` folder; its
    manifest."""
    layers = [
        {"mediaType": MEDIA_TYPE, **_blob(folder, files[name]), "annotations": {TITLE: name}} for name in SBOM_FILES
    ]
    subject_type = json.loads(subject).get("mediaType", MANIFEST_TYPE)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "artifactType": MEDIA_TYPE,
        "config": {"mediaType": EMPTY_TYPE, **_blob(folder, b"{}")},
        "layers": layers,
        "subject": {"mediaType": subject_type, "digest": sha256(subject), "size": len(subject)},
    }
    text = json.dumps(manifest, separators=(",", ":")).encode()
    (folder / "manifest.json").write_bytes(text)
    (folder / "version").write_text("Directory Transport Version: 1.1\n")
    return text


def check_artifact(folder: Path, image_digest: str, sums: Mapping[str, str]) -> dict[str, str]:
    """The artifact skopeo copied into `folder` is the SBOMs of the image `image_digest`, each the file its
    SHA256SUMS (`sums`: name -> hex digest) names; {name: digest}."""
    where = f"the SBOMs beside {image_digest}"
    try:
        manifest = json.loads((folder / "manifest.json").read_bytes())
        subject, layers = manifest["subject"]["digest"], manifest["layers"]
        named = {layer["annotations"][TITLE]: layer["digest"] for layer in layers}
    except (OSError, ValueError, KeyError, TypeError):
        raise NeuronTorchError(f"{where} are no SBOM artifact of neuron-torch's", EXIT_FAILED) from None
    if subject != image_digest:
        raise NeuronTorchError(f"{where} name another image as their subject ({subject})", EXIT_FAILED)
    if sorted(named) != sorted(SBOM_FILES):
        raise NeuronTorchError(f"{where} hold {sorted(named)}, not {list(SBOM_FILES)}", EXIT_FAILED)
    for name, digest in named.items():
        content = (folder / digest.removeprefix("sha256:")).read_bytes()
        if sha256(content) != digest or digest != f"sha256:{sums.get(name)}":
            raise NeuronTorchError(
                f"{where}: {name} is not the file the image's SHA256SUMS names (its label's bill of materials)",
                EXIT_FAILED,
            )
    return named
