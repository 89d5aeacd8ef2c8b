"""neuron_torch.baseimage without Docker (a stand-in `docker` that knows a few images): a reference split into name
and digest, the mirror's [images] keeping the release's digest, the release gate naming how to pin, and the base
resolved three ways (pulled before by its digest, a local-only image whose id is the digest, pulled by digest when
missing; an unpinned base gets the digest Docker recorded for it), then the built image checked to be on it.
The real build on the test bed's pinned base is tests/integration/test_bom.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_torch.baseimage import Base, check_built_on, mirrored, require_pinned, resolve, split
from neuron_torch.cli import main
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Matrix

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
# docker image inspect --format {{json .}} REF | docker pull --quiet REF: the images it has by reference in $IMAGES
# (JSON: {"images": ..., "pulls": ...}); a pull adds the registry's ("pulls") image of that reference.
STAND_IN = """#!/usr/bin/env python3
import json, os, sys
state = json.load(open(os.environ["IMAGES"]))
images = state["images"]
open(os.environ["LOG"], "a").write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[1] == "pull":
    if sys.argv[-1] not in state["pulls"]:
        sys.exit("Error response from daemon: manifest unknown")
    images[sys.argv[-1]] = state["pulls"][sys.argv[-1]]
    json.dump(state, open(os.environ["IMAGES"], "w"))
    sys.exit(0)
if sys.argv[-1] not in images:
    sys.exit(f"Error: No such image: {sys.argv[-1]}")
print(json.dumps(images[sys.argv[-1]]))
"""


def image(identity: str, *layers: str, repo_digests: tuple[str, ...] = ()) -> dict[str, object]:
    return {"Id": identity, "RepoDigests": list(repo_digests), "RootFS": {"Layers": list(layers)}}


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "docker"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    monkeypatch.setenv("IMAGES", str(tmp_path / "images.json"))
    monkeypatch.setenv("LOG", str(tmp_path / "log"))
    know(tmp_path, {})
    return script


def know(tmp_path: Path, images: dict[str, object], pulls: dict[str, object] | None = None) -> None:
    (tmp_path / "images.json").write_text(json.dumps({"images": images, "pulls": pulls or {}}))


def test_a_reference_splits_into_name_and_digest() -> None:
    assert split(f"ubuntu:26.04@{D1}") == ("ubuntu:26.04", D1)
    assert split(f"r.example:5000/ubuntu@{D1}") == ("r.example:5000/ubuntu", D1)
    assert split("ubuntu:26.04") == ("ubuntu:26.04", None)
    assert split("ubuntu@sha256:abc") == ("ubuntu@sha256:abc", None), "no digest but a whole sha256"


def test_the_mirror_keeps_the_releases_digest_unless_it_pins_its_own() -> None:
    copy = "artifactory.example/docker-remote/ubuntu:26.04"
    assert mirrored(f"ubuntu:26.04@{D1}", {"ubuntu:26.04": copy}) == f"{copy}@{D1}"
    assert mirrored(f"ubuntu:26.04@{D1}", {"ubuntu:26.04": f"{copy}@{D2}"}) == f"{copy}@{D2}"
    assert mirrored("ubuntu:26.04", {"ubuntu:26.04": f"{copy}@{D2}"}) == f"{copy}@{D2}"
    assert mirrored(f"ubuntu:26.04@{D1}", {f"ubuntu:26.04@{D1}": "local/base:1"}) == "local/base:1@" + D1
    assert mirrored("ubuntu:24.04", {"ubuntu:26.04": copy}) == "ubuntu:24.04"


def test_the_release_gate_refuses_a_base_without_a_digest_and_says_how_to_pin() -> None:
    require_pinned(f"ubuntu:26.04@{D1}", "c")
    with pytest.raises(NeuronTorchError, match=r"base image 'ubuntu:26.04' of cell c is not pinned by digest") as error:
        require_pinned("ubuntu:26.04", "c")
    assert error.value.exit_code == 2 and "docker image inspect --format '{{index .RepoDigests 0}}'" in str(error.value)


def test_build_image_release_refuses_the_real_unpinned_default_before_anything(
    matrix: Matrix, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = matrix.release.default_cell
    assert matrix.cell(cell).os.base_image == "ubuntu:26.04", "no true digest of ubuntu:26.04 could be read here"
    assert main(["build", "image", "--cell", cell, "--release", "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"'ubuntu:26.04' of cell {cell} is not pinned by digest" in captured.err


def test_a_base_pulled_by_its_digest_before_is_used_by_that_digest(docker: Path, tmp_path: Path) -> None:
    know(tmp_path, {f"ubuntu:26.04@{D1}": image("sha256:c0", "l1")})
    assert resolve(str(docker), f"ubuntu:26.04@{D1}") == Base(f"ubuntu:26.04@{D1}", f"ubuntu:26.04@{D1}", D1, ("l1",))


def test_a_local_only_base_is_named_by_its_tag_once_its_id_is_the_digest(docker: Path, tmp_path: Path) -> None:
    know(tmp_path, {"bed/base:1": image(D1, "l1", "l2")})
    assert resolve(str(docker), f"bed/base:1@{D1}") == Base(f"bed/base:1@{D1}", "bed/base:1", D1, ("l1", "l2"))


def test_a_missing_or_other_base_is_pulled_by_its_digest(docker: Path, tmp_path: Path) -> None:
    know(tmp_path, {"ubuntu:26.04": image(D2, "old")}, pulls={f"ubuntu:26.04@{D1}": image("sha256:c1", "new")})
    assert resolve(str(docker), f"ubuntu:26.04@{D1}") == Base(f"ubuntu:26.04@{D1}", f"ubuntu:26.04@{D1}", D1, ("new",))
    assert f"pull --quiet ubuntu:26.04@{D1}" in (tmp_path / "log").read_text()
    know(tmp_path, {})
    with pytest.raises(
        NeuronTorchError, match=r"not on this Docker engine and could not be pulled: .*manifest unknown"
    ):
        resolve(str(docker), f"ubuntu:26.04@{D1}")


def test_an_unpinned_base_records_the_digest_docker_has_for_it(docker: Path, tmp_path: Path) -> None:
    pulled = image("sha256:c2", "l1", repo_digests=(f"ubuntu@{D1}", f"r.example/ubuntu@{D2}"))
    know(tmp_path, {"ubuntu:26.04": pulled, "bed/base:1": image(D2, "l1")})
    assert resolve(str(docker), "ubuntu:26.04").digest == D1, "the manifest digest of its own repository"
    assert resolve(str(docker), "bed/base:1") == Base("bed/base:1", "bed/base:1", D2, ("l1",)), "local: its id"


def test_the_built_image_must_start_with_the_bases_layers(docker: Path, tmp_path: Path) -> None:
    know(tmp_path, {"built:1": image("sha256:b", "l1", "l2", "l3"), "other:1": image("sha256:o", "x1", "l2", "l3")})
    base = Base(f"bed/base:1@{D1}", "bed/base:1", D1, ("l1", "l2"))
    check_built_on(str(docker), base, "built:1")
    with pytest.raises(NeuronTorchError, match=r"other:1 is not built on the base bed/base:1@sha256:1{64}"):
        check_built_on(str(docker), base, "other:1")
