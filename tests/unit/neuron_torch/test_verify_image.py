"""neuron_torch.verify_image without a registry (a stand-in `skopeo` on PATH that "pulls" a prepared image): the
policy file is read first, a refusal by the policy is one line naming the policy, and a pulled image gives its
manifest digest, and its bill of materials is checked against the packages its layers hold (whiteouts applied); the
SBOMs pushed beside it must be there and be the image's own.
The real signatures and image are checked in tests/integration/test_publish.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from neuron_torch.errors import NeuronTorchError
from neuron_torch.sbomartifact import SBOM_FILES, sha256, write_layout
from neuron_torch.verify_image import verify_image

# skopeo copy ... docker://REF dir:FOLDER: the image folder $IMAGE, or for the SBOMs' tag the artifact folder $SBOMS
# (empty: the registry has no such tag).
STAND_IN = """#!/usr/bin/env python3
import os, shutil, sys
if os.environ["REFUSE"]:
    sys.exit('time="x" level=fatal msg="Source image rejected: A signature was required, but no signature exists"')
source = os.environ["SBOMS"] if sys.argv[-2].endswith(".sbom") else os.environ["IMAGE"]
if not source:
    sys.exit("reading manifest x.sbom in r.io/neuron-torch: manifest unknown: manifest unknown")
shutil.copytree(source, sys.argv[-1].removeprefix("dir:"), dirs_exist_ok=True)
"""
BOM = "etc/neuron-torch/bom"
STATUS = (
    "Package: bash\nStatus: install ok installed\nVersion: 5.2\n\n"
    "Package: aws-neuronx-tools\nStatus: hold ok installed\nVersion: 2.33\n\n"
    "Package: old\nStatus: deinstall ok config-files\nVersion: 1\n"
)


def sbom(components: list[tuple[str, str]]) -> bytes:
    return json.dumps({"components": [{"name": n, "version": v} for n, v in components]}).encode()


def layer(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def write_image(folder: Path, venv: list[tuple[str, str]], edit: bytes = b"") -> str:
    """An image folder as `skopeo copy ... dir:` leaves it: two layers, the second whiting out a dist-info; and its
    SBOMs' artifact folder beside it (`<folder>-sboms`)."""
    bom = {
        "sbom-venv.cdx.json": sbom(venv),
        "sbom-apt.cdx.json": sbom([("aws-neuronx-tools", "2.33"), ("bash", "5.2")]),
    }
    sums = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in bom.items()).encode()
    site = "opt/neuron-torch/venv/lib/python3.11/site-packages"
    lower = layer({f"{site}/torch-2.13.0+cpu.dist-info/METADATA": b"Name: torch\nVersion: 2.13.0+cpu\n\nbody",
                   f"{site}/gone-1.0.dist-info/METADATA": b"Name: gone\nVersion: 1.0\n",
                   f"{site}/setuptools/_vendor/vendored-1.0.dist-info/METADATA": b"Name: vendored\nVersion: 1.0\n",
                   "var/lib/dpkg/status": STATUS.encode()})  # fmt: skip
    upper = layer({f"{site}/.wh.gone-1.0.dist-info": b"", **{f"{BOM}/{n}": d + edit for n, d in bom.items()},
                   f"{BOM}/SHA256SUMS": sums})  # fmt: skip
    config = json.dumps({"config": {"Labels": {"io.neuron-torch.bom": "sha256:" + hashlib.sha256(sums).hexdigest()}}})
    blobs = [config.encode(), lower, upper]
    folder.mkdir()
    for blob in blobs:
        (folder / hashlib.sha256(blob).hexdigest()).write_bytes(blob)
    digests = ["sha256:" + hashlib.sha256(blob).hexdigest() for blob in blobs]
    manifest = json.dumps({"config": {"digest": digests[0]}, "layers": [{"digest": d} for d in digests[1:]]})
    (folder / "manifest.json").write_text(manifest)
    sboms = folder.with_name(f"{folder.name}-sboms")
    sboms.mkdir()
    write_layout(sboms, bom, manifest.encode())
    return "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "bin").mkdir()
    skopeo = tmp_path / "bin" / "skopeo"
    skopeo.write_text(STAND_IN)
    skopeo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("REFUSE", "")
    monkeypatch.setenv("SBOMS", "")
    path = tmp_path / "policy.json"
    path.write_text('{"default": [{"type": "reject"}]}')
    return path


