"""neuron_torch.build without docker: the default tags, the loopback check that picks the host network, the lock a
build may install (missing: the fix named; unsound: the gate's refusal), the staged folder (named by the staged
lock's digest; the lock with the build's own indexes, the record with the locked versions, the gate's rules; a dry
run writes nothing) and the docker command planned from them, every option in its place."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from neuron_torch.baseimage import Base
from neuron_torch.build import (
    IMAGE,
    ImageBuild,
    check_target,
    default_tags,
    plan_image_build,
    require_lock,
    run_image_build,
    serves_on_loopback,
    stage,
    with_base,
)
from neuron_torch.buildargs import build_args
from neuron_torch.cellinfo import cell_record
from neuron_torch.errors import NeuronTorchError
from neuron_torch.lockfile import pip_options, read_lock
from neuron_torch.matrix import Cell, Index, Matrix, load_matrix
from tests import REPO_ROOT
from tests.testbed import locks

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def sound_lock(matrix: Matrix, cell: Cell, path: Path, indexes: tuple[Index, ...] | None = None) -> Path:
    """locks.sound_lock of the cell, written to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(locks.sound_lock(matrix, cell, indexes))
    return path


@pytest.fixture
def release(release_copy: Path, monkeypatch: pytest.MonkeyPatch) -> Matrix:
    monkeypatch.setenv("DOCKER", "/opt/docker/bin/docker")  # docker_binary(): no docker on PATH is asked
    return load_matrix(release_copy / "constraints" / "matrix.toml")


def test_default_tags(matrix: Matrix) -> None:
    for cell in matrix.cells:
        latest = (f"{IMAGE}:latest",) if cell.id == matrix.release.default_cell else ()
        assert default_tags(matrix, cell) == (f"{IMAGE}:{cell.id}", *latest)


def test_loopback_servers_are_seen(matrix: Matrix) -> None:
    assert not serves_on_loopback(matrix)
    assert serves_on_loopback(load_matrix(REPO_ROOT / "constraints" / "test-matrix.toml"))
    for url in ("http://localhost:8080/simple/", "http://[::1]:3141/simple/", "https://127.0.0.1/simple"):
        local = replace(matrix, indexes=(*matrix.indexes[:-1], replace(matrix.indexes[-1], url=url)))
        assert serves_on_loopback(local), url
    assert not serves_on_loopback(replace(matrix, apt=replace(matrix.apt, url="http://127.0.0.2.example/apt")))


def test_a_missing_lock_names_the_fix(release: Matrix, tmp_path: Path) -> None:
    cell = next(c for c in release.cells if not c.os.wheels_available)
    with pytest.raises(NeuronTorchError) as raised:
        require_lock(release, cell, None)
    message = str(raised.value)
    assert message.startswith(f"cell {cell.id} has no lock at {cell.lock_path.relative_to(release.root)}: ")
    assert f"Run `neuron-torch lock --cell {cell.id}`" in message and message.endswith(f"Note: {cell.os.wheels_note}")
    for given, shown in ((tmp_path / "locks" / "x.txt", "locks/x.txt"), (Path("/nt-none/x.txt"), "/nt-none/x.txt")):
        with pytest.raises(NeuronTorchError, match=f"^cell {cell.id} has no lock at {shown}: "):
            require_lock(release, cell, given)  # a path in the project is shown relative to it


def test_the_lock_must_pass_the_gate(release: Matrix, tmp_path: Path) -> None:
    cell, other = release.cells[0], release.cells[1]
    assert require_lock(release, cell, sound_lock(release, cell, cell.lock_path)) == cell.lock_path
    assert require_lock(release, cell, None) == cell.lock_path
    theirs = sound_lock(release, other, tmp_path / "theirs.txt")
    with pytest.raises(NeuronTorchError, match=f"refusing the lock {theirs} for {cell.id}"):
        require_lock(release, cell, theirs)


def test_stage_writes_the_lock_the_record_and_the_rules(release: Matrix, tmp_path: Path) -> None:
    cell = release.cell(release.release.default_cell)
    mirrored = tuple(replace(i, url=f"https://mirror.example/{i.name}/") for i in release.indexes)
    lock = sound_lock(release, cell, tmp_path / "lock.txt", indexes=mirrored)  # locked through a mirror
    planned, planned_record = stage(release, cell, lock, write=False)
    assert not (release.root / "build").exists()  # a dry run writes nothing
    folder, record = stage(release, cell, lock)
    assert (folder, record) == (planned, planned_record)
    staged = (folder / "lock.txt").read_text()
    assert folder == release.root / "build" / "image" / f"{cell.id}-{hashlib.sha256(staged.encode()).hexdigest()[:12]}"
    options = [line for line in staged.splitlines() if line.startswith("--")]
    assert options == pip_options(release.indexes, None)  # the build installs from the release's own indexes
    staged_lock = read_lock(folder / "lock.txt")
    assert staged_lock.packages == read_lock(lock).packages and staged_lock.seals == read_lock(lock).seals
    expected = {**cell_record(release, cell), "locked": {p.name: p.version for p in read_lock(lock).packages}}
    assert json.loads((folder / "cell.json").read_text()) == record == expected
    assert json.loads((folder / "gate.json").read_text()) == {"forbidden": dict(release.forbidden)}


