"""Unit tests of neuron_torch.render: the constraint files and cell records each cell gets, the README section
replacement, the instance facts for verify-device, and render's staleness check and writer on a copy of the
release."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from neuron_cell import outputs
from neuron_torch import files, render
from neuron_torch.cellinfo import caveats
from neuron_torch.errors import NeuronTorchError
from neuron_torch.files import replace_text
from neuron_torch.generated import banner
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT


def test_constraint_files_pin_every_cell_with_its_caveats(matrix: Matrix) -> None:
    files = render.constraint_files(matrix)
    assert set(files) == {cell.constraints_path for cell in matrix.cells}
    for cell in matrix.cells:
        lines = files[cell.constraints_path].splitlines()
        assert lines[0] == f"# {banner(matrix)}" and cell.id in lines[1]
        assert [line for line in lines if not line.startswith("#")] == [f"{n}=={v}" for n, v in cell.pins.items()]
        assert [line.removeprefix("# caveat: ") for line in lines if line.startswith("# caveat: ")] == caveats(
            matrix, cell
        )


def test_cell_files_are_the_records_with_the_banner(matrix: Matrix) -> None:
    files = render.cell_files(matrix)
    assert set(files) == {cell.record_path for cell in matrix.cells}
    for cell in matrix.cells:
        record = json.loads(files[cell.record_path])
        assert record["_generated"] == banner(matrix)
        assert (record["id"], record["torch"], record["torch_neuronx"]) == (
            cell.id,
            cell.family.torch_pin,
            cell.family.torch_neuronx,
        )


def test_replace_section_rewrites_only_between_the_markers(matrix: Matrix) -> None:
    text = "before\n<!-- BEGIN table: old banner -->\nold body\n<!-- END table -->\nafter\n"
    replaced = render.replace_section(text, "table", "new body", matrix)
    assert replaced == f"before\n<!-- BEGIN table: {banner(matrix)} -->\nnew body\n<!-- END table -->\nafter\n"
    assert render.replace_section(replaced, "table", "new body", matrix) == replaced
    with pytest.raises(
        NeuronTorchError, match=re.escape("README.md has no '<!-- BEGIN other: ... -->' / '<!-- END other -->'")
    ):
        render.replace_section(text, "other", "x", matrix)


def test_the_smoke_instance_facts_hold_the_documented_counts(matrix: Matrix) -> None:
    [(path, text)] = render.smoke_instance_facts(matrix).items()
    assert path == matrix.root / "smoke_tests" / "neuron_smoke" / "neuron_instances.json"
    facts = json.loads(text)
    documented = {i.type: i.logical_devices for i in matrix.instances.values() if i.logical_devices}
    assert facts["logical_devices"] == documented and facts["release"] == matrix.release.name
    assert set(facts["undocumented"]) == set(matrix.instances) - set(documented)


def test_a_test_release_renders_no_file_the_checkout_shares(repo: Path) -> None:
    test_matrix = load_matrix(repo / "constraints" / "test-matrix.toml")
    assert render.readme_sections(test_matrix) == {} and render.smoke_instance_facts(test_matrix) == {}
    paths = render.rendered(test_matrix)
    assert all(test_matrix.generated_dir in path.parents for path in paths)


def test_render_finds_and_rewrites_stale_and_orphaned_files(release_copy: Path) -> None:
    release = load_matrix(release_copy / "constraints" / "matrix.toml")
    assert render.stale_files(release) == []
    assert render.write_rendered(release) == []
    edited = release.cells[0].constraints_path
    original = edited.read_text()
    edited.write_text(original + "extra==1\n")
    orphan = release.generated_dir / "9.9-py3.99-gone.txt"
    orphan.write_text("left over\n")
    missing = release.cells[-1].record_path
    missing.unlink()
    readme = release.root / "README.md"
    readme.write_text(
        readme.read_text().replace("<!-- END support-matrix -->", "hand-edited\n<!-- END support-matrix -->")
    )
    assert set(render.stale_files(release)) == {edited, orphan, missing, readme}
    assert set(render.write_rendered(release)) == {edited, orphan, missing, readme}
    assert edited.read_text() == original and missing.is_file() and not orphan.exists()
    assert readme.read_text() == (REPO_ROOT / "README.md").read_text()
    assert render.stale_files(release) == [] and not list(release.generated_dir.glob(".*.tmp"))


def test_render_leaves_a_file_another_render_is_writing(release_copy: Path) -> None:
    """Two processes render the same release at once (test workers): one's staged sibling is not the other's orphan
    (seen in CI: removed between its write and its rename, the first render failed with FileNotFoundError)."""
    release = load_matrix(release_copy / "constraints" / "matrix.toml")
    render.write_rendered(release)
    target = next(p for p in sorted(release.generated_dir.iterdir()) if p.suffix == ".txt")
    staged = target.with_name(f".{target.name}.99999{outputs.STAGED_SUFFIX}")
    staged.write_text("being written by another render\n")
    assert render.stale_files(release) == [] and render.write_rendered(release) == [] and staged.is_file()
    replace_text(target, target.read_text())  # this process's own staging, by the same name scheme
    assert files.is_staged(staged) and not list(release.generated_dir.glob(f".{target.name}.{os.getpid()}*"))


def test_readme_sections_need_the_readme(release_copy: Path) -> None:
    (release_copy / "README.md").unlink()
    release = load_matrix(release_copy / "constraints" / "matrix.toml")
    assert render.readme_sections(release) == {}
    shutil.rmtree(release.generated_dir)
    written = render.write_rendered(release)
    assert {cell.record_path for cell in release.cells} <= set(written)
