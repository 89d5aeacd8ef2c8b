"""`neuron-torch verify-image REF --policy FILE`: pull an image the way a policy-enforcing runtime does and say what
was verified.

skopeo (the containers-image library that podman and CRI-O use too) copies the image into an empty folder under
the policy: a missing signature, a key the policy does not accept, or a signature made for another tag (a moved
tag) stops it before any layer is read. A digest in REF is checked against the manifest; every blob is checked
against its digest on the way. Then the bill of materials: the label io.neuron-torch.bom is the digest of
/etc/neuron-torch/bom/SHA256SUMS in the layers, which names each file's, and the SBOMs list exactly the pip
distributions (the venv's .dist-info) and the Debian packages (dpkg's status) the layers hold. Last, the SBOMs pushed
beside the image (neuron_torch.sbomartifact) are pulled under the same policy and must be those same files.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from neuron_cell.locktext import canonical
from neuron_torch.bom import BOM_DIR, parse_sums
from neuron_torch.bom import LABEL as BOM_LABEL
from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.files import read_json
from neuron_torch.publish import auth_options, last_line, push_failure, skopeo_binary
from neuron_torch.sbomartifact import check_artifact, repository_of, sbom_tag, sha256

# containers/image's words when the policy refuses an image (every refusal starts with the first).
_REFUSED = ("source image rejected", "rejected by policy")


@dataclass(frozen=True)
class Verified:
    digest: str
    bom: str | None
    packages: dict[str, int] | None = None  # the pip and apt packages the SBOMs were checked against
    sboms: str | None = None  # the SBOMs pushed beside the image, checked to be its own


def pull(skopeo: str, options: list[str], reference: str, folder: Path, policy: Path, what: str) -> bytes:
    """`skopeo copy` of `reference` into `folder` under the policy (every blob checked against its digest); the
    manifest. `what` the reference is, for the message when the registry has no such tag."""
    command = [skopeo, "copy", "--quiet", *options, *auth_options(), f"docker://{reference}", f"dir:{folder}"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        if any(word in output.lower() for word in _REFUSED):
            raise NeuronTorchError(f"{reference} is refused by {policy}: {last_line(output)}", EXIT_FAILED)
        if "manifest unknown" in output.lower():
            raise NeuronTorchError(f"{what} {reference} is not in the registry (manifest unknown)", EXIT_FAILED)
        raise push_failure(reference.split("/", 1)[0], output)
    return (folder / "manifest.json").read_bytes()


def verify_image(reference: str, policy: Path, registries_d: Path | None = None) -> Verified:
    read_json(policy, "signature policy", "pass --policy a containers-policy.json file (see docs/release.md)")
    if registries_d is not None and not registries_d.is_dir():
        raise NeuronTorchError(f"--registries-d {registries_d} is not a folder of registries.d YAML files")
    skopeo = skopeo_binary()
    options = ["--policy", str(policy), *(["--registries.d", str(registries_d)] if registries_d else [])]
    with tempfile.TemporaryDirectory(prefix="neuron-torch-verify-") as folder:
        manifest = pull(skopeo, options, reference, Path(folder), policy, "the image")
        digest = sha256(manifest)
        if "@" in reference and not reference.endswith(f"@{digest}"):  # skopeo checks it too; said plainly here
            raise NeuronTorchError(f"{reference} pulled a manifest of digest {digest}", EXIT_FAILED)
        layout = json.loads(manifest)
        config = json.loads((Path(folder) / layout["config"]["digest"].removeprefix("sha256:")).read_bytes())
        labels = (config.get("config") or {}).get("Labels") or {}
        bom = labels.get(BOM_LABEL)
        if bom is None:
            return Verified(digest=digest, bom=None)
        layers = [Path(folder) / layer["digest"].removeprefix("sha256:") for layer in layout["layers"]]
        files = image_files(layers)
        counts = check_bom(bom, files)
    # The SBOMs pushed beside it, pulled under the same policy (signed where the image must be): the image's own.
    sums = parse_sums(files[f"{BOM_DIR.lstrip('/')}/SHA256SUMS"].decode())
    target = f"{repository_of(reference)}:{sbom_tag(digest)}"
    with tempfile.TemporaryDirectory(prefix="neuron-torch-verify-sbom-") as folder:
        sboms = pull(skopeo, options, target, Path(folder), policy, "no SBOMs were pushed beside the image:")
        check_artifact(Path(folder), digest, sums)
    return Verified(digest=digest, bom=bom, packages=counts, sboms=f"{repository_of(reference)}@{sha256(sboms)}")


def _wanted(path: str) -> bool:
    return (
        path.startswith(BOM_DIR.lstrip("/") + "/")
        or path == "var/lib/dpkg/status"
        or (path.startswith("opt/neuron-torch/venv/") and _distribution(path))
    )


def _distribution(path: str) -> bool:
    """An installed distribution's METADATA: a .dist-info right in site-packages (not one vendored inside a
    package, which importlib.metadata and pip do not list either)."""
    parts = path.split("/")
    return (
        len(parts) >= 3
        and parts[-1] == "METADATA"
        and parts[-2].endswith(".dist-info")
        and parts[-3] == "site-packages"
    )


def image_files(layers: list[Path]) -> dict[str, bytes]:
    """The files check_bom reads, as the image's layers (in order, whiteouts applied) leave them."""
    files: dict[str, bytes] = {}
    for layer in layers:
        with tarfile.open(layer) as archive:  # gzip or plain: tarfile finds out
            for member in archive:
                path = member.name.removeprefix("./")
                folder, _, name = path.rpartition("/")
                if name == ".wh..wh..opq":  # an opaque folder: what the lower layers had in it is gone
                    files = {p: b for p, b in files.items() if not p.startswith(folder + "/")}
                elif name.startswith(".wh."):  # a whiteout: the lower layers' file (or folder) is gone
                    gone = f"{folder}/{name.removeprefix('.wh.')}".lstrip("/")
                    files = {p: b for p, b in files.items() if p != gone and not p.startswith(gone + "/")}
                elif member.isfile() and _wanted(path):
                    handle = archive.extractfile(member)
                    files[path] = handle.read() if handle else b""
    return files


