"""`neuron-torch build image`: build one cell's container image from the Dockerfile with arguments from its record.

The cell's hash lock and cell record are staged under build/image/ (inside the build context, see .dockerignore) and
copied into the image at /etc/neuron-torch/; the build arguments come from buildargs.build_args, which reads that
record (and the matrix for what is release-wide).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from neuron_cell.boundary import quote
from neuron_torch.baseimage import Base, check_built_on, require_pinned, resolve
from neuron_torch.buildargs import DOCKER_TAG, build_args
from neuron_torch.cellinfo import cell_record, relative
from neuron_torch.errors import NeuronTorchError
from neuron_torch.files import check_ca_bundle
from neuron_torch.gitrev import build_revision
from neuron_torch.lockfile import gate_lock, pip_options, read_lock, read_lock_text, with_pip_options
from neuron_torch.matrix import Cell, Matrix

IMAGE = "neuron-torch"
LABEL_NOTE = "io.neuron-torch.bom (the sha256 of /etc/neuron-torch/bom/SHA256SUMS)"


@dataclass(frozen=True)
class ImageBuild:
    cell: Cell
    tags: tuple[str, ...]
    command: tuple[str, ...]
    stage_dir: Path
    base: str  # the base image as the release names it


# Where the docker CLI looks for its plugins (docker/cli's cli-plugins/manager: the user's, then the system's).
PLUGIN_DIRS = (
    "~/.docker/cli-plugins",
    "/usr/local/lib/docker/cli-plugins",
    "/usr/local/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
)


def docker_binary(environ: Mapping[str, str] = os.environ) -> str:
    """The docker CLI that builds: $DOCKER when set, else the first `docker` on PATH that can build with BuildKit.

    A docker CLI of version 23 or later builds with BuildKit only through the buildx plugin (without it,
    `DOCKER_BUILDKIT=1 docker build` fails); older CLIs, such as Debian's docker.io 20.10, build with BuildKit
    themselves. When none on PATH can, plain `docker` is run (the first on PATH) and docker's own error says why.
    """
    if environ.get("DOCKER"):
        return environ["DOCKER"]
    found = [
        str(Path(folder) / "docker")
        for folder in environ.get("PATH", os.defpath).split(os.pathsep)
        if folder and os.access(Path(folder) / "docker", os.X_OK) and (Path(folder) / "docker").is_file()
    ]
    return next((docker for docker in dict.fromkeys(found) if _builds_with_buildkit(docker, environ)), "docker")


def _builds_with_buildkit(docker: str, environ: Mapping[str, str]) -> bool:
    config = environ.get("DOCKER_CONFIG")
    folders = [str(Path(config) / "cli-plugins")] if config else []
    if any(Path(folder).expanduser().joinpath("docker-buildx").is_file() for folder in [*folders, *PLUGIN_DIRS]):
        return True
    major = _client_major(docker)
    return major is not None and major < 23


@cache
def _client_major(docker: str) -> int | None:
    """The docker CLI's major version (`docker version` prints the client's even when the daemon is away)."""
    try:
        version = subprocess.run(
            [docker, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    major = re.match(r"(\d+)\.", version)
    return int(major[1]) if major else None


def default_tags(matrix: Matrix, cell: Cell) -> tuple[str, ...]:
    tags = [f"{IMAGE}:{cell.id}"]
    if cell.id == matrix.release.default_cell:
        tags.append(f"{IMAGE}:latest")
    return tuple(tags)


def serves_on_loopback(matrix: Matrix) -> bool:
    """True when the release's apt repo or an index is on this machine (the test bed, a local mirror)."""
    urls = [matrix.apt.url, matrix.apt.key_url, *(index.url for index in matrix.indexes)]
    return any(urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1") for url in urls)


def require_lock(matrix: Matrix, cell: Cell, lock: Path | None) -> Path:
    """The lock images and AMIs may install: it exists and passes the lock gate (lockfile.gate_lock)."""
    path = lock or cell.lock_path
    if not path.exists():
        message = (
            f"cell {cell.id} has no lock at {relative(path, matrix)}: images and AMIs install only from a hash lock. "
            f"Run `neuron-torch lock --cell {cell.id}` where the indexes are reachable (or pass --lock FILE)."
        )
        if not cell.os.wheels_available:
            message += f" Note: {cell.os.wheels_note}"
        raise NeuronTorchError(message)
    gate_lock(matrix, cell, path)
    return path


def stage(matrix: Matrix, cell: Cell, lock: Path, *, write: bool = True) -> tuple[Path, dict[str, Any]]:
    """Write the lock and the cell record (with the locked versions) where the Dockerfile's COPY finds them; return
    the folder and the record (the build arguments are read from it)."""
    text = with_pip_options(read_lock_text(lock, cell.id), pip_options(matrix.indexes, None))  # the build's own indexes
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    folder = matrix.root / "build" / "image" / f"{cell.id}-{digest}"
    record = cell_record(matrix, cell)
    record["locked"] = {package.name: package.version for package in read_lock(lock, cell.id).packages}
    if not write:
        return folder, record  # a dry run names the folder and writes nothing
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lock.txt").write_text(text, encoding="utf-8")
    (folder / "cell.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    gate = {"forbidden": matrix.forbidden}  # the rules neuron_cell.lockgate applies inside the build, before pip
    (folder / "gate.json").write_text(json.dumps(gate, indent=2) + "\n", encoding="utf-8")
    return folder, record


def dockerfile_stages(matrix: Matrix) -> list[str]:
    """The named stages of the project's Dockerfile (`FROM ... AS name`), in order."""
    path = matrix.root / "Dockerfile"
    if not path.is_file():
        raise NeuronTorchError(f"{path}: no Dockerfile there: name a neuron-torch checkout with --project DIR")
    text = path.read_text(encoding="utf-8")
    return re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)\s*$", text, flags=re.MULTILINE | re.IGNORECASE)


def check_target(matrix: Matrix, target: str, *, compare: bool = False) -> None:
    stages = dockerfile_stages(matrix)
    if target not in stages:
        raise NeuronTorchError(
            f"--target {quote(target)} is no stage of {matrix.root / 'Dockerfile'}; its stages: {', '.join(stages)}"
        )
    if compare and target != stages[-1]:  # the SBOMs --compare reads are written in the last stage
        raise NeuronTorchError(
            f"--compare checks a whole image's package set (its SBOMs, written in the {stages[-1]} stage); --target "
            f"{target} stops before it: leave one of them out"
        )


def check_tags(tags: tuple[str, ...]) -> None:
    for tag in tags:
        if len(tag) > 255 or not DOCKER_TAG.fullmatch(tag):  # docker's own limit on a reference
            raise NeuronTorchError(
                f"--tag {quote(tag)} is not a docker image reference (at most 255 characters): NAME[:TAG], "
                "lowercase name parts of letters, digits "
                "and . _ - separated by /, a tag of up to 128 letters, digits, . _ - (e.g. registry.example/ml/nt:1)"
            )


def plan_image_build(
    matrix: Matrix,
    cell: Cell,
    *,
    tags: tuple[str, ...] = (),
    network: str | None = None,
    ca_bundle: Path | None = None,
    lock: Path | None = None,
    target: str | None = None,
    no_cache: bool = False,
    proxy: dict[str, str] | None = None,
    dry_run: bool = False,
    release: bool = False,
) -> ImageBuild:
    """Stage the cell's files (unless dry_run) and return the docker command that builds its image; a release build
    refuses a base image not pinned by digest. The command names the base as the release does: run_image_build
    resolves it."""
    if release:
        require_pinned(cell.os.base_image, cell.id)
    if target is not None:
        check_target(matrix, target)
    lock_path = require_lock(matrix, cell, lock)
    if ca_bundle is not None:
        check_ca_bundle(ca_bundle)
    check_tags(tags)
    stage_dir, record = stage(matrix, cell, lock_path, write=not dry_run)
    tags = tags or default_tags(matrix, cell)
    arguments = {
        **build_args(matrix, record),
        "CELL_DIR": stage_dir.relative_to(matrix.root).as_posix(),
        "REVISION": build_revision(matrix.root),
        # A new value each build: the keyring stage fetches and checks the apt key again (see the Dockerfile).
        "APT_KEY_CHECKED_AT": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }
    command = [docker_binary(), "build", "--file", str(matrix.root / "Dockerfile"), "--progress", "plain"]
    for tag in tags:
        command += ["--tag", tag]
    for key, value in arguments.items():
        command += ["--build-arg", f"{key}={value}"]
    # Build containers reach a server on the host's loopback (the test bed, a local mirror) only on its network.
    network = network or ("host" if serves_on_loopback(matrix) else None)
    if network:
        command += ["--network", network]
    for key, value in (proxy or {}).items():
        command += ["--build-arg", f"{key}={value}"]  # docker's predefined proxy ARGs: kept out of the image history
    if ca_bundle is not None:
        command += ["--secret", f"id=ca,src={ca_bundle.resolve()}"]
    if target:
        command += ["--target", target]
    if no_cache:
        command.append("--no-cache")
    command.append(str(matrix.root))
    return ImageBuild(cell=cell, tags=tags, command=tuple(command), stage_dir=stage_dir, base=cell.os.base_image)


def with_base(command: tuple[str, ...], base: Base) -> tuple[str, ...]:
    """The build command with the resolved base: what FROM names and the digest the image records."""
    values = {"BASE_IMAGE": base.source, "BASE_DIGEST": base.digest}
    words = list(command)
    for index, word in enumerate(words[:-1]):
        key = words[index + 1].split("=", 1)[0]
        if word == "--build-arg" and key in values:
            words[index + 1] = f"{key}={values[key]}"
    return tuple(words)


def run_image_build(build: ImageBuild) -> int:
    """Resolve the base (pulled by digest when missing), build, check the image is on that base, label its bill of
    materials."""
    docker = build.command[0]
    if shutil.which(docker) is None:
        raise NeuronTorchError(f"{docker} not found: install docker (Debian: apt-get install docker.io)")
    base = resolve(docker, build.base)
    print(f"base image {base.reference}: {base.digest} (FROM {base.source})", flush=True)
    environment = {**os.environ, "DOCKER_BUILDKIT": "1"}
    status = subprocess.run(with_base(build.command, base), env=environment, check=False).returncode
    if status == 0:
        check_built_on(docker, base, build.tags[0])
    if status == 0 and "--target" not in build.command:  # the runtime image: its bill of materials' digest, labelled
        from neuron_torch.bom import label_image

        print(f"labelled {LABEL_NOTE}: {label_image(docker, build.tags)}", flush=True)
    return status
