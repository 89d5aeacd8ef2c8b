"""The image build arguments of a cell, from the matrix: `neuron-torch build image` passes them (plus the staged
lock and cell record) as `--build-arg`s; `build image --dry-run` prints them."""

from __future__ import annotations

import re

from neuron_torch.matrix import AptScope, Cell, Matrix

# docker's reference grammar (distribution/reference): [host[:port]/]name-components[:tag]; a tag to write (--tag)
DOCKER_TAG = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
)
# an image to build FROM: a tag reference, optionally pinned by digest (registry.example/ubuntu:26.04@sha256:...)
DOCKER_REFERENCE = re.compile(DOCKER_TAG.pattern + r"(?:@sha256:[0-9a-f]{64})?")


def build_args(matrix: Matrix, cell: Cell) -> dict[str, str]:
    """Every ARG of the Dockerfile that comes from the matrix, for one cell."""
    default = next(index for index in matrix.indexes if index.is_default)
    return {
        "BASE_IMAGE": cell.os.base_image,
        "CELL_ID": cell.id,
        "RELEASE": matrix.release.name,
        "FAMILY": cell.family.name,
        "PYTHON": cell.python,
        "PYTHON_ROUTE": cell.python_route,
        "UV_VERSION": matrix.python_install.uv,
        "UV_SHA256": matrix.python_install.uv_sha256,
        "UV_PYTHON_DOWNLOADS_JSON_URL": matrix.python_install.downloads_json_url,
        "UV_PYTHON_INSTALL_MIRROR": matrix.python_install.install_mirror,
        "APT_URL": matrix.apt.url,
        "APT_KEY_URL": matrix.apt.key_url,
        "APT_KEY_FINGERPRINT": matrix.apt.key_fingerprint,
        "APT_KEYRING": matrix.apt.keyring,
        "APT_COMPONENT": matrix.apt.component,
        "APT_PACKAGES": " ".join(package.apt_pin for package in matrix.apt.scoped(AptScope.IMAGE)),
        # NAME=URL of each index: lockinstall.py installs each index's lock entries from its URL alone.
        "INDEX_ROUTES": " ".join(f"{index.name}={index.url}" for index in matrix.indexes),
        "PYPI_INDEX_URL": default.url,
        "PINS": " ".join(f"{name}=={version}" for name, version in cell.pins.items()),
    }