def test_the_planned_command_for_a_dry_run(release: Matrix, tmp_path: Path) -> None:
    cell = release.cell(release.release.default_cell)
    lock = sound_lock(release, cell, tmp_path / "lock.txt")
    build = plan_image_build(release, cell, lock=lock, dry_run=True)
    assert isinstance(build, ImageBuild) and build.cell == cell
    assert not (release.root / "build").exists()
    assert build.tags == default_tags(release, cell)
    command = list(build.command)
    assert command[:6] == [
        "/opt/docker/bin/docker",
        "build",
        "--file",
        str(release.root / "Dockerfile"),
        "--progress",
        "plain",
    ]
    assert command[-1] == str(release.root)
    assert [command[i + 1] for i, word in enumerate(command) if word == "--tag"] == list(build.tags)
    args = dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--build-arg")
    stage_dir, record = stage(release, cell, lock, write=False)
    assert build.stage_dir == stage_dir
    cell_dir = stage_dir.relative_to(release.root).as_posix()
    checked_at = datetime.strptime(args.pop("APT_KEY_CHECKED_AT"), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs(datetime.now(UTC) - checked_at) < timedelta(minutes=5), "the keyring stage's key is fetched anew"
    assert args == {**build_args(release, record), "CELL_DIR": cell_dir, "REVISION": ""}, "no checkout: no revision"
    again = plan_image_build(release, cell, lock=lock, dry_run=True).command
    assert again != build.command, "each build fetches and checks the apt key again, never from the docker cache"
    assert not {"--network", "--secret", "--target", "--no-cache"} & set(command)


def test_the_options_reach_the_command(release: Matrix, tmp_path: Path) -> None:
    cell = release.cells[0]
    lock = sound_lock(release, cell, tmp_path / "lock.txt")
    (tmp_path / "ca.pem").write_text(PEM)
    shutil.copy(REPO_ROOT / "Dockerfile", release.root / "Dockerfile")  # --target must name one of its stages
    build = plan_image_build(
        release, cell, lock=lock, dry_run=True, tags=("registry.example:5000/ml/nt:1",), network="mirror-net",
        ca_bundle=tmp_path / "ca.pem", target="venv", no_cache=True, proxy={"https_proxy": "http://proxy:3128"},
    )  # fmt: skip
    command = list(build.command)
    assert build.tags == ("registry.example:5000/ml/nt:1",) and command.count("--tag") == 1
    assert command[command.index("--network") + 1] == "mirror-net"
    assert command[command.index("--secret") + 1] == f"id=ca,src={(tmp_path / 'ca.pem').resolve()}"
    assert command[command.index("--target") + 1] == "venv"
    assert "--no-cache" in command and "https_proxy=http://proxy:3128" in command
    assert command[-1] == str(release.root)
    with pytest.raises(NeuronTorchError, match=r"--target 'nt-nostage' is no stage of .*Dockerfile; its stages: os, "):
        plan_image_build(release, cell, lock=lock, dry_run=True, target="nt-nostage")


def test_a_release_on_loopback_builds_on_the_host_network(
    release_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER", "docker")
    testbed = load_matrix(release_copy / "constraints" / "test-matrix.toml")
    cell = testbed.cells[0]
    build = plan_image_build(testbed, cell, lock=sound_lock(testbed, cell, tmp_path / "lock.txt"), dry_run=True)
    assert build.command[build.command.index("--network") + 1] == "host"


@pytest.mark.parametrize("tag", ["Neuron-Torch:x", "nt:a:b", "nt tag"])
def test_a_bad_tag_is_refused_before_staging(release: Matrix, tmp_path: Path, tag: str) -> None:
    cell = release.cells[0]
    lock = sound_lock(release, cell, tmp_path / "lock.txt")
    with pytest.raises(NeuronTorchError, match=f"--tag '{tag}' is not a docker image reference"):
        plan_image_build(release, cell, lock=lock, tags=(tag,))
    assert not (release.root / "build").exists()


def test_running_without_docker_names_the_install(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-docker")
    build = ImageBuild(cell=None, tags=(), command=(missing, "build"), stage_dir=tmp_path, base="b")  # type: ignore[arg-type]
    with pytest.raises(NeuronTorchError, match="no-docker not found: install docker"):
        run_image_build(build)


def test_a_target_without_a_dockerfile_is_one_clear_refusal(release_copy: Path) -> None:
    matrix = load_matrix(release_copy / "constraints" / "matrix.toml")
    with pytest.raises(NeuronTorchError, match=r"no Dockerfile there: name a neuron-torch checkout with --project"):
        check_target(matrix, "runtime")


def test_a_compared_build_must_reach_the_last_stage(release: Matrix) -> None:
    shutil.copy(REPO_ROOT / "Dockerfile", release.root / "Dockerfile")
    check_target(release, "runtime", compare=True)
    check_target(release, "venv")
    with pytest.raises(NeuronTorchError, match=r"--compare checks a whole image's .* --target venv stops before it"):
        check_target(release, "venv", compare=True)


def test_the_resolved_base_replaces_only_the_base_build_args() -> None:
    pinned = "bed/base:1@sha256:" + "1" * 64
    command = ("docker", "build", "--build-arg", f"BASE_IMAGE={pinned}", "--build-arg", f"BASE_REFERENCE={pinned}",
               "--build-arg", "BASE_DIGEST=", "--tag", "BASE_IMAGE=x", ".")  # fmt: skip
    base = Base(pinned, "bed/base:1", "sha256:" + "1" * 64)
    assert with_base(command, base) == (
        "docker", "build", "--build-arg", "BASE_IMAGE=bed/base:1", "--build-arg", f"BASE_REFERENCE={pinned}",
        "--build-arg", f"BASE_DIGEST={base.digest}", "--tag", "BASE_IMAGE=x", ".",
    )  # fmt: skip
