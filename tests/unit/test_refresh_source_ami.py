"""scripts/refresh-source-ami.sh with a stand-in `aws` on PATH (no AWS here): the newest Ubuntu AMI of an os of the
matrix is looked up by that os's codename and version and printed as the matrix line to pin; a usage error (no or
another os, a missing value, an unknown option, no AWS CLI) is exit 2 naming the problem, with no traceback and
nothing asked of AWS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_torch.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "refresh-source-ami.sh"
NEWEST = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20261201\tami-0123\t2026-12-01T10:00:00.000Z"


def _bin(tmp_path: Path, aws: str | None) -> Path:
    """A PATH folder with only what the script may call: bash, dirname, python3 (this interpreter) and `aws`."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("bash", "dirname"):
        found = shutil.which(tool)
        assert found, tool
        (folder / tool).symlink_to(found)
    (folder / "python3").symlink_to(sys.executable)
    if aws is not None:
        (folder / "aws").write_text(f'#!/bin/sh\necho "$*" >>"{tmp_path}/aws.log"\nprintf "%s\\n" "{aws}"\n')
        (folder / "aws").chmod(0o755)
    return folder


def _run(tmp_path: Path, *args: str, aws: str | None = NEWEST) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(_bin(tmp_path, aws)), "HOME": str(tmp_path), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False,
        executable=shutil.which("bash"),
    )  # fmt: skip


def test_the_newest_ami_of_the_os_is_printed_as_the_line_to_pin(tmp_path: Path) -> None:
    system = load_matrix().operating_system("ubuntu24.04")
    done = _run(tmp_path, "ubuntu24.04", "--region", "eu-west-1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"current: {system.source_ami_name}",
        "newest:  ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20261201 (ami-0123 in eu-west-1, "
        "created 2026-12-01T10:00:00.000Z)",
        "",
        'Put this in constraints/matrix.toml under [os."ubuntu24.04"], then run: neuron-torch render',
        'source_ami_name = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20261201"',
    ]
    asked = (tmp_path / "aws.log").read_text()
    assert "--region eu-west-1" in asked and f"--owners {system.source_ami_owner or '099720109477'}" in asked
    assert f"ubuntu-{system.codename}-{system.version}-amd64-server-*" in asked


def test_no_image_found_is_exit_1_naming_the_pattern(tmp_path: Path) -> None:
    done = _run(tmp_path, "ubuntu26.04", aws="None")
    assert done.returncode == 1
    assert "refresh-source-ami: no image matches ubuntu/images/hvm-ssd-gp3/ubuntu-resolute-26.04" in done.stderr


@pytest.mark.parametrize(
    ("args", "aws", "message"),
    [
        ([], NEWEST, "no OS_ID given"),
        (["ubuntu22.04"], NEWEST, "ubuntu22.04 is not supported: "),
        (["plan9"], NEWEST, "operating system 'plan9' is not in "),
        (["ubuntu24.04", "--region"], NEWEST, "--region needs a value"),
        (["ubuntu24.04", "--region", ""], NEWEST, "--region needs a value"),
        (["ubuntu24.04", "--regoin", "x"], NEWEST, "unknown option '--regoin'"),
        (["ubuntu24.04", "ubuntu26.04"], NEWEST, "one OS_ID only"),
        (["ubuntu24.04"], None, "the AWS CLI (aws) is not on PATH"),
    ],
    ids=["no os", "unsupported os", "unknown os", "no region", "empty region", "unknown option", "two os", "no aws"],
)
def test_usage_errors_exit_2_naming_the_problem(tmp_path: Path, args: list[str], aws: str | None, message: str) -> None:
    done = _run(tmp_path, *args, aws=aws)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("refresh-source-ami: ") and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "aws.log").exists(), "nothing asked of AWS"


def test_help_prints_the_usage(tmp_path: Path) -> None:
    done = _run(tmp_path, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: scripts/refresh-source-ami.sh OS_ID")
