"""The image build arguments of each cell, rendered from the matrix: constraints/generated/docker/<cell>.args.

`neuron-torch build image` passes the same values (plus the staged lock) as `--build-arg`s; the files let a reader
or another tool see what a cell's image is built from without running Python.
"""

from __future__ import annotations

from pathlib import Path

from neuron_torch.generated import header
from neuron_torch.matrix import AptScope, Cell, Matrix


def build_args(matrix: Matrix, cell: Cell) -> dict[str, str]:
    """Every ARG of the Dockerfile that comes from the matrix, for one cell."""
    default = next(index for index in matrix.indexes if index.is_default)
    extra = [index.url for index in matrix.indexes if not index.is_default]
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
        "INDEX_URL": default.url,
        "EXTRA_INDEX_URLS": " ".join(extra),
        "PYPI_INDEX_URL": default.url,
        "PINS": " ".join(f"{name}=={version}" for name, version in cell.pins.items()),
    }


def args_dir(matrix: Matrix) -> Path:
    return matrix.generated_dir / "docker"


def args_path(matrix: Matrix, cell: Cell) -> Path:
    return args_dir(matrix) / f"{cell.id}.args"


def docker_args_files(matrix: Matrix) -> dict[Path, str]:
    files = {}
    for cell in matrix.cells:
        lines = [header(matrix).rstrip(), f"# Image build arguments of cell {cell.id} ({matrix.release.name})."]
        lines += [f"{key}={value}" for key, value in build_args(matrix, cell).items()]
        files[args_path(matrix, cell)] = "\n".join(lines) + "\n"
    return files


def read_args_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines() if line and line[0] != "#")
    return {key: value for key, value in pairs}
