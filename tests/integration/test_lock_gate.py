"""The one lock gate: every consumer of a lock (build image, build ami, bundle, the Ansible provisioning) refuses a
lock for another cell, an edited or unsealed one, or one holding a CUDA torch, the PyPI placeholder or nvidia-*,
before any work, naming the problem and the fix."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from neuron_torch.cli import main
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT
from tests.testbed.fixture_indexes import build_release_indexes

REPO = REPO_ROOT
# Two cells of the release's latest family on an OS with wheels, derived from the matrix (a bump edits no test).
RELEASE = load_matrix(REPO / "constraints" / "matrix.toml")
LAST = list(RELEASE.families.values())[-1]
WHEELS = next(system.id for system in RELEASE.os.values() if system.wheels_available)
CELL = f"{LAST.name}-py{LAST.pythons[1]}-{WHEELS}"
OTHER = f"{LAST.name}-py{LAST.pythons[-1]}-{WHEELS}"
CUDA_TORCH = LAST.torch_pin.split("+")[0]  # the same torch version without the +cpu label
FAKE_HASH = "0" * 64


@pytest.fixture(scope="module")
def good_locks(tmp_path_factory: pytest.TempPathFactory, matrix: Matrix) -> dict[str, str]:
    """The sealed locks of two cells of the real release, resolved against local fixture indexes."""
    root = tmp_path_factory.mktemp("gate")
    indexes = build_release_indexes(matrix, root / "indexes")
    texts = {}
    for cell in (CELL, OTHER):
        out = root / f"{cell}.txt"
        args = [arg for name, url in indexes.items() for arg in ("--index", f"{name}={url}")]
        assert main(["lock", "--cell", cell, *args, "--out", str(out)]) == 0
        texts[cell] = out.read_text()
    return texts


def _edit_hash(text: str) -> str:
    digest = re.search(r"^nki==\S+ \\\n\s+--hash=sha256:([0-9a-f]{64})", text, re.MULTILINE)
    assert digest is not None
    return text.replace(digest[1], FAKE_HASH)


BAD_LOCKS: dict[str, tuple[Callable[[dict[str, str]], str], str]] = {
    "another cell": (lambda locks: locks[OTHER], f"the lock says it is for cell '{OTHER}', not {CELL}"),
    "an edited hash": (lambda locks: _edit_hash(locks[CELL]), "its hashes do not match the lock's seal"),
    "nvidia appended, unsealed": (
        lambda locks: locks[CELL] + f"nvidia-cublas-cu12==12.4.5.8 --hash=sha256:{FAKE_HASH}\n",
        "nvidia-cublas-cu12 12.4.5.8: forbidden",
    ),
    "a CUDA torch": (
        lambda locks: locks[CELL].replace(f"torch=={LAST.torch_pin}", f"torch=={CUDA_TORCH}"),
        f"torch {CUDA_TORCH} is not the CPU build (+cpu)",
    ),
    "the PyPI placeholder": (
        lambda locks: re.sub(r"torch-neuronx==\S+", "torch-neuronx==1.0", locks[CELL]),
        "torch-neuronx 1.0: forbidden: the PyPI placeholder",
    ),
    "a pip-compile lock, not sealed": (
        lambda locks: re.sub(r"^# .*\n", "", locks[CELL], flags=re.MULTILINE),
        "not sealed (a plain pip-compile lock?): builds, bundles and the Ansible provisioning take only a sealed lock",
    ),
}


def bad_lock(tmp_path: Path, good_locks: dict[str, str], case: str) -> Path:
    path = tmp_path / "bad-lock.txt"
    path.write_text(BAD_LOCKS[case][0](good_locks))
    return path


def assert_refused(capsys: pytest.CaptureFixture[str], argv: list[str], case: str) -> None:
    """`main(argv)` refuses the bad lock of `case`: a failed check naming the lock's problem and the fix."""
    code = main(argv)
    out = capsys.readouterr()
    output = out.out + out.err
    assert code == 1, output  # an unsound lock is a failed check (README "Exit codes"), with or without --sealed
    assert "refusing the lock" in output and BAD_LOCKS[case][1] in output, output
    assert re.search(rf"`neuron-torch (--matrix \S+ )?lock --cell {CELL}`", output), output  # the fix, same release
    if case in ("an edited hash", "nvidia appended, unsealed", "a pip-compile lock, not sealed"):
        assert re.search(rf"`neuron-torch (--matrix \S+ )?lock --seal \S+ --cell {CELL}`", output), output
    assert "Traceback" not in output


@pytest.mark.parametrize("case", sorted(BAD_LOCKS))
def test_build_image_refuses_before_staging(
    capsys: pytest.CaptureFixture[str], release_copy: Path, good_locks: dict[str, str], case: str
) -> None:
    lock = bad_lock(release_copy, good_locks, case)
    matrix = str(release_copy / "constraints" / "matrix.toml")
    assert_refused(
        capsys, ["--matrix", matrix, "build", "image", "--cell", CELL, "--lock", str(lock), "--dry-run"], case
    )
    assert not (release_copy / "build").exists()