def _installed_apt(status: str) -> set[tuple[str, str]]:
    found = set()
    for paragraph in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in paragraph.splitlines() if ": " in line and line[0] != " ")
        if fields.get("Status", "").endswith(" installed"):
            found.add((fields["Package"], fields["Version"]))
    return found


def _installed_pip(files: dict[str, bytes]) -> set[tuple[str, str]]:
    found = set()
    for path, text in files.items():
        if _distribution(path):
            fields = dict(line.split(": ", 1) for line in text.decode().split("\n\n")[0].splitlines() if ": " in line)
            found.add((canonical(fields["Name"]), fields["Version"]))
    return found


def check_bom(label: str, files: dict[str, bytes]) -> dict[str, int]:
    """The label is the digest of SHA256SUMS, SHA256SUMS the digests of the files, and the SBOMs list exactly the
    pip and apt packages installed in the image's layers: {"pip": N, "apt": M}."""
    sums = files.get(f"{BOM_DIR.lstrip('/')}/SHA256SUMS")
    if sums is None or "sha256:" + hashlib.sha256(sums).hexdigest() != label:
        raise NeuronTorchError(
            f"the image's SHA256SUMS is missing or is not its {BOM_LABEL} label {label}", EXIT_FAILED
        )
    for line in sums.decode().splitlines():
        value, name = line.split("  ", 1)
        content = files.get(f"{BOM_DIR.lstrip('/')}/{name}")
        if content is None or hashlib.sha256(content).hexdigest() != value:
            raise NeuronTorchError(f"the image's {BOM_DIR}/{name} is not the file SHA256SUMS names", EXIT_FAILED)
    expected = {
        "pip": _installed_pip(files),
        "apt": _installed_apt(files.get("var/lib/dpkg/status", b"").decode()),
    }
    for kind, installed in expected.items():
        document = json.loads(files[f"{BOM_DIR.lstrip('/')}/sbom-{'venv' if kind == 'pip' else kind}.cdx.json"])
        listed = {(c["name"], c["version"]) for c in document["components"]}
        if listed != installed:
            differ = sorted(listed ^ installed)[:3]
            raise NeuronTorchError(f"the {kind} SBOM is not what the image holds (e.g. {differ})", EXIT_FAILED)
    return {kind: len(installed) for kind, installed in expected.items()}
