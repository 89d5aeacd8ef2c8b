from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_torch.cli import main
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT

CELL_FIELDS = {
    "id", "family", "python", "ubuntu", "codename", "torch", "torch_neuronx", "neuronx_cc", "nki",
    "wheels_available", "constraints", "lock",
}  # fmt: skip


# The release these tests run against: expected versions, cells and names come from it, so a bump edits no test.
RELEASE = load_matrix(REPO_ROOT / "constraints" / "matrix.toml")
CELLS = [cell.id for cell in RELEASE.cells]
DEFAULT = RELEASE.release.default_cell
NKI = RELEASE.packages["nki"]
NO_WHEELS = next(os for os in RELEASE.os.values() if not os.wheels_available)


_PY = RELEASE.cell(DEFAULT).python
_OS = RELEASE.cell(DEFAULT).os.id
_FAMILY = next(iter(RELEASE.families.values()))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_matrix_json_lists_exactly_the_twelve_cells(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "matrix", "--json")
    cells = json.loads(out)
    assert code == 0
    assert [cell["id"] for cell in cells] == CELLS
    for cell in cells:
        assert set(cell) >= CELL_FIELDS
        assert cell["id"] == f"{cell['family']}-py{cell['python']}-ubuntu{cell['ubuntu']}"
        assert cell["constraints"] == f"constraints/generated/{cell['id']}.txt"
    for cell, record in zip(RELEASE.cells, cells, strict=True):
        assert (record["codename"], record["wheels_available"]) == (cell.os.codename, cell.os.wheels_available)
        assert (record["neuronx_cc"], record["nki"]) == (cell.pins["neuronx-cc"], NKI)
    assert {record["wheels_available"] for record in cells} == {True, False}


def test_matrix_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "matrix")
    assert code == 0
    families = tuple(f"{family}-" for family in RELEASE.families)
    assert sum(1 for line in out.splitlines() if line.startswith(families)) == len(CELLS)
    assert f"{len(CELLS)} cells of {RELEASE.release.name}" in out


