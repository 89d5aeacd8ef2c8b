"""Unit tests of neuron_torch.packer without Packer: the version check (a stand-in `packer` script), the staged
template folder, the -var-file arguments, and prepare_build's command line and refusals (with `run`, the lock gate
and the version stubbed)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from neuron_torch import packer
from neuron_torch.choices import PACKER_SOURCES
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.render_packer import CELL_FILE, packer_dir, packer_files, var_file_path
from tests import REPO_ROOT


def _stand_in(tmp_path: Path, output: str) -> str:
    script = tmp_path / "packer"
    script.write_text(f"#!/bin/sh\necho '{output}'\n")
    script.chmod(0o755)
    return str(script)


def test_packer_version_reads_the_first_version_number(tmp_path: Path) -> None:
    assert packer.packer_version(_stand_in(tmp_path, "Packer v1.6.6")) == (1, 6, 6)
    assert packer.packer_version(_stand_in(tmp_path, "Packer v1.11.2\nYour version is out of date")) == (1, 11, 2)


def test_packer_version_refuses_a_missing_or_unreadable_packer(tmp_path: Path) -> None:
    with pytest.raises(NeuronTorchError, match="no-such-packer is not on PATH: install Packer"):
        packer.packer_version("no-such-packer")
    with pytest.raises(NeuronTorchError, match=r"cannot read the version of .*'no version here"):
        packer.packer_version(_stand_in(tmp_path, "no version here"))


def test_legacy_is_before_1_7() -> None:
    assert packer.is_legacy((1, 6, 6)) and packer.is_legacy((0, 12, 0))
    assert not packer.is_legacy((1, 7, 0)) and not packer.is_legacy((1, 10, 3))


@pytest.fixture
def release(release_copy: Path) -> Matrix:
    """The release in a copy of the checkout, with the Packer templates beside its rendered files."""
    for template in (REPO_ROOT / "images").glob("*.pkr.hcl"):
        if not (release_copy / "images" / template.name).exists():
            shutil.copy(template, release_copy / "images" / template.name)
    return load_matrix(release_copy / "constraints" / "matrix.toml")


def test_stage_templates_drops_the_marked_block_for_legacy_packer_only(release: Matrix) -> None:
    images = release.root / "images"
    marked = [p.name for p in images.glob("*.pkr.hcl") if "# BEGIN packer>=1.7" in p.read_text()]
    assert marked, "a template with a packer>=1.7 block"
    stale = release.root / "build" / "packer" / "templates" / release.path.stem / "stale.pkr.hcl"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    staged = packer.stage_templates(release, legacy=True)
    assert staged == stale.parent and not stale.exists()
    assert sorted(p.name for p in staged.iterdir()) == sorted({*(p.name for p in images.glob("*.pkr.hcl")), CELL_FILE})
    assert (staged / CELL_FILE).read_text() == packer_files(release)[packer_dir(release) / CELL_FILE]
    for name in marked:
        legacy_text = (staged / name).read_text()
        assert "# BEGIN packer>=1.7" not in legacy_text and "metadata_options {" not in legacy_text
    modern = packer.stage_templates(release, legacy=False)
    for template in images.glob("*.pkr.hcl"):
        if template.name != CELL_FILE:
            assert (modern / template.name).read_text() == template.read_text()


def test_var_args_name_the_cell_file_or_pass_an_unknown_id_on_for_validation(matrix: Matrix) -> None:
    cell = matrix.cells[-1]
    assert packer.var_args(matrix, cell.id) == [
        f"-var-file={var_file_path(matrix, cell)}",
        f"-var=repo_root={matrix.root}",
    ]
    unknown = packer.var_args(matrix, "9.9-py3.99-beos")
    assert unknown[0] == f"-var-file={var_file_path(matrix, matrix.cells[0])}"
    assert "-var=cell_id=9.9-py3.99-beos" in unknown and f"-var=repo_root={matrix.root}" in unknown


def test_ensure_rendered_writes_a_test_release_only(release: Matrix, tmp_path: Path) -> None:
    before = {p: p.read_bytes() for p in release.root.rglob("*") if p.is_file()}
    packer.ensure_rendered(release)  # the release's own files are committed: nothing written
    assert {p: p.read_bytes() for p in release.root.rglob("*") if p.is_file()} == before
    (tmp_path / "bed" / "constraints").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "constraints" / "test-matrix.toml", tmp_path / "bed" / "constraints")
    bed = load_matrix(tmp_path / "bed" / "constraints" / "test-matrix.toml")
    packer.ensure_rendered(bed)
    for cell in bed.cells:
        assert var_file_path(bed, cell).is_file() and cell.record_path.is_file()


class Recorder:
    """Stands in for packer.run: records each command and answers with the status given for its subcommand."""

    def __init__(self, status: dict[str, int] | None = None) -> None:
        self.commands: list[list[str]] = []
        self.status = status or {}

    def __call__(self, command: list[str], matrix: Matrix) -> int:
        self.commands.append(command)
        return self.status.get(command[1], 0)


def _stub(monkeypatch: pytest.MonkeyPatch, version: tuple[int, ...], status: dict[str, int] | None = None) -> Recorder:
    recorder = Recorder(status)
    monkeypatch.setattr(packer, "run", recorder)
    monkeypatch.setattr(packer, "packer_version", lambda packer_exe="packer": version)
    monkeypatch.setattr(packer, "require_lock", lambda matrix, cell, lock: lock or cell.lock_path)
    monkeypatch.setattr(packer, "controller_vars", lambda matrix, extra, testinfra: [])  # its own tests below
    return recorder


def test_prepare_build_checks_then_returns_the_build_command(release: Matrix, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _stub(monkeypatch, (1, 11, 0))
    cell = release.cell(release.release.default_cell)
    lock = release.root / "my.lock"
    command = packer.prepare_build(release, cell.id, only="docker", extra=["-var=x=1"], lock=lock)
    staged = release.root / "build" / "packer" / "templates" / release.path.stem
    assert command == [
        "packer",
        "build",
        f"-only={PACKER_SOURCES['docker']}",
        *packer.var_args(release, cell.id),
        *packer.release_vars(release, lock),  # the git-sha and lock-sha256 tags
        "-var=x=1",
        "-var=lock_file=my.lock",
        str(staged),
    ]
    assert {c[1] for c in recorder.commands} == {"fmt", "validate"}
    assert all(c[2:4] == ["-check", "-diff"] for c in recorder.commands if c[1] == "fmt")
    validate = next(c for c in recorder.commands if c[1] == "validate")
    assert validate[-1] == str(staged) and "-var=lock_file=my.lock" in validate


def test_prepare_build_refuses_amis_on_legacy_packer_and_failed_checks(
    release: Matrix, monkeypatch: pytest.MonkeyPatch
) -> None:
    cell_id = release.release.default_cell
    _stub(monkeypatch, (1, 6, 6))
    with pytest.raises(NeuronTorchError, match=r"Packer 1\.6\.6 cannot build AMIs with IMDSv2 required"):
        packer.prepare_build(release, cell_id, only="amazon-ebs")
    assert packer.prepare_build(release, cell_id, only="docker")[1] == "build"  # the local image still builds
    _stub(monkeypatch, (1, 11, 0), {"fmt": 3})
    with pytest.raises(NeuronTorchError, match="packer fmt -check failed"):
        packer.prepare_build(release, cell_id)
    _stub(monkeypatch, (1, 11, 0), {"validate": 1})
    with pytest.raises(NeuronTorchError, match=f"packer validate failed for {cell_id}"):
        packer.prepare_build(release, cell_id)


def test_prepare_build_refuses_an_unsupported_cell_before_any_command(
    matrix: Matrix, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _stub(monkeypatch, (1, 11, 0))
    python = next(iter(matrix.unsupported.python))
    cell = matrix.cells[0]
    with pytest.raises(
        NeuronTorchError, match=f"Python {python} is not supported: {matrix.unsupported.python[python]}"
    ):
        packer.prepare_build(matrix, f"{cell.family.name}-py{python}-{cell.os.id}")
    assert recorder.commands == []


def test_the_dry_run_report_names_the_ssm_parameters_and_the_sharing() -> None:
    values = {
        "name": "neuron-torch-r-c-20261202", "deprecate_at": "2028-12-01T00:00:00Z", "deprecate_after": "17520h",
        "tags": {"neuron-torch:cell": "c", "Name": "neuron-torch-r-c-20261202"}, "ssm_publish": False,
        "ssm_parameters": ["/neuron-torch/r/c/image_id"], "ami_users": [], "ami_org_arns": None, "lock": None,
    }  # fmt: skip
    report = packer.describe(values)
    assert report.splitlines()[:3] == [
        "AMI name:     neuron-torch-r-c-20261202",
        "deprecate at: 2028-12-01T00:00:00Z (deprecate_after = 17520h)",
        "tags:",
    ]
    assert "  Name = neuron-torch-r-c-20261202\n  neuron-torch:cell = c\n" in report  # sorted
    assert "printed, not written: -var ssm_publish=true):\n  /neuron-torch/r/c/image_id\n" in report
    assert "shared with: nobody (a private AMI)" in report and "lock: none yet" in report
    shared = packer.describe({**values, "ssm_publish": True, "ami_users": ["123456789012"], "lock": "l.txt"})
    assert "written after the build" in shared and "accounts 123456789012; organizations none" in shared
    assert "lock: none" not in shared


def test_release_vars_tag_the_commit_and_the_lock(release: Matrix, tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("x==1\n")
    git_sha, lock_sha = packer.release_vars(release, lock)
    assert lock_sha == "-var=lock_sha256=" + hashlib.sha256(b"x==1\n").hexdigest()
    assert git_sha == "-var=git_sha=unknown", "the copied release is no git checkout"
    assert packer.release_vars(release, None)[1] == "-var=lock_sha256=none"


def _tool(path: Path, body: str = "exit 0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_the_controller_is_the_checkouts_venv_else_the_ansible_on_path(
    release: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # README's path A puts the controller's venv on PATH; the templates defaulted to the checkout's .venv-ansible
    # only, and `build ami` failed in packer validate with "fork/exec .venv-ansible/bin/ansible-playbook"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(NeuronTorchError, match=r"no ansible-playbook: neither .*\.venv-ansible/bin/ansible-playbook "
                                               r"nor one on PATH.*requirements-controller\.txt"):  # fmt: skip
        packer.controller_vars(release, [], testinfra=False)
    venv = tmp_path / "venvs" / "ansible" / "bin"
    playbook, python = _tool(venv / "ansible-playbook"), _tool(venv / "python")
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}:{venv}")
    assert packer.controller_vars(release, [], testinfra=True) == [
        f"-var=ansible_playbook_command={playbook}",
        f"-var=testinfra_python={python}",
    ]
    other = tmp_path / "other" / "bin"
    given = [f"-var=ansible_playbook_command={_tool(other / 'ap')}", f"-var=testinfra_python={_tool(other / 'py')}"]
    assert packer.controller_vars(release, given, testinfra=True) == []  # what --var names is kept
    with pytest.raises(NeuronTorchError, match="--var ansible_playbook_command=/nonexistent/ap: no such file"):
        packer.controller_vars(release, ["-var=ansible_playbook_command=/nonexistent/ap"], testinfra=False)
    _tool(release.root / ".venv-ansible" / "bin" / "ansible-playbook")
    _tool(release.root / ".venv-ansible" / "bin" / "python")
    assert packer.controller_vars(release, [], testinfra=True) == []  # the templates' default


def test_the_controllers_python_must_import_testinfra_when_the_build_runs_it(
    release: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / "venv" / "bin"
    _tool(venv / "ansible-playbook")
    python = _tool(venv / "python", "exit 1")  # `python -c 'import testinfra'` fails
    monkeypatch.setenv("PATH", str(venv))
    with pytest.raises(NeuronTorchError, match=f"{python} cannot import testinfra.*--var run_testinfra=false"):
        packer.controller_vars(release, [], testinfra=True)
    assert packer.controller_vars(release, ["-var=run_testinfra=false"], testinfra=True)[0].startswith("-var=ansible")
    assert len(packer.controller_vars(release, [], testinfra=False)) == 2  # a dry run validates, runs no testinfra
