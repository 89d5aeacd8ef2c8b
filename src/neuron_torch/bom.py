"""The image's bill of materials as the toolkit sees it: where the image build writes it (neuron_cell.sbom, run by the
Dockerfile's last step), and the label that carries its digest.

A label cannot be computed inside a Dockerfile, so `neuron-torch build image` adds it after the build: it reads
SHA256SUMS back from the built image and rebuilds nothing but the image's configuration (`FROM <id>` + `LABEL`, no
new layer) under the same tags. Anyone can then check a pulled image: the label's digest is SHA256SUMS's, and
SHA256SUMS names each file's.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Sequence

from neuron_torch.errors import EXIT_FAILED, NeuronTorchError

BOM_DIR = "/etc/neuron-torch/bom"
LABEL = "io.neuron-torch.bom"
SUMS = f"{BOM_DIR}/SHA256SUMS"


def read_file(docker: str, image: str, path: str) -> bytes:
    """One file of the image, as its layers hold it."""
    result = subprocess.run(
        [docker, "run", "--rm", "--network", "none", "--entrypoint", "cat", image, path],
        capture_output=True, check=False, timeout=300,
    )  # fmt: skip
    if result.returncode != 0:
        error = result.stderr.decode(errors="replace").strip()[-300:]
        raise NeuronTorchError(
            f"{image} holds no {path} ({error}): build it from this checkout's Dockerfile", EXIT_FAILED
        )
    return result.stdout


def read_sums(docker: str, image: str) -> str:
    """The image's SHA256SUMS (the bill of materials' index)."""
    return read_file(docker, image, SUMS).decode()


def parse_sums(text: str) -> dict[str, str]:
    """SHA256SUMS as {file name: hex digest}."""
    return {name: value for value, _, name in (line.partition("  ") for line in text.splitlines() if line)}


def label_image(docker: str, tags: Sequence[str]) -> str:
    """Label the built image (tags[0], and every tag) with `sha256:<digest of its SHA256SUMS>`; that value."""
    digest = "sha256:" + hashlib.sha256(read_sums(docker, tags[0]).encode()).hexdigest()
    image_id = subprocess.run(
        [docker, "image", "inspect", "--format", "{{.Id}}", tags[0]], capture_output=True, text=True, check=True
    ).stdout.strip()
    command = [docker, "build", "--quiet", *(word for tag in tags for word in ("--tag", tag)), "-"]
    dockerfile = f"FROM {image_id}\nLABEL {LABEL}={digest}\n"
    # The classic builder takes an image id in FROM as it is; BuildKit would look it up in a registry.
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    result = subprocess.run(command, input=dockerfile, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise NeuronTorchError(f"labelling {tags[0]} failed: {result.stderr.strip()[-300:]}", EXIT_FAILED)
    return digest
