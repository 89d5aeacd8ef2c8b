"""Installable like a tool: a plain (non-editable) install of the project runs `matrix`, `cell` and `check` from
another folder, pointed at a checkout with --project or $NEURON_TORCH_PROJECT, and says what to do without one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO_ROOT

REPO = REPO_ROOT
# A user's environment: no neuron-torch settings, no PYTHONPATH into the checkout, no pip configuration.
CLEAN = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_TORCH_", "PIP_")) and k != "PYTHONPATH"}
CLEAN["PIP_CONFIG_FILE"] = os.devnull


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """neuron-torch installed from a wheel of this checkout into a fresh venv, as pipx or pip would: the wheel is built
    offline with this venv's setuptools, its dependencies (packaging, pip-tools) come from the package index."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"  # a copy, so that the build leaves nothing (build/, *.egg-info) in the checkout
    for folder in ("src", "smoke_tests"):  # the packages: neuron_torch, neuron_cell and neuron_smoke
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root), str(source)],
        capture_output=True, text=True, env=CLEAN,
    )  # fmt: skip
    if built.returncode != 0 and "No module named" in built.stderr:
        pytest.skip(f"cannot build a wheel offline here: {built.stderr.strip()[-300:]}")
    assert built.returncode == 0, built.stderr
    wheel = next(root.glob("neuron_torch-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, env=CLEAN)
    pip = [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    installed = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, env=CLEAN)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return root / "venv" / "bin" / "neuron-torch"


def run(tool: Path, cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool), *argv], cwd=cwd, capture_output=True, text=True, env={**CLEAN, **(env or {})})


def test_the_install_is_not_the_checkout(installed: Path) -> None:
    location = subprocess.run(
        [str(installed.parent / "python"), "-c", "import neuron_torch; print(neuron_torch.__file__)"],
        capture_output=True, text=True, check=True, env=CLEAN,
    ).stdout  # fmt: skip
    assert "site-packages" in location and str(REPO) not in location


def test_matrix_cell_and_check_run_from_another_folder(installed: Path, tmp_path: Path) -> None:
    listed = run(installed, tmp_path, "--project", str(REPO), "matrix")
    assert listed.returncode == 0, listed.stderr
    assert "2.14-py3.14-ubuntu26.04" in listed.stdout
    cell = run(installed, tmp_path, "cell", "2.14-py3.13-ubuntu26.04", env={"NEURON_TORCH_PROJECT": str(REPO)})
    assert cell.returncode == 0, cell.stderr
    assert "torch==2.14.0+cpu" in cell.stdout
    checked = run(installed, tmp_path, "--project", str(REPO), "check")
    assert checked.returncode == 0, checked.stderr
    assert "generated files up to date" in checked.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran


def test_the_install_gives_verify_device_with_its_stages_and_neuron_cell(installed: Path, tmp_path: Path) -> None:
    """`pip install .` installs the `verify-device` console script (the smoke tests are part of the distribution),
    with neuron_cell and its data beside it: the command a user types after the install, from any folder."""
    verify = installed.parent / "verify-device"
    helped = subprocess.run([str(verify), "--help"], cwd=tmp_path, capture_output=True, text=True, env=CLEAN)
    assert helped.returncode == 0, helped.stderr
    assert "usage: verify-device" in helped.stdout and "environment" in helped.stdout
    probe = "import neuron_cell, neuron_smoke; from neuron_cell import cellrecord; print(cellrecord.schema_version())"
    kit = subprocess.run([str(installed.parent / "python"), "-c", probe], capture_output=True, text=True, env=CLEAN)
    assert kit.returncode == 0 and kit.stdout.strip().isdigit(), kit.stderr
    # No torch in the toolkit's venv: the environment stage fails naming it, as one line of output per stage, exit 1.
    ran = subprocess.run(
        [str(verify), "--device", "cpu", "--stages", "environment", "--report", str(tmp_path / "r.json")],
        cwd=tmp_path, capture_output=True, text=True, env=CLEAN, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 1 and "Traceback" not in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    assert "cannot import torch" in (tmp_path / "r.json").read_text()


def test_without_a_project_it_says_how_to_name_one(installed: Path, tmp_path: Path) -> None:
    result = run(installed, tmp_path, "matrix")
    assert result.returncode == 2
    assert "no neuron-torch project here" in result.stderr and "--project DIR" in result.stderr
    assert "Traceback" not in result.stderr
    wrong = run(installed, tmp_path, "--project", str(tmp_path), "matrix")
    assert wrong.returncode == 2 and "not a neuron-torch project" in wrong.stderr


def test_a_matrix_outside_a_checkout_keeps_its_files_beside_it(installed: Path, tmp_path: Path) -> None:
    folder = tmp_path / "x" / "y"
    folder.mkdir(parents=True)
    (folder / "m.toml").write_text((REPO / "constraints" / "matrix.toml").read_text())
    result = run(installed, tmp_path, "--matrix", str(folder / "m.toml"), "cell", "2.14-py3.13-ubuntu26.04")
    assert result.returncode == 0, result.stderr
    assert f"lock: {folder}/constraints/locks/" in result.stdout or "lock: constraints/locks/" in result.stdout
    assert not (tmp_path / "x" / "constraints").exists()