@pytest.mark.parametrize("case", sorted(BAD_LOCKS))
def test_bundle_refuses_before_any_download(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, good_locks: dict[str, str], case: str
) -> None:
    lock = bad_lock(tmp_path, good_locks, case)
    assert_refused(capsys, ["bundle", "--cell", CELL, "--lock", str(lock), "--out", str(tmp_path / "bundle")], case)
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize("case", sorted(BAD_LOCKS))
def test_build_ami_refuses_before_packer_runs(
    capsys: pytest.CaptureFixture[str], release_copy: Path, good_locks: dict[str, str], case: str
) -> None:
    lock = release_copy / "constraints" / "locks" / f"{CELL}.txt"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(BAD_LOCKS[case][0](good_locks))
    matrix = str(release_copy / "constraints" / "matrix.toml")
    packer = release_copy / "packer-must-not-run"
    assert_refused(capsys, ["--matrix", matrix, "build", "ami", "--cell", CELL, "--packer", str(packer)], case)
    assert not (release_copy / "build").exists()


def test_a_sound_lock_passes_the_gate(
    capsys: pytest.CaptureFixture[str], release_copy: Path, good_locks: dict[str, str]
) -> None:
    lock = release_copy / "good.txt"
    lock.write_text(good_locks[CELL])
    assert main(["check", "--lock", str(lock), "--cell", CELL]) == 0
    matrix = str(release_copy / "constraints" / "matrix.toml")
    assert main(["--matrix", matrix, "build", "image", "--cell", CELL, "--lock", str(lock), "--dry-run"]) == 0
    assert "docker" in capsys.readouterr().out


@pytest.mark.parametrize("case", sorted(BAD_LOCKS))
def test_ansible_provisioning_refuses_before_touching_a_host(
    tmp_path: Path, good_locks: dict[str, str], case: str
) -> None:
    playbook = REPO / ".venv-ansible" / "bin" / "ansible-playbook"
    if not playbook.exists():
        pytest.skip(f"{playbook} is missing: run scripts/dev-setup.sh (it makes .venv-ansible)")
    lock = bad_lock(tmp_path, good_locks, case)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"never-reached": {"ansible_host": "192.0.2.1"}}}}))
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    result = subprocess.run(
        [str(playbook), "-i", str(inventory), "playbooks/provision.yml",
         "-e", f"neuron_cell={CELL}", "-e", f"neuron_lock_file={lock}"],
        cwd=REPO / "ansible", capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "TASK [Refuse a lock that is not the cell's own sealed, sound lock" in output
    assert BAD_LOCKS[case][1] in output.replace("\\n", "\n"), output
    assert "never-reached" not in output.split("Refuse a lock")[1].split("PLAY RECAP")[0]


def test_build_ami_takes_a_lock_and_packer_variables(
    capsys: pytest.CaptureFixture[str], release_copy: Path, good_locks: dict[str, str]
) -> None:
    """A stand-in packer (it logs its arguments) shows what `build ami --lock --var` hands to Packer."""
    log = release_copy / "packer.log"
    packer = release_copy / "packer"
    packer.write_text(f'#!/bin/sh\n[ "$1" = version ] && echo "Packer v1.11.2" && exit 0\necho "$@" >> {log}\n')
    packer.chmod(0o755)
    for tool in ("ansible-playbook", "python"):  # the checkout's controller venv, as scripts/dev-setup.sh makes it
        stand_in = release_copy / ".venv-ansible" / "bin" / tool
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("#!/bin/sh\nexit 0\n")  # `python -c 'import testinfra'` succeeds
        stand_in.chmod(0o755)
    lock = release_copy / "my-lock.txt"
    lock.write_text(good_locks[CELL])
    matrix = str(release_copy / "constraints" / "matrix.toml")
    argv = ["--matrix", matrix, "build", "ami", "--cell", CELL, "--packer", str(packer), "--lock", str(lock)]
    assert main([*argv, "--var", "region=eu-west-1"]) == 0, capsys.readouterr().err
    build = [line for line in log.read_text().splitlines() if line.startswith("build")]
    assert len(build) == 1 and "-var=region=eu-west-1" in build[0] and "-var=lock_file=my-lock.txt" in build[0]
    assert main([*argv, "--var", "region"]) == 2
    assert "--var takes NAME=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize("case", sorted(BAD_LOCKS))
def test_the_gate_script_the_image_build_runs_refuses_alone(
    tmp_path: Path, matrix: Matrix, good_locks: dict[str, str], case: str
) -> None:
    """neuron_cell.lockgate as the Dockerfile runs it: a copy of neuron_cell, no site-packages (-S: neither
    neuron_torch nor packaging importable)."""
    rules = tmp_path / "gate.json"
    rules.write_text(json.dumps({"forbidden": matrix.forbidden}))
    shutil.copytree(REPO / "src" / "neuron_cell", tmp_path / "lib" / "neuron_cell")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "lib")}
    for name, text, code in (("good.txt", good_locks[CELL], 0), ("bad.txt", BAD_LOCKS[case][0](good_locks), 1)):
        (tmp_path / name).write_text(text)
        argv = [sys.executable, "-S", "-m", "neuron_cell.lockgate", "--cell", CELL, "--rules", str(rules)]
        argv.append(str(tmp_path / name))
        result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
        output = result.stdout + result.stderr
        assert result.returncode == code, output
        if code:
            assert f"lock gate: refusing the lock {tmp_path / name} for {CELL}" in output, output
            assert BAD_LOCKS[case][1] in output and "Traceback" not in output, output
