"""Base images pinned by digest: a release names each base as `NAME[:TAG]@sha256:DIGEST` (the matrix's `base_image`,
or the mirror settings' `[images]` value), and every image build records the digest it was built on.

What the digest is, as Docker knows it:
- an image pulled from a registry: the manifest digest Docker recorded (its RepoDigests), which a pull by digest checks;
- an image that never came from a registry (`docker import`, `docker load`, the test bed's bases): its image id, the
  digest of its configuration, which names every layer by the digest of its content.

`resolve` finds the pinned image on this Docker engine (pulling it by digest when it is not there) and says what the
Dockerfile's FROM names: the digest reference itself, or for a local-only image its tag, which BuildKit reads from the
engine (it would look a digest up in a registry). `check_built_on` then proves the built image's first layers are that
base's. A release build (`build image --release`, `publish image`) refuses a base without a digest.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuron_cell.boundary import quote
from neuron_torch.errors import EXIT_FAILED, NeuronTorchError

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
PIN_HOW = (
    'base_image = "NAME:TAG@sha256:DIGEST" in the release matrix, or "NAME:TAG" = "REG/NAME:TAG@sha256:DIGEST" in the '
    "mirror settings' [images]; read the digest where the registry is reachable: `docker pull NAME:TAG && docker "
    "image inspect --format '{{index .RepoDigests 0}}' NAME:TAG` (docs/release.md, base images)"
)


@dataclass(frozen=True)
class Base:
    reference: str  # as the release (with the mirror settings) names it
    source: str  # what FROM names
    digest: str  # the digest the build is on ("" when not yet resolved: a dry run of an unpinned base)
    layers: tuple[str, ...] = ()  # its layers' diff ids, the built image's first layers


def split(reference: str) -> tuple[str, str | None]:
    """(NAME[:TAG], the digest or None) of a docker reference."""
    name, at, digest = reference.partition("@")
    return (name, digest) if at and DIGEST.fullmatch(digest) else (reference, None)


def mirrored(reference: str, images: Mapping[str, str]) -> str:
    """The base `reference` through the mirror settings' [images]: an entry names it with or without its digest; a
    mirror's copy without a digest of its own keeps the release's (a registry mirror serves the same manifest)."""
    name, digest = split(reference)
    copy = images.get(reference, images.get(name))
    if copy is None:
        return reference
    return copy if digest is None or split(copy)[1] else f"{copy}@{digest}"


def require_pinned(reference: str, cell: str) -> None:
    """A release build's gate: the base names its digest."""
    if split(reference)[1] is None:
        raise NeuronTorchError(
            f"the base image {quote(reference)} of cell {cell} is not pinned by digest: a release image names the base "
            f"it was built on by digest. Pin it: {PIN_HOW}"
        )


def _inspect(docker: str, reference: str) -> dict[str, Any] | None:
    result = subprocess.run(
        [docker, "image", "inspect", "--format", "{{json .}}", reference],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    if result.returncode != 0:
        if "no such image" not in result.stderr.lower():
            raise NeuronTorchError(f"{docker} cannot read its images: {result.stderr.strip()[-300:]}", EXIT_FAILED)
        return None
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def _pull(docker: str, reference: str) -> dict[str, Any]:
    result = subprocess.run([docker, "pull", "--quiet", reference], capture_output=True, text=True, check=False)
    found = _inspect(docker, reference) if result.returncode == 0 else None
    if found is None:
        raise NeuronTorchError(
            f"the base image {quote(reference)} is not on this Docker engine and could not be pulled: "
            f"{result.stderr.strip()[-300:] or 'pulled, yet not found'}",
            EXIT_FAILED,
        )
    return found


def layers(image: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple((image.get("RootFS") or {}).get("Layers") or ())


def _repo_digest(image: Mapping[str, Any], name: str) -> str | None:
    """The manifest digest Docker recorded for the repository of `name` (a pulled image), else None."""
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    for entry in image.get("RepoDigests") or []:
        found, _, digest = str(entry).partition("@")
        if found in (repository, f"docker.io/library/{repository}", f"docker.io/{repository}"):
            return digest
    return None


def resolve(docker: str, reference: str) -> Base:
    """The base on this Docker engine (pulled when missing): what FROM names and the digest it is on."""
    name, digest = split(reference)
    if digest is None:
        image = _inspect(docker, name) or _pull(docker, name)
        return Base(reference, name, _repo_digest(image, name) or str(image["Id"]), layers(image))
    pulled = _inspect(docker, reference)  # pulled by this digest before: Docker keeps the digest reference
    if pulled is not None:
        return Base(reference, reference, digest, layers(pulled))
    local = _inspect(docker, name)
    if local is not None and local["Id"] == digest:  # a local-only image: its id is the digest
        return Base(reference, name, digest, layers(local))
    return Base(reference, reference, digest, layers(_pull(docker, reference)))


def check_built_on(docker: str, base: Base, image: str) -> None:
    """The built image's first layers are the base's: it was built on the digest it records."""
    built = _inspect(docker, image)
    if built is None or layers(built)[: len(base.layers)] != base.layers:
        raise NeuronTorchError(
            f"{image} is not built on the base {base.reference} ({base.digest}): its layers do not start with the "
            f"base's (was {base.source} re-tagged during the build?); build it again",
            EXIT_FAILED,
        )
