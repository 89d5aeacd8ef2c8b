"""Helpers for the test-bed tests: build the bed once per session, docker checks, image scans."""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from neuron_torch.matrix import Matrix, load_matrix
from tests.testbed import folder

ROOT = Path(__file__).resolve().parents[2]
TEST_MATRIX = ROOT / "constraints" / "test-matrix.toml"
DOCKER = "/usr/bin/docker"  # Debian's CLI: builds with DOCKER_BUILDKIT=1 (the preinstalled one has no buildx)
CELL = "2.13-py3.11-debian12"
BASE = "neuron-torch-base:debian12"


@functools.cache
def docker_problem() -> str | None:
    if not Path(DOCKER).exists():
        return f"{DOCKER} is not installed (scripts/ci-prereqs.sh installs docker.io)"
    info = subprocess.run([DOCKER, "info"], capture_output=True, text=True)
    if info.returncode != 0:
        return f"dockerd is not reachable ({info.stderr.strip().splitlines()[-1:]}); run scripts/ci-prereqs.sh"
    return None


def require_docker() -> None:
    problem = docker_problem()
    if problem:
        print(f"skipping: {problem}")
        pytest.skip(problem)


@dataclass(frozen=True)
class Testbed:
    matrix: Matrix
    output: str
    www: Path
    mirror_file: Path
    fingerprint: str


@functools.cache
def _build() -> Testbed:
    bases = "none" if docker_problem() else "debian12"
    result = subprocess.run(
        [sys.executable, "-m", "tests.testbed", "build", "--bases", bases], cwd=ROOT, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise AssertionError(f"test-bed build failed:\n{result.stdout}\n{result.stderr}")
    testbed = folder()
    return Testbed(
        matrix=load_matrix(TEST_MATRIX),
        output=result.stdout,
        www=testbed / "www",
        mirror_file=testbed / "mirror.toml",
        fingerprint=(testbed / "work" / "apt" / "fingerprint").read_text().strip(),
    )


def built_testbed() -> Testbed:
    """The built and served test bed (built once per test session); skips when its tools are missing."""
    missing = [tool for tool in ("gpg", "gpgv", "dpkg-deb", "apt-ftparchive") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"the test bed needs {', '.join(missing)} (scripts/ci-prereqs.sh installs them)")
    return _build()


def docker(*args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([DOCKER, *args], capture_output=True, text=True, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _scan_tar(data: bytes, needle: bytes, where: str) -> list[str]:
    found = []
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            if not member.isfile():
                continue
            handle = archive.extractfile(member)
            content = handle.read() if handle else b""
            name = f"{where}/{member.name}"
            if needle in content:
                found.append(name)
            if member.name.endswith(".tar") or member.name.endswith("layer.tar"):
                found += _scan_tar(content, needle, name)
    return found


def scan_image(image: str, needle: bytes) -> list[str]:
    """Every file of `docker save IMAGE` (layers, config, history) whose bytes contain needle."""
    saved = subprocess.run([DOCKER, "save", image], capture_output=True, check=True).stdout
    return _scan_tar(saved, needle, image)
