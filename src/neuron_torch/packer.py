"""Packer builds of a cell (`neuron-torch build ami`): stage the templates, `packer fmt -check` and `packer
validate` first, then build.

The templates live in `images/`. They are staged into `build/packer/templates/<matrix>/` so that a matrix other than
the release (the test bed's) brings its own rendered `cell.pkr.hcl`, and so that Packer 1.6.6 (which has no
`metadata_options`) can *validate* them with the marked IMDSv2 block left out. amazon-ebs builds need Packer >= 1.7.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuron_torch.build import require_lock
from neuron_torch.choices import PACKER_SOURCES
from neuron_torch.errors import EXIT_FAILED, EXIT_OK, NeuronTorchError
from neuron_torch.files import find_program
from neuron_torch.matrix import Cell, Matrix
from neuron_torch.render import write_rendered
from neuron_torch.render_packer import CELL_FILE, packer_dir, packer_files, var_file_path

MODERN_MARKERS = re.compile(r"\n[ \t]*# BEGIN packer>=1\.7\n.*?\n[ \t]*# END packer>=1\.7\n", re.DOTALL)


def packer_version(packer: str = "packer") -> tuple[int, ...]:
    if not shutil.which(packer):
        raise NeuronTorchError(f"{packer} is not on PATH: install Packer (>= 1.7 for AMIs; images/README.md)")
    out = subprocess.run([packer, "version"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    if not found:
        raise NeuronTorchError(f"cannot read the version of {packer} from {out!r}")
    return tuple(int(part) for part in found.groups())


def is_legacy(version: tuple[int, ...]) -> bool:
    """Packer before 1.7 (Debian's 1.6.6): no plugins, no metadata_options."""
    return version < (1, 7)


def stage_templates(matrix: Matrix, legacy: bool) -> Path:
    """A template folder for this matrix: images/*.pkr.hcl with the matrix's own cell-id declaration."""
    images = matrix.root / "images"
    staged = matrix.root / "build" / "packer" / "templates" / matrix.path.stem
    if staged.exists():
        shutil.rmtree(staged)
    staged.mkdir(parents=True)
    for template in sorted(images.glob("*.pkr.hcl")):
        text = template.read_text(encoding="utf-8")
        if legacy:
            text = MODERN_MARKERS.sub("\n", text)
        (staged / template.name).write_text(text, encoding="utf-8")
    (staged / CELL_FILE).write_text(packer_files(matrix)[packer_dir(matrix) / CELL_FILE], encoding="utf-8")
    return staged


def ensure_rendered(matrix: Matrix) -> None:
    """The release's files are committed (render --check guards them); other matrices render at build time."""
    if packer_dir(matrix) != matrix.root / "images":
        write_rendered(matrix)


def run(command: list[str], matrix: Matrix) -> int:
    print("+ " + " ".join(command), flush=True)
    return subprocess.run(command, cwd=matrix.root, check=False).returncode


def fmt_check(matrix: Matrix, packer: str = "packer") -> int:
    images = matrix.root / "images"
    folders = [images, images / "cells", images / "plugins", packer_dir(matrix), packer_dir(matrix) / "cells"]
    status = EXIT_OK
    for folder in dict.fromkeys(folders):
        if folder.is_dir() and run([packer, "fmt", "-check", "-diff", str(folder)], matrix) != 0:
            status = EXIT_FAILED
    return status


def var_args(matrix: Matrix, cell_id: str) -> list[str]:
    """-var-file for a cell; an id the matrix lacks still gets validated (and refused) through cell_id."""
    cells = {cell.id: cell for cell in matrix.cells}
    if cell_id in cells:
        return [f"-var-file={var_file_path(matrix, cells[cell_id])}", f"-var=repo_root={matrix.root}"]
    # Not a cell: borrow any cell's facts so that Packer reaches the cell_id validation and shows its reasons.
    any_cell = matrix.cells[0]
    return [f"-var-file={var_file_path(matrix, any_cell)}", f"-var=cell_id={cell_id}", f"-var=repo_root={matrix.root}"]


def validate(matrix: Matrix, cell_id: str, packer: str = "packer", extra: Sequence[str] = ()) -> int:
    legacy = is_legacy(packer_version(packer))
    ensure_rendered(matrix)
    staged = stage_templates(matrix, legacy)
    return run([packer, "validate", *var_args(matrix, cell_id), *extra, str(staged)], matrix)


# The Ansible controller's venv in the checkout: the templates' defaults for ansible_playbook_command and
# testinfra_python (images/variables.pkr.hcl); scripts/dev-setup.sh makes it.
CONTROLLER_VENV = ".venv-ansible"
CONTROLLER_SETUP = (
    "set up the controller as README's path A does (`python3.12 -m venv ~/.venvs/ansible && ~/.venvs/ansible/bin/pip "
    "install -r ansible/requirements-controller.txt`, then ~/.venvs/ansible/bin on PATH), or as "
    f"{CONTROLLER_VENV} in the checkout (scripts/dev-setup.sh --only ansible)"
)


def _given(extra: Sequence[str], name: str) -> str | None:
    """The value of the last `-var=NAME=...` in extra (what --var NAME=... gave), or None."""
    values = [arg.split("=", 2)[2] for arg in extra if arg.startswith(f"-var={name}=")]
    return values[-1] if values else None


def controller_vars(matrix: Matrix, extra: Sequence[str], testinfra: bool) -> list[str]:
    """The -var arguments that name the build's Ansible controller: none when --var names it or the checkout has
    its venv (the templates' defaults), else the ansible-playbook on PATH and the Python of its venv, where README's
    path A puts the controller. Checked before Packer runs: the playbook command is an executable file, and, when
    `testinfra` (a build that runs the testinfra suite), its Python imports testinfra, which would otherwise fail the
    build only after the instance was launched and provisioned."""
    venv = matrix.root / CONTROLLER_VENV / "bin"
    added: list[str] = []
    given = _given(extra, "ansible_playbook_command")
    if given is not None:
        playbook = matrix.root / given  # an absolute path stays itself
    elif (venv / "ansible-playbook").exists():
        playbook = venv / "ansible-playbook"
    else:
        found = find_program("ansible-playbook")
        if found is None:
            raise NeuronTorchError(
                f"the AMI build provisions with Ansible from this machine, and there is no ansible-playbook: neither "
                f"{venv / 'ansible-playbook'} nor one on PATH; {CONTROLLER_SETUP}"
            )
        playbook = Path(found)
        added.append(f"-var=ansible_playbook_command={playbook}")
    if not playbook.is_file() or not os.access(playbook, os.X_OK):
        what = f"--var ansible_playbook_command={given}" if given is not None else str(playbook)
        raise NeuronTorchError(f"{what}: no such file, or not executable; {CONTROLLER_SETUP}")
    python_given = _given(extra, "testinfra_python")
    if python_given is not None:
        python = matrix.root / python_given
    elif added:  # the venv of the ansible-playbook on PATH (a pipx link resolved to it)
        python = playbook.resolve().parent / "python"
        added.append(f"-var=testinfra_python={python}")
    else:
        python = venv / "python"
    if testinfra and _given(extra, "run_testinfra") != "false":
        try:
            imported = subprocess.run([str(python), "-c", "import testinfra"], capture_output=True, check=False)
            ok = imported.returncode == 0
        except OSError:
            ok = False
        if not ok:
            raise NeuronTorchError(
                f"the build runs the testinfra suite with {python}, and {python} cannot import testinfra: install "
                f"pytest-testinfra there ({python} -m pip install -r ansible/requirements-controller.txt), name "
                "another with --var testinfra_python=PATH, or skip the suite with --var run_testinfra=false"
            )
    return added


# What `build ami --dry-run` shows, evaluated by Packer from the templates themselves (`packer console`).
IDENTITY = (
    "jsonencode({name = local.ami_name, tags = local.tags, deprecate_at = local.deprecate_at, "
    "deprecate_after = var.deprecate_after, ssm_parameters = local.ssm_parameters, ssm_publish = var.ssm_publish, "
    "ami_users = var.ami_users, ami_org_arns = var.ami_org_arns})"
)


def release_vars(matrix: Matrix, lock_path: Path | None) -> list[str]:
    """The commit and the lock's sha256 the AMI is tagged with (`unknown` outside a git checkout, `none` for a dry
    run of a cell without a lock)."""
    from neuron_torch.gitrev import git_revision

    try:
        revision = git_revision(matrix.root, allow_dirty=True)
    except NeuronTorchError:
        revision = "unknown"
    lock_sha256 = hashlib.sha256(lock_path.read_bytes()).hexdigest() if lock_path and lock_path.is_file() else "none"
    return [f"-var=git_sha={revision}", f"-var=lock_sha256={lock_sha256}"]


def identity(
    matrix: Matrix, cell: Cell, packer: str = "packer", extra: Sequence[str] = (), lock: Path | None = None
) -> dict[str, Any]:
    """The AMI's name, tags, deprecation time, SSM parameters and sharing for this cell, as Packer evaluates them."""
    path = lock or cell.lock_path
    lock_path = require_lock(matrix, cell, lock) if path.exists() else None
    legacy = is_legacy(packer_version(packer))
    ensure_rendered(matrix)
    staged = stage_templates(matrix, legacy)
    extra = [*controller_vars(matrix, extra, testinfra=False), *extra]  # validate runs `ansible-playbook --version`
    settings = [*var_args(matrix, cell.id), *release_vars(matrix, lock_path), *extra, str(staged)]
    # Validated first, as a build is: `packer console` evaluates without the variables' validation rules.
    checked = subprocess.run([packer, "validate", *settings], capture_output=True, text=True, cwd=matrix.root)
    if checked.returncode != 0:
        problem = " ".join((checked.stdout + checked.stderr).split())[:600]
        raise NeuronTorchError(f"packer validate refused the build of {cell.id}: {problem}")
    command = [packer, "console", *settings]
    result = subprocess.run(command, input=IDENTITY + "\n", capture_output=True, text=True, cwd=matrix.root)
    found = next((line for line in result.stdout.splitlines() if line.startswith("{")), None)
    if result.returncode != 0 or found is None:
        problem = " ".join((result.stdout + result.stderr).split())[-400:]
        raise NeuronTorchError(f"packer console could not evaluate the AMI's identity for {cell.id}: {problem}")
    values: dict[str, Any] = json.loads(found)
    values["lock"] = str(lock_path) if lock_path else None
    return values


def describe(values: dict[str, Any]) -> str:
    """`build ami --dry-run`'s report."""
    lines = [f"AMI name:     {values['name']}", f"deprecate at: {values['deprecate_at']} "
             f"(deprecate_after = {values['deprecate_after']})", "tags:"]  # fmt: skip
    lines += [f"  {key} = {value}" for key, value in sorted(values["tags"].items())]
    written = "written after the build" if values["ssm_publish"] else "printed, not written: -var ssm_publish=true"
    lines.append(f"SSM parameters (the AMI id; {written}):")
    lines += [f"  {name}" for name in values["ssm_parameters"]]
    users, orgs = values["ami_users"] or [], values["ami_org_arns"] or []
    shared = f"accounts {', '.join(users) or 'none'}; organizations {', '.join(orgs) or 'none'}"
    lines.append(f"shared with: {shared}" if users or orgs else "shared with: nobody (a private AMI)")
    if values["lock"] is None:
        lines.append("lock: none yet (the lock-sha256 tag is filled in by the build, which needs the lock)")
    return "\n".join(lines)


def prepare_build(
    matrix: Matrix,
    cell_id: str,
    only: str | None = None,
    packer: str = "packer",
    extra: Sequence[str] = (),
    lock: Path | None = None,
) -> list[str]:
    """Everything before `packer build` (cell, lock gate, fmt -check, validate, staged templates); its command.

    Several cells of one matrix may be prepared one after another and their commands then run side by side: each
    build writes only its own build/packer/<cell>/ and tags its own image.
    """
    cell = matrix.cell(cell_id)  # an unsupported cell stops here with the matrix's reason
    lock_path = require_lock(matrix, cell, lock)  # the lock gate, before any work
    if lock is not None:  # the template reads ${repo_root}/${lock_file}
        extra = [*extra, f"-var=lock_file={os.path.relpath(lock_path.resolve(), matrix.root)}"]
    # the AMI's git-sha and lock-sha256 tags, and the Ansible controller (checked before any Packer command)
    extra = [*release_vars(matrix, lock_path), *controller_vars(matrix, extra, testinfra=True), *extra]
    version = packer_version(packer)
    if only != "docker" and is_legacy(version):
        raise NeuronTorchError(
            f"Packer {'.'.join(map(str, version))} cannot build AMIs with IMDSv2 required (no metadata_options): "
            "use Packer >= 1.7 with the plugins of images/plugins/required-plugins.pkr.hcl (`packer init "
            "images/plugins`), or build only the local image: --only docker"
        )
    if fmt_check(matrix, packer) != 0:
        raise NeuronTorchError("packer fmt -check failed (diff above): run `packer fmt images images/cells`")
    if validate(matrix, cell.id, packer, extra) != 0:
        raise NeuronTorchError(f"packer validate failed for {cell.id} (errors above)")
    staged = matrix.root / "build" / "packer" / "templates" / matrix.path.stem
    selection = [f"-only={PACKER_SOURCES[only]}"] if only else []
    return [packer, "build", *selection, *var_args(matrix, cell.id), *extra, str(staged)]


def build(matrix: Matrix, cell_id: str, **options: Any) -> int:
    """`packer build` of one cell, after everything prepare_build checks (its keyword options: only, packer, extra,
    lock)."""
    return run(prepare_build(matrix, cell_id, **options), matrix)
