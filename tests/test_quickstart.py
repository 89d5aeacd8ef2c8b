"""The README's quick start, read from README.md (so the test fails when the README drifts) and run as written in a
copy of the release, with the real indexes swapped for local fixture indexes through the mirror settings only
(NEURON_TORCH_MIRROR), nothing else.

What runs as written: the set-up's `neuron-torch matrix`, every `neuron-torch lock` and `check` step, `build ami`
(with a stand-in `packer` first on PATH that logs what it is handed). What runs with one flag added: `build image`
(`--dry-run`: building the real cell needs the real apt repository; the test cell's image is built for real from
the same Dockerfile in test_image.py) and the Ansible steps (`--syntax-check`: a converge is test_ansible.py's).
`bundle`, `docker run`, `install.sh` and the AMI launch are only parsed here (the bundle needs the release's apt
repository: test_bundle.py runs it on the test release; the others need a Trainium device).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_torch.cli import build_parser
from neuron_torch.matrix import Matrix
from tests.testbed.fixture_indexes import build_release_indexes

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PROGRAMS = ("neuron-torch", "ansible-playbook", "docker", "sudo", "verify-device")


def quick_start() -> tuple[list[str], dict[str, list[str]]]:
    """The set-up block's commands and each path's numbered commands (the first command of each step)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start: a user's paths", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the quick start lost its set-up block"
    setup = [line.split("#", 1)[0].strip() for line in block[1].splitlines()]
    paths: dict[str, list[str]] = {}
    for letter, body in re.findall(r"^\*\*([A-D])\. [^*]+\*\*\n\n(.*?)(?=^\*\*|\Z)", section, re.M | re.S):
        steps = re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |^\S|\Z)", body, re.M | re.S)
        assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1)), f"path {letter}: steps out of order"
        commands = []
        for number, step in steps:
            found = re.search(rf"`((?:[A-Z_]+=\S+ )*(?:{'|'.join(PROGRAMS)})\b[^`]*)`", " ".join(step.split()))
            assert found, f"path {letter}, step {number} names no command: {step!r}"
            commands.append(found[1])
        paths[letter] = commands
    return [line for line in setup if line], paths


def test_the_quick_start_has_its_four_paths_on_the_default_cell(matrix: Matrix) -> None:
    setup, paths = quick_start()
    assert sorted(paths) == ["A", "B", "C", "D"]
    assert "neuron-torch matrix" in setup
    parser = build_parser()
    for letter, commands in paths.items():
        for command in commands:
            words = shlex.split(command)
            if words[0] == "neuron-torch":
                parser.parse_args(words[1:])  # exits 2 (failing the test) on an option the CLI does not take
                cell = words[words.index("--cell") + 1]
                assert cell == matrix.release.default_cell, f"path {letter}: {command}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, matrix: Matrix) -> tuple[Path, dict[str, str]]:
    """A copy of the checkout without locks, and the environment of a user whose mirror is the fixture indexes."""
    root = tmp_path_factory.mktemp("quickstart")
    copy = root / "neuron-torch"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True, text=True)
    for name in filter(None, tracked.stdout.split("\0")):  # the checkout a user has: tracked files only
        if (REPO / name).is_file() and "/locks/" not in name:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    indexes = build_release_indexes(matrix, root / "indexes")
    mirror = copy / "mirror.toml"
    mirror.write_text("[indexes]\n" + "".join(f'{name} = "{url}"\n' for name, url in indexes.items()))
    tools = root / "bin"
    tools.mkdir()
    packer = tools / "packer"  # a stand-in: `build ami` checks its version, then hands it the build
    packer.write_text(
        f'#!/bin/sh\n[ "$1" = version ] && echo "Packer v1.11.2" && exit 0\necho "$@" >> {root}/packer.log\n'
    )
    packer.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_TORCH_", "PIP_", "UV_"))}
    env.update(NEURON_TORCH_MIRROR=str(mirror), PATH=f"{tools}:{BIN}:{env['PATH']}")
    return copy, env


def run(command: str, project: tuple[Path, dict[str, str]]) -> str:
    copy, env = project
    result = subprocess.run(command, shell=True, cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{command}\n{output}"
    assert "Traceback" not in output, output
    return output


def test_the_neuron_torch_steps_run_as_written(project: tuple[Path, dict[str, str]]) -> None:
    copy, _ = project
    _, paths = quick_start()
    run("neuron-torch matrix", project)
    lock, check = paths["A"][0], paths["A"][1]
    assert paths["B"][0] == paths["C"][0] == paths["D"][0] == lock  # every path locks the same way
    run(lock, project)
    cell = shlex.split(lock)[-1]
    assert (copy / "constraints" / "locks" / f"{cell}.txt").is_file()
    assert "a sound, sealed lock" in run(check, project)
    run(paths["B"][1] + " --dry-run", project)
    run(paths["C"][1], project)
    log = (copy.parent / "packer.log").read_text()
    build = [line for line in log.splitlines() if line.startswith("build ")]
    assert len(build) == 1 and "-var=region=us-east-1" in build[0] and f"{cell}.pkrvars.hcl" in build[0], log


def test_the_ansible_steps_parse_as_written(project: tuple[Path, dict[str, str]]) -> None:
    playbook = REPO / ".venv-ansible" / "bin" / "ansible-playbook"
    if not playbook.exists():
        pytest.skip(f"{playbook} is missing: run scripts/dev-setup.sh (it makes .venv-ansible)")
    copy, _ = project
    (copy / "inventory.ini").write_text("[trn2]\nnever-reached ansible_host=192.0.2.1\n")
    _, paths = quick_start()
    for command in paths["A"][2:]:
        assert " ansible-playbook " in command, command
        run(command.replace(" ansible-playbook ", f" {playbook} ") + " --syntax-check", project)
