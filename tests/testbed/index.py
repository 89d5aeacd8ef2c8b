"""The three PEP 503 indexes of the test release: neuron, pytorch-cpu and pypi (with its traps).

- neuron: fixture torch-neuronx, neuronx-cc and nki with the real names, versions and dependency metadata; neuronx-cc
  and nki carry AWS-style local version labels (traits.toml). The torch-neuronx build number (`FIXTURE_BUILD`) is
  made up: the real 2.33 build number is unconfirmed.
- pytorch-cpu: the real CPU torch wheel for CPython 3.11 when this machine has it, plus a fixture `torch X+cpu`
  (py3-none-any, the real wheel's Requires-Dist from traits.toml) for the Python 3.13/3.14 cells; on 3.11 the real
  wheel wins (more specific tag).
- pypi: torch's real runtime dependencies downloaded from PyPI at build time for every Python of the release (exact
  pins below), and the traps that
  routing must never pick: the PyPI placeholder `torch-neuronx 1.0` and a "CUDA" `torch X` (no local version) that
  requires the fixture `nvidia-cublas-cu12`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from neuron_torch.matrix import Matrix
from tests.testbed import standalone, traits
from tests.testbed.pep503 import write_index
from tests.testbed.wheels import FixtureWheel, build_wheel

FIXTURE_BUILD = "1871"
REAL_TORCH_DIR = Path("/opt/wheels")
CUBLAS_FIXTURE = "12.8.4.1"
# torch 2.13.0's Requires-Dist, resolved once and pinned so that the mirror (and its hashes) is reproducible.
TORCH_DEPENDENCIES = (
    "filelock==4.3.1",
    "fsspec==2026.9.0",
    "jinja2==3.1.6",
    "markupsafe==3.0.4",
    "mpmath==1.3.0",
    "networkx==3.6.1",
    "setuptools==84.2.1",
    "sympy==1.14.0",
    "typing-extensions==4.16.0",
)
DOWNLOAD_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def neuronx_version(matrix: Matrix, family: str) -> str:
    return matrix.families[family].torch_neuronx.removesuffix(".*") + f".{FIXTURE_BUILD}"


def neuron_wheels(matrix: Matrix) -> list[FixtureWheel]:
    common = [f"{name}=={version}" for name, version in matrix.packages.items()]
    wheels = [
        FixtureWheel(name, traits.labelled(name, version), traits.requires(name))
        for name, version in matrix.packages.items()
    ]
    for family in matrix.families.values():
        requires = (f"torch=={family.torch}", *common)
        wheels.append(FixtureWheel("torch-neuronx", neuronx_version(matrix, family.name), requires))
    return wheels


def real_torch_wheels(matrix: Matrix) -> list[Path]:
    """The real CPU torch wheels of the matrix's families that this machine has (cp311 here)."""
    return sorted(
        path for f in matrix.families.values() for path in REAL_TORCH_DIR.glob(f"torch-{f.torch_pin}-cp*.whl")
    )


def torch_fixtures(matrix: Matrix) -> list[FixtureWheel]:
    return [FixtureWheel("torch", family.torch_pin, traits.requires("torch")) for family in matrix.families.values()]


def trap_wheels(matrix: Matrix) -> list[FixtureWheel]:
    traps = [FixtureWheel("torch-neuronx", "1.0"), FixtureWheel("nvidia-cublas-cu12", CUBLAS_FIXTURE)]
    for family in matrix.families.values():
        traps.append(FixtureWheel("torch", family.torch, (f"nvidia-cublas-cu12=={CUBLAS_FIXTURE}",)))
    return traps


def download_dependencies(dest: Path, pythons: list[str]) -> list[Path]:
    """torch's runtime dependencies from PyPI for each Python (ignoring this machine's pip configuration and local
    wheels): the pure-Python wheels once, the compiled ones (markupsafe) once a Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env["PIP_CONFIG_FILE"] = os.devnull
    platforms = [arg for platform in DOWNLOAD_PLATFORMS for arg in ("--platform", platform)]
    found: set[Path] = set()
    for python in pythons:
        abi = "cp" + python.replace(".", "")
        target = dest / abi
        if not (target.is_dir() and len(list(target.glob("*.whl"))) >= len(TORCH_DEPENDENCIES)):
            shutil.rmtree(target, ignore_errors=True)
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
            command += ["--only-binary", ":all:", "--dest", str(target), "--python-version", python]
            command += ["--implementation", "cp", "--abi", abi, *platforms, *TORCH_DEPENDENCIES]
            subprocess.run(command, check=True, env=env)
        found.update(target.glob("*.whl"))
    unique = {path.name: path for path in sorted(found)}  # a pure-Python wheel is the same file for every Python
    return sorted(unique.values())


def build_indexes(matrix: Matrix, www: Path, work: Path) -> dict[str, Path]:
    """Write www/simple/<index name>/ for each index of the test matrix; return name -> folder."""
    wheels = work / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    neuron = [build_wheel(w, wheels / "neuron") for w in neuron_wheels(matrix)]
    cpu = real_torch_wheels(matrix) + [build_wheel(w, wheels / "pytorch-cpu") for w in torch_fixtures(matrix)]
    pypi = download_dependencies(work / "downloads", list(matrix.pythons)) + [
        build_wheel(w, wheels / "pypi") for w in trap_wheels(matrix)
    ]
    pypi.append(standalone.download_uv(matrix, work / "downloads" / "tools"))  # the real uv wheel (hash-pinned)
    contents = {"neuron": neuron, "pytorch-cpu": cpu, "pypi": pypi}
    names = {index.name for index in matrix.indexes}
    if names != set(contents):
        raise SystemExit(f"the test bed serves indexes {sorted(contents)}, the matrix names {sorted(names)}")
    return {name: write_index(dists, www / "simple" / name) for name, dists in contents.items()}
