"""Mirror settings' [images]: a base image of the release mapped to another reference (a corporate registry's copy),
read wherever a base image is chosen (`build image`'s BASE_IMAGE), and bad entries refused with exit 2.

tests/integration/test_quickstart.py builds the real default cell's image through the test bed's [images] (its Ubuntu
twins).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from neuron_torch.buildargs import build_args
from neuron_torch.cellinfo import cell_record
from neuron_torch.matrix import Matrix
from neuron_torch.mirror import apply_mirror, load_mirror

CLI = [sys.executable, "-m", "neuron_torch.cli"]
REMOTE = "artifactory.example.com:8443/docker-remote/library/ubuntu:26.04"
DIGEST = "@sha256:" + "ab" * 32


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mirror.toml"
    path.write_text(text)
    return path


def test_a_mapped_base_reaches_the_image_build_args_of_its_cells_only(matrix: Matrix, tmp_path: Path) -> None:
    settings = f'[images]\n"ubuntu:26.04" = "{REMOTE}{DIGEST}"\n"debian:13" = "registry.example/debian:13"\n'
    mirror = load_mirror(write(tmp_path, settings))
    mirrored = apply_mirror(matrix, mirror)
    assert f"base image ubuntu:26.04: {REMOTE}{DIGEST}" in mirror.describe()
    bases = {cell.id: build_args(mirrored, cell_record(mirrored, cell))["BASE_IMAGE"] for cell in mirrored.cells}
    assert {cell.id: cell.os.base_image for cell in matrix.cells} == {
        cell_id: ("ubuntu:26.04" if base == REMOTE + DIGEST else base) for cell_id, base in bases.items()
    }  # every 26.04 cell's base is the mirror's, every other cell's the release's
    assert sorted({base for base in bases.values()}) == [REMOTE + DIGEST, "ubuntu:24.04"]
    assert mirrored.operating_system("ubuntu26.04").base_image == REMOTE + DIGEST
    assert [c.pins for c in mirrored.cells] == [c.pins for c in matrix.cells]  # only where the base comes from


def test_no_images_table_keeps_the_release_bases(matrix: Matrix, tmp_path: Path) -> None:
    mirrored = apply_mirror(matrix, load_mirror(write(tmp_path, '[apt]\nurl = "https://m/apt"\n')))
    assert mirrored.cells == matrix.cells


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('images = "ubuntu:26.04"\n', "[images] must be a table"),
        ('[images]\n"ubuntu:26.04" = 2604\n', "[images]: ubuntu:26.04 must be a string, not 2604"),
        ('[images]\n"ubuntu:26.04" = ""\n', "[images] value '' (entry 'ubuntu:26.04') is not a docker image reference"),
        ('[images]\n"ubuntu:26.04" = "Registry/Ubuntu:26.04"\n', "value 'Registry/Ubuntu:26.04'"),
        ('[images]\n"ubuntu:26.04" = "registry.example/ubuntu 26.04"\n', "value 'registry.example/ubuntu 26.04'"),
        ('[images]\n"ubuntu:26.04" = "registry.example/ubuntu@sha256:abc"\n', "@sha256:abc' (entry"),
        ('[images]\n"https://hub/ubuntu:26.04" = "r.example/ubuntu:26.04"\n', "name 'https://hub/ubuntu:26.04'"),
        ('[images.ubuntu]\n"26.04" = "r.example/ubuntu:26.04"\n', "[images]: ubuntu must be a string"),
    ],
)
def test_a_bad_images_entry_is_refused_with_exit_2(tmp_path: Path, text: str, message: str) -> None:
    settings = write(tmp_path, text)
    result = subprocess.run(
        [*CLI, "cell", "2.14-py3.14-ubuntu26.04", "--mirror", str(settings)], capture_output=True, text=True
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    if "not a docker image reference" in result.stderr:
        assert "docs/mirrors.md" in result.stderr and '"ubuntu:26.04" = "registry.example/' in result.stderr
