"""The image build arguments of a cell, from its cell record: `neuron-torch build image` stages the record (with the
locked versions) and passes these (plus the staged folder) as `--build-arg`s; `build image --dry-run` prints them.

What is the cell's own comes from the record (cell.schema.json, its schema version checked first); what the record
does not hold (the apt repository, uv, the indexes, all release-wide) comes from the matrix with its mirror settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import neuron_cell
from neuron_cell.cellrecord import PINNED
from neuron_torch.baseimage import split
from neuron_torch.cellrecord import check_record
from neuron_torch.matrix import Matrix
from neuron_torch.model import apt_pin

# docker's reference grammar (distribution/reference): [host[:port]/]name-components[:tag]; a tag to write (--tag)
DOCKER_TAG = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
)
# an image to build FROM: a tag reference, optionally pinned by digest (registry.example/ubuntu:26.04@sha256:...)
DOCKER_REFERENCE = re.compile(DOCKER_TAG.pattern + r"(?:@sha256:[0-9a-f]{64})?")


def build_args(matrix: Matrix, record: Mapping[str, Any]) -> dict[str, str]:
    """Every ARG of the Dockerfile that comes from the release, for the cell of `record` (a cell record)."""
    record = check_record(dict(record), f"the cell record of {record.get('id', 'an image build')}")
    default = next(index for index in matrix.indexes if index.is_default)
    return {
        "BASE_IMAGE": record["base_image"],  # what FROM names: `build image` puts the resolved base here
        "BASE_REFERENCE": record["base_image"],  # the base as the release names it: the image's base.name label
        "BASE_DIGEST": split(record["base_image"])[1] or "",  # the digest it is built on, resolved by `build image`
        "CELL_ID": record["id"],
        "RELEASE": record["release"],
        "FAMILY": record["family"],
        "PYTHON": record["python"],
        "PYTHON_ROUTE": record["python_route"],
        "UV_VERSION": matrix.python_install.uv,
        "UV_SHA256": matrix.python_install.uv_sha256,
        "UV_PYTHON_DOWNLOADS_JSON_URL": matrix.python_install.downloads_json_url,
        "UV_PYTHON_INSTALL_MIRROR": matrix.python_install.install_mirror,
        "APT_URL": matrix.apt.url,
        "APT_KEY_URL": matrix.apt.key_url,
        "APT_KEY_FINGERPRINT": matrix.apt.key_fingerprint,
        "APT_KEYRING": matrix.apt.keyring,
        "APT_COMPONENT": matrix.apt.component,
        "APT_PACKAGES": " ".join(apt_pin(name, version) for name, version in record["apt"].items()),
        # neuron_cell's digest: the build checks its copy of the folder against it before running any of it.
        "NEURON_CELL_SHA256": neuron_cell.digest(),
        # NAME=URL of each index: neuron_cell.lockinstall installs each index's lock entries from its URL alone.
        "INDEX_ROUTES": " ".join(f"{index.name}={index.url}" for index in matrix.indexes),
        "PYPI_INDEX_URL": default.url,
        "PINS": " ".join(f"{dist}=={record[key]}" for key, dist in PINNED.items() if record.get(key)),
    }
