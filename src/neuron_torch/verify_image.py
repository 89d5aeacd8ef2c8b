"""`neuron-torch verify-image REF --policy FILE`: pull an image the way a policy-enforcing runtime does and say what
was verified.

skopeo (the containers-image library that podman and CRI-O use too) copies the image into an empty folder under
the policy: a missing signature, a key the policy does not accept, or a signature made for another tag (a moved
tag) stops it before any layer is read. A digest in REF is checked against the manifest; every blob is checked
against its digest on the way. The image's bill of materials' label (io.neuron-torch.bom) is read from its config.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from neuron_torch.bom import LABEL as BOM_LABEL
from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.files import read_json
from neuron_torch.publish import auth_options, last_line, push_failure, skopeo_binary

# containers/image's words when the policy refuses an image (every refusal starts with the first).
_REFUSED = ("source image rejected", "rejected by policy")


@dataclass(frozen=True)
class Verified:
    digest: str
    bom: str | None


def verify_image(reference: str, policy: Path, registries_d: Path | None = None) -> Verified:
    read_json(policy, "signature policy", "pass --policy a containers-policy.json file (see docs/release.md)")
    if registries_d is not None and not registries_d.is_dir():
        raise NeuronTorchError(f"--registries-d {registries_d} is not a folder of registries.d YAML files")
    skopeo = skopeo_binary()
    options = ["--policy", str(policy), *(["--registries.d", str(registries_d)] if registries_d else [])]
    with tempfile.TemporaryDirectory(prefix="neuron-torch-verify-") as folder:
        command = [skopeo, "copy", "--quiet", *options, *auth_options(), f"docker://{reference}", f"dir:{folder}"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        output = result.stdout + result.stderr
        if result.returncode != 0:
            if any(word in output.lower() for word in _REFUSED):
                raise NeuronTorchError(f"{reference} is refused by {policy}: {last_line(output)}", EXIT_FAILED)
            raise push_failure(reference.split("/", 1)[0], output)
        manifest = (Path(folder) / "manifest.json").read_bytes()
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        config_digest = json.loads(manifest)["config"]["digest"]
        config = json.loads((Path(folder) / config_digest.removeprefix("sha256:")).read_bytes())
    if "@" in reference and not reference.endswith(f"@{digest}"):  # skopeo checks it too; said plainly here
        raise NeuronTorchError(f"{reference} pulled a manifest of digest {digest}", EXIT_FAILED)
    labels = (config.get("config") or {}).get("Labels") or {}
    return Verified(digest=digest, bom=labels.get(BOM_LABEL))
