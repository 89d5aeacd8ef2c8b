"""neuron_torch.packageset without Docker (a stand-in `docker` serving each image's SBOMs): the package set read from
an image's SBOMs, every difference named by kind and package (another version, gone, new), and `build image
--compare IMAGE` reading IMAGE before the build moves its tag, then passing on the same set and exiting 1 on another,
each difference listed. The real rebuild of the test cell's image is tests/integration/test_bom.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_torch import build as building
from neuron_torch.build import ImageBuild
from neuron_torch.errors import NeuronTorchError
from neuron_torch.packageset import check_same, differences, package_set
from tests.unit.neuron_torch.test_commands import Release, lock_text, release, write_lock  # noqa: F401

# docker run ... --entrypoint cat IMAGE /etc/neuron-torch/bom/FILE: $IMAGES/<IMAGE, / and : as _>/FILE
STAND_IN = """#!/bin/sh
for last; do :; done
image=$(eval echo "\\${$(($# - 1))}" | tr '/:' '__')
exec cat "$IMAGES/$image/${last##*/}"
"""
BEFORE = {"pip": {"torch": "2.13.0+cpu", "filelock": "4.3.1"}, "apt": {"bash": "5.2"}}


def write_image(root: Path, image: str, packages: dict[str, dict[str, str]]) -> None:
    folder = root / image.replace("/", "_").replace(":", "_")
    folder.mkdir(parents=True, exist_ok=True)
    for kind, name in (("pip", "sbom-venv.cdx.json"), ("apt", "sbom-apt.cdx.json")):
        components = [{"name": n, "version": v} for n, v in packages[kind].items()]
        (folder / name).write_text(json.dumps({"bomFormat": "CycloneDX", "components": components}))


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text(STAND_IN)
    script.chmod(0o755)
    monkeypatch.setenv("IMAGES", str(tmp_path / "images"))
    monkeypatch.setenv("DOCKER", str(script))
    return script


def test_the_package_set_is_what_the_sboms_list(docker: Path, tmp_path: Path) -> None:
    write_image(tmp_path / "images", "nt:a", BEFORE)
    assert package_set(str(docker), "nt:a") == BEFORE
    (tmp_path / "images" / "nt_a" / "sbom-apt.cdx.json").write_text("[]")
    with pytest.raises(NeuronTorchError, match=r"nt:a: /etc/neuron-torch/bom/sbom-apt.cdx.json is no CycloneDX"):
        package_set(str(docker), "nt:a")
    with pytest.raises(NeuronTorchError, match=r"nt:none holds no /etc/neuron-torch/bom/sbom-venv.cdx.json"):
        package_set(str(docker), "nt:none")


def test_each_difference_is_named_by_kind_and_package() -> None:
    after = {"pip": {"torch": "2.13.1+cpu", "sympy": "1.14.0"}, "apt": {"bash": "5.2"}}
    assert differences(BEFORE, BEFORE) == []
    assert differences(BEFORE, after) == [
        "pip filelock 4.3.1: gone",
        "pip sympy 1.14.0: new",
        "pip torch: 2.13.0+cpu -> 2.13.1+cpu",
    ]
    assert check_same([], BEFORE, "nt:a", "nt:b") == "same package set as nt:a: 2 pip and 1 apt packages"
    with pytest.raises(NeuronTorchError, match=r"nt:b does not have the package set of nt:a: 3 difference\(s\), e\.g\. "
                       r"pip filelock 4.3.1: gone \(each listed above\)") as error:  # fmt: skip
        check_same(differences(BEFORE, after), after, "nt:a", "nt:b")
    assert error.value.exit_code == 1


@pytest.mark.parametrize("same", [True, False])
def test_build_image_compare_reads_the_image_before_the_build_moves_its_tag(
    release: Release,  # noqa: F811 (test_commands' fixture)
    docker: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    same: bool,
) -> None:
    cell = release.matrix.cell(release.matrix.release.default_cell)
    write_lock(cell, lock_text(release.matrix, cell))
    write_image(tmp_path / "images", "nt:c", BEFORE)
    rebuilt = BEFORE if same else {**BEFORE, "apt": {"bash": "5.3"}}

    def run_image_build(build: ImageBuild) -> int:  # the rebuild moves nt:c to an image of `rebuilt`
        write_image(tmp_path / "images", "nt:c", rebuilt)
        return 0

    monkeypatch.setattr(building, "run_image_build", run_image_build)
    code, out, err = release.run("build", "image", "--cell", cell.id, "--tag", "nt:c", "--compare", "nt:c")
    if same:
        assert code == 0 and out.rstrip().endswith("same package set as nt:c: 2 pip and 1 apt packages"), err
    else:
        assert code == 1 and "differs from nt:c: apt bash: 5.2 -> 5.3\n" in out
        assert "nt:c does not have the package set of nt:c: 1 difference(s), e.g. apt bash: 5.2 -> 5.3" in err


def test_build_image_dry_run_says_the_compare_is_not_done(
    release: Release,  # noqa: F811 (test_commands' fixture)
    docker: Path,
) -> None:
    """A dry run reads and builds nothing, so it cannot compare; it says so instead of leaving --compare unmentioned."""
    cell = release.matrix.cell(release.matrix.release.default_cell)
    write_lock(cell, lock_text(release.matrix, cell))
    code, out, err = release.run("build", "image", "--cell", cell.id, "--dry-run", "--compare", "nt:absent")
    assert code == 0, err
    assert out.splitlines()[-1] == (
        "then: compare the built image's package set with nt:absent (not in a dry run: nothing is built)"
    )
