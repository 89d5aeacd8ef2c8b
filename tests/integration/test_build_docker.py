"""Which docker CLI `neuron-torch build image` runs: $DOCKER, else the first docker on PATH that builds with BuildKit.

Stand-in `docker` scripts answer `docker version --format {{.Client.Version}}` as the real CLIs do (Debian's docker.io
20.10 prints 20.10.24+dfsg1; Docker's static 28.x CLI prints 28.2.2 and, without the buildx plugin, cannot build with
DOCKER_BUILDKIT=1).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neuron_torch import build


def fake_docker(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True)
    docker = folder / "docker"
    docker.write_text(f"#!/bin/sh\necho {version}\n")
    docker.chmod(0o755)
    return docker


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """PATH: a docker 28 without buildx first, Debian's 20.10 second; no plugin folders."""
    monkeypatch.setattr(build, "PLUGIN_DIRS", (str(tmp_path / "no-plugins"),))
    build._client_major.cache_clear()
    fake_docker(tmp_path / "local", "28.2.2")
    fake_docker(tmp_path / "debian", "20.10.24+dfsg1")
    return {"PATH": os.pathsep.join([str(tmp_path / "empty"), str(tmp_path / "local"), str(tmp_path / "debian")])}


def test_docker_env_var_wins(path: dict[str, str]) -> None:
    assert build.docker_binary({**path, "DOCKER": "/opt/docker/bin/docker"}) == "/opt/docker/bin/docker"


def test_a_new_cli_without_buildx_is_passed_over(path: dict[str, str], tmp_path: Path) -> None:
    assert build.docker_binary(path) == str(tmp_path / "debian" / "docker")


def test_a_new_cli_with_buildx_is_taken(path: dict[str, str], tmp_path: Path) -> None:
    plugins = tmp_path / "config" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-buildx").write_text("")
    assert build.docker_binary({**path, "DOCKER_CONFIG": str(tmp_path / "config")}) == str(
        tmp_path / "local" / "docker"
    )


def test_no_docker_on_path_leaves_the_name(tmp_path: Path) -> None:
    assert build.docker_binary({"PATH": str(tmp_path)}) == "docker"