def test_cell_prints_pins_route_and_the_wheel_gap(capsys: pytest.CaptureFixture[str]) -> None:
    cell = next(c for c in RELEASE.cells if not c.os.wheels_available and c.python_route == "uv-standalone")
    code, out, _ = run(capsys, "cell", cell.id)
    assert code == 0
    assert f"torch-neuronx=={cell.family.torch_neuronx}" in out
    host = RELEASE.apt.scoped("host")
    assert host and all(f"{package.apt_pin}  (host)" in out for package in host)
    assert f"uv python install {cell.python}" in out
    assert cell.os.wheels_note in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["cell", DEFAULT.replace(f"-py{_PY}-", "-py3.11-")], f"supported: {', '.join(RELEASE.pythons)}"),
        (["cell", f"2.12-py{_PY}-{_OS}"], f"{_FAMILY.name} (torch {_FAMILY.torch}"),
        (["cell", DEFAULT.replace(_OS, "ubuntu22.04")], f"Supported: {', '.join(RELEASE.os)}"),
        (["instance", "trn1.2xlarge"], "Trn1 is not listed"),
        (["instance", "p5.48xlarge"], "supported families: trn2, trn3"),
        (["lock", "--cell", DEFAULT, "--index", "nope"], "--index takes NAME=URL"),
        (["lock", "--cell", DEFAULT, "--index", "quay=http://x"], "unknown index name(s) quay"),
    ],
)
def test_bad_input_exits_2_naming_the_supported_values(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert expected.lower() in err.lower()
    assert out == ""


def test_missing_matrix_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--matrix", str(tmp_path / "none.toml"), "matrix")
    assert code == 2
    assert "no such matrix file" in err


def test_render_check_names_the_stale_file(capsys: pytest.CaptureFixture[str], release_copy: Path) -> None:
    matrix = str(release_copy / "constraints" / "matrix.toml")
    assert run(capsys, "--matrix", matrix, "render", "--check")[0] == 0
    edited = release_copy / "constraints" / "generated" / f"{DEFAULT}.txt"
    edited.write_text(edited.read_text().replace(f"nki=={NKI}", "nki==0.0.1"))
    orphan = release_copy / "constraints" / "generated" / "2.12-py3.12-ubuntu26.04.txt"
    orphan.write_text("torch==2.12.0\n")
    code, _, err = run(capsys, "--matrix", matrix, "render", "--check")
    assert code == 1
    assert f"constraints/generated/{DEFAULT}.txt" in err
    assert "constraints/generated/2.12-py3.12-ubuntu26.04.txt" in err
    assert "2 generated file(s) are stale" in err
    assert run(capsys, "--matrix", matrix, "check")[0] == 1
    assert run(capsys, "--matrix", matrix, "render")[0] == 0
    assert not orphan.exists()
    assert run(capsys, "--matrix", matrix, "render", "--check")[0] == 0


def test_render_follows_the_matrix(capsys: pytest.CaptureFixture[str], release_copy: Path) -> None:
    matrix_file = release_copy / "constraints" / "matrix.toml"
    matrix_file.write_text(matrix_file.read_text().replace(f'nki = "{NKI}"', f'nki = "{NKI}.1"'))
    code, _, err = run(capsys, "--matrix", str(matrix_file), "render", "--check")
    assert code == 1
    stale = {line.removeprefix("stale: ") for line in err.splitlines() if line.startswith("stale: ")}
    assert {f"constraints/generated/{cell}.txt" for cell in CELLS} <= stale
    assert {f"constraints/generated/{cell}.json" for cell in CELLS} <= stale
    assert {"README.md", "ansible/vars/release.yml"} <= stale
    assert "smoke_tests/neuron_smoke/neuron_instances.json" not in stale  # it holds no nki version
    run(capsys, "--matrix", str(matrix_file), "render")
    assert f"nki=={NKI}.1" in (release_copy / f"constraints/generated/{CELLS[0]}.txt").read_text()
    assert f"| {NKI}.1 |" in (release_copy / "README.md").read_text()


def test_generated_files_carry_the_header(repo: Path) -> None:
    for path in (p for p in (repo / "constraints" / "generated").rglob("*") if p.is_file()):
        assert "Generated by `neuron-torch render`" in path.read_text().splitlines()[1 if path.suffix == ".json" else 0]


def test_manifest_reports_no_native_torch_neuronx_in_2_32(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    manifest = repo / "constraints" / "reference" / "n2-manifest-2.32.0.json"  # AWS's real manifest, vendored
    assert run(capsys, "manifest", "--release", "2.32.0") == run(capsys, "manifest", str(manifest))
    code, out, _ = run(capsys, "manifest", str(manifest), "--release", "2.32.0")
    assert code == 0
    for family in RELEASE.families:
        assert f"2.32.0 holds no native torch-neuronx {family}" in out
    assert "libtorch_neuronx_lite 2.12.0.1.0.1284" in out
    assert f"neuronx-cc {RELEASE.packages['neuronx-cc']}" in out and "2.32.0 pins 2.27.5334.0" in out


def test_entry_point_is_installed() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "neuron-torch"), "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert result.stdout.startswith("neuron-torch ")


def test_mirror_settings_reach_the_install_route_with_credentials_redacted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = tmp_path / "mirror.toml"
    mirror.write_text(
        '[apt]\nurl = "https://mirror.example/neuron-apt"\n'
        '[indexes]\nneuron = "https://mirror.example/neuron/simple/"\n'
        '[proxy]\nhttps = "http://alice:s3cret@proxy.example:3128"\n'
    )
    monkeypatch.setenv("NEURON_TORCH_MIRROR", str(mirror))
    code, out, err = run(capsys, "cell", DEFAULT)
    assert code == 0
    codename = RELEASE.cell(DEFAULT).os.codename
    assert f"deb [signed-by=/etc/apt/keyrings/neuron.gpg] https://mirror.example/neuron-apt {codename} main" in out
    assert "--extra-index-url https://mirror.example/neuron/simple/" in out
    assert "alice:***@proxy.example" in err
    assert "s3cret" not in out + err
    # render and check always describe the release itself, never a user's mirror
    assert run(capsys, "render", "--check")[0] == 0


def test_ci_workflow_matrix_is_rendered_from_the_release(repo: Path, matrix: Matrix) -> None:
    text = (repo / ".github" / "workflows" / "cells.yml").read_text()
    matrices = [
        json.loads(line.split("cell:", 1)[1]) for line in text.splitlines() if line.strip().startswith("cell: [")
    ]
    assert matrices == [CELLS, [cell.id for cell in matrix.cells if cell.os.wheels_available]]
    assert f"Not built: {NO_WHEELS.id}: {NO_WHEELS.wheels_note}" in text


def test_edited_vendored_manifest_is_refused(capsys: pytest.CaptureFixture[str], release_copy: Path) -> None:
    matrix = str(release_copy / "constraints" / "matrix.toml")
    vendored = release_copy / "constraints" / "reference" / "n2-manifest-2.32.0.json"
    vendored.write_text(vendored.read_text().replace('"2.27.5334.0"', f'"{RELEASE.packages["neuronx-cc"]}"'))
    code, _, err = run(capsys, "--matrix", matrix, "manifest")
    assert code == 1
    assert "n2-manifest-2.32.0.json: sha256" in err and "the vendored manifest changed" in err
    assert run(capsys, "--matrix", matrix, "check")[0] == 1


def test_a_closed_pipe_stops_quietly() -> None:
    # `neuron-torch matrix | head -0`: the reader is gone before the first line; no traceback, no "Exception ignored".
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.run(
        [sys.executable, "-m", "neuron_torch.cli", "cell", DEFAULT],
        stdout=write, stderr=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    os.close(write)
    assert proc.returncode == 1
    assert proc.stderr == ""


def test_help_lists_the_commands_in_a_users_order(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.findall(r"^    (\w+) ", capsys.readouterr().out, re.MULTILINE)
    assert listed == ["matrix", "cell", "instance", "lock", "check", "build", "publish", "bundle", "manifest", "render"]