def test_a_pulled_image_gives_its_digest_and_its_checked_bill_of_materials(
    policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = write_image(tmp_path / "image", [("torch", "2.13.0+cpu")])
    monkeypatch.setenv("IMAGE", str(tmp_path / "image"))
    monkeypatch.setenv("SBOMS", str(tmp_path / "image-sboms"))
    verified = verify_image(f"r.io/neuron-torch@{digest}", policy)
    assert verified.digest == digest and verified.packages == {"pip": 1, "apt": 2}
    sboms = sha256((tmp_path / "image-sboms" / "manifest.json").read_bytes())
    assert verified.sboms == f"r.io/neuron-torch@{sboms}"
    with pytest.raises(NeuronTorchError, match="pulled a manifest of digest"):
        verify_image(f"r.io/neuron-torch@sha256:{'0' * 64}", policy)


@pytest.mark.parametrize(
    ("venv", "edit", "problem"),
    [
        ([("torch", "2.13.0+cpu"), ("gone", "1.0")], b"", "the pip SBOM is not what the image holds"),
        ([("torch", "2.13.0+cpu")], b" ", "sbom-venv.cdx.json is not the file SHA256SUMS names"),
    ],
)
def test_a_bill_of_materials_that_is_not_the_images_is_refused(
    policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, venv: list[tuple[str, str]], edit: bytes,
    problem: str,
) -> None:  # fmt: skip
    write_image(tmp_path / "image", venv, edit)
    monkeypatch.setenv("IMAGE", str(tmp_path / "image"))
    monkeypatch.setenv("SBOMS", str(tmp_path / "image-sboms"))
    with pytest.raises(NeuronTorchError, match=problem) as error:
        verify_image("r.io/neuron-torch:c", policy)
    assert error.value.exit_code == 1


def test_a_refusal_names_the_policy(policy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFUSE", "1")
    with pytest.raises(NeuronTorchError, match=f"r.io/neuron-torch:c is refused by {policy}: .*no signature") as error:
        verify_image("r.io/neuron-torch:c", policy)
    assert error.value.exit_code == 1


def test_a_missing_policy_is_a_usage_error(tmp_path: Path, policy: Path) -> None:
    with pytest.raises(NeuronTorchError, match=r"pass --policy a containers-policy\.json") as error:
        verify_image("r.io/neuron-torch:c", tmp_path / "none.json")
    assert error.value.exit_code == 2


def test_sboms_beside_the_image_must_be_there_and_be_its_own(
    policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = write_image(tmp_path / "image", [("torch", "2.13.0+cpu")])
    monkeypatch.setenv("IMAGE", str(tmp_path / "image"))
    with pytest.raises(NeuronTorchError, match=rf"no SBOMs were pushed beside the image: r.io/neuron-torch:sha256-"
                       rf"{digest[7:]}.sbom is not in the registry"):  # fmt: skip
        verify_image(f"r.io/neuron-torch@{digest}", policy)
    (tmp_path / "other").mkdir()  # SBOMs of another image
    write_layout(tmp_path / "other", dict.fromkeys(SBOM_FILES, b"{}"), b'{"schemaVersion": 2}')
    monkeypatch.setenv("SBOMS", str(tmp_path / "other"))
    with pytest.raises(NeuronTorchError, match=r"name another image as their subject"):
        verify_image(f"r.io/neuron-torch@{digest}", policy)
    (tmp_path / "edited").mkdir()  # for this image, but not the files its SHA256SUMS names
    write_layout(
        tmp_path / "edited", dict.fromkeys(SBOM_FILES, b"{}"), (tmp_path / "image" / "manifest.json").read_bytes()
    )
    monkeypatch.setenv("SBOMS", str(tmp_path / "edited"))
    with pytest.raises(NeuronTorchError, match=r"sbom-venv.cdx.json is not the file the image's SHA256SUMS names"):
        verify_image(f"r.io/neuron-torch@{digest}", policy)
