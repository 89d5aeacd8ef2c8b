"""neuron_torch.publish without a registry: the --registry forms (a Docker Hub namespace, a scheme, a tag refused),
the tags of a cell, the commit an immutable tag names (an edited checkout refused unless --allow-dirty), and the
push through a fake `docker` ($DOCKER): the built image checked first, each failure one line naming the fix, nothing
written when it fails, the record when it works. The real push is tests/integration/test_publish.py."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from neuron_cell.boundary import EXIT_INTERRUPTED
from neuron_torch.cli import main
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Matrix
from neuron_torch.publish import push_failure, registry_repository, release_tags, signing_options
from neuron_torch.sbomartifact import check_artifact

# The image manifest the registry holds after the push (the fake skopeo's), and its digest.
MANIFEST = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:1234"}})
DIGEST = "sha256:" + hashlib.sha256(MANIFEST.encode()).hexdigest()
SBOMS = {"sbom-venv.cdx.json": b'{"components": []}\n', "sbom-apt.cdx.json": b'{"components": [1]}\n'}
SUMS = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in SBOMS.items())
BASE_DIGEST = "sha256:" + "ba" * 32
# docker image inspect ... neuron-torch:CELL | docker run ... --entrypoint cat IMAGE /etc/neuron-torch/bom/FILE
FAKE_DOCKER = """#!/bin/sh
[ "$FAKE_IMAGE" = none ] && { echo "Error: No such image: $5" >&2; exit 1; }
if [ "$1" = run ]; then for last; do :; done; exec cat "$FAKE_BOM/${last##*/}"; fi
labels="\\"io.neuron-torch.release\\":\\"$FAKE_RELEASE\\",\\"io.neuron-torch.cell\\":\\"$FAKE_CELL\\""
base="\\"org.opencontainers.image.base.name\\":\\"$FAKE_BASE\\",\\"org.opencontainers.image.base.digest\\":\\"$FAKE_BASE_DIGEST\\""
labels="$labels,$base"
echo "sha256:1234 {$labels,\\"io.neuron-torch.bom\\":\\"sha256:b0\\"}"
"""
# skopeo copy [options] --digestfile FILE [--authfile FILE] SOURCE DESTINATION
FAKE_SKOPEO = """#!/usr/bin/env python3
import os, shutil, signal, sys
args = sys.argv[1:]
if os.environ["FAKE_PUSH_ERROR"]:
    sys.exit(os.environ["FAKE_PUSH_ERROR"])
if args[0] == "inspect":  # inspect --raw [--authfile FILE] docker://REF: by digest, the pushed image's
    if "@" in args[-1]:
        print(os.environ["FAKE_PUBLISHED"] or os.environ["FAKE_MANIFEST"], end="")
        sys.exit(0)
    if not os.environ["FAKE_PUBLISHED"]:
        sys.exit("reading manifest x: manifest unknown: manifest unknown")
    print(os.environ["FAKE_PUBLISHED"], end="")
    sys.exit(0)
# skopeo 1.9 writes a docker-daemon source out whole first, into --tmpdir or else /var/tmp (TMPDIR is ignored), and
# a SIGINT leaves that file behind (measured with the real skopeo 1.9.3); FAKE_VAR_TMP stands for /var/tmp.
scratch = args[1] if args[0] == "--tmpdir" else os.environ["FAKE_VAR_TMP"]
if args[-2].startswith("docker-daemon:"):
    open(os.path.join(scratch, "docker-tar123"), "w").write("the image, written out")
if os.environ.get("FAKE_INTERRUPT"):  # the user presses Ctrl-C: the terminal signals the whole process group
    os.kill(os.getppid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
open(os.environ["FAKE_LOG"], "a").write(" ".join(args) + "\\n")
if args[-2].startswith("dir:"):  # the SBOMs' artifact: kept for the test to read
    shutil.copytree(args[-2].removeprefix("dir:"), os.environ["FAKE_SBOM_COPY"])
open(args[args.index("--digestfile") + 1], "w").write(os.environ["FAKE_DIGEST"] + "\\n")
"""


@pytest.mark.parametrize(
    ("value", "repository"),
    [
        ("registry.example.com", "registry.example.com/neuron-torch"),
        ("registry.example.com/ml/team/", "registry.example.com/ml/team/neuron-torch"),
        ("127.0.0.1:5000/ml", "127.0.0.1:5000/ml/neuron-torch"),
        ("localhost:5000", "localhost:5000/neuron-torch"),
    ],
)
def test_a_registry_and_path_name_the_repository(value: str, repository: str) -> None:
    assert registry_repository(value) == repository


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("ml", "names no registry host (docker would read 'ml' as a Docker Hub namespace)"),
        ("https://registry.example.com", "no scheme"),
        ("registry.example.com/ML", "the path must be lowercase"),
        ("registry.example.com/ml:1", "no tag or digest"),
    ],
)
def test_a_registry_docker_would_read_otherwise_is_refused(value: str, problem: str) -> None:
    with pytest.raises(NeuronTorchError, match="HOST\\[:PORT\\]\\[/PATH\\]") as error:
        registry_repository(value)
    assert problem in str(error.value) and error.value.exit_code == 2


def test_the_default_cell_also_moves_latest(test_release: Matrix) -> None:
    default = test_release.cell(test_release.release.default_cell)
    other = next(cell for cell in test_release.cells if cell.id != default.id)
    name = test_release.release.name
    assert release_tags(test_release, default, "0123456789ab") == (
        f"{name}-{default.id}-0123456789ab", [default.id, "latest"]
    )  # fmt: skip
    assert release_tags(test_release, other, "0123456789ab")[1] == [other.id]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def committed(test_release: Matrix) -> Matrix:
    root = test_release.root
    git(root, "init", "-q")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release")
    return test_release


@pytest.mark.parametrize(
    ("output", "fix"),
    [
        ("unauthorized: authentication required", "refused the credentials (unauthorized): run `docker login r.io`"),
        ("no basic auth credentials", "run `docker login r.io`"),
        ("denied: requested access to the resource is denied", "run `docker login r.io`"),
        ("x509: certificate signed by unknown authority", "/etc/docker/certs.d/r.io/ca.crt"),
        ("Get https://r.io/v2/: dial tcp: lookup r.io: no such host", "r.io is unreachable: Get https"),
        ("something else\nblob upload invalid", "the push to r.io failed: blob upload invalid"),
    ],
)
def test_each_push_failure_names_its_fix(output: str, fix: str) -> None:
    error = push_failure("r.io", output)
    assert fix in str(error) and error.exit_code == 1


@pytest.fixture
def listening() -> Iterator[str]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def fake_docker(committed: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "docker"
    script.write_text(FAKE_DOCKER)
    script.chmod(0o755)
    (tmp_path / "bin").mkdir()
    skopeo = tmp_path / "bin" / "skopeo"
    skopeo.write_text(FAKE_SKOPEO)
    skopeo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "docker.log"
    cell = committed.release.default_cell
    (tmp_path / "bom").mkdir()
    for name, data in {**SBOMS, "SHA256SUMS": SUMS.encode()}.items():
        (tmp_path / "bom" / name).write_bytes(data)
    monkeypatch.setenv("FAKE_BOM", str(tmp_path / "bom"))
    monkeypatch.setenv("FAKE_MANIFEST", MANIFEST)
    monkeypatch.setenv("FAKE_SBOM_COPY", str(tmp_path / "sbom-artifact"))
    (tmp_path / "var-tmp").mkdir()
    monkeypatch.setenv("FAKE_VAR_TMP", str(tmp_path / "var-tmp"))
    env = {"DOCKER": str(script), "FAKE_LOG": str(log), "FAKE_DIGEST": DIGEST, "FAKE_IMAGE": "built",
           "FAKE_RELEASE": committed.release.name, "FAKE_CELL": cell, "FAKE_PUSH_ERROR": "",
           "FAKE_PUBLISHED": "", "FAKE_BASE": f"base:1@{BASE_DIGEST}", "FAKE_BASE_DIGEST": BASE_DIGEST}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return log


@dataclass(frozen=True)
class Site:
    matrix: Matrix  # the committed test release
    pushes: Path  # what the fake docker and skopeo were asked to do
    registry: str  # a listening registry address


@pytest.fixture
def site(committed: Matrix, fake_docker: Path, listening: str) -> Site:
    return Site(committed, fake_docker, listening)


def run_publish(matrix: Matrix, registry: str, record: Path) -> int:
    cell = matrix.release.default_cell
    argv = ["--matrix", str(matrix.path), "publish", "image", "--cell", cell, "--registry", registry]
    return main([*argv, "--record", str(record)])


def test_publish_pushes_the_immutable_tag_first_and_records_the_digest(
    committed: Matrix, fake_docker: Path, listening: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "out" / "record.json"
    assert run_publish(committed, f"{listening}/ml", record) == 0
    cell, sha = committed.release.default_cell, git(committed.root, "rev-parse", "HEAD")[:12]
    repository = f"{listening}/ml/neuron-torch"
    immutable = f"{committed.release.name}-{cell}-{sha}"
    copies = [line.split()[-2:] for line in fake_docker.read_text().splitlines()]
    sbom_tag = f"{repository}:sha256-{DIGEST.removeprefix('sha256:')}.sbom"
    assert copies[:3] == [
        [f"docker-daemon:neuron-torch:{cell}", f"docker://{repository}:{immutable}"],
        [f"docker://{repository}@{DIGEST}", f"docker://{repository}:{cell}"],
        [f"docker://{repository}@{DIGEST}", f"docker://{repository}:latest"],
    ], "the immutable tag first, from the engine; the moving tags point at its manifest"
    assert copies[3][0].startswith("dir:") and copies[3][1] == f"docker://{sbom_tag}" and len(copies) == 4
    assert "--preserve-digests" in fake_docker.read_text().splitlines()[3], "pushed as written, so it can be signed"
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in SBOMS.items()}
    files = check_artifact(tmp_path / "sbom-artifact", DIGEST, sums)  # the image's own SBOMs, naming it
    data = json.loads(record.read_text())
    assert data["digest"] == DIGEST and data["reference"] == f"{repository}@{DIGEST}"
    assert data["image_id"] == "sha256:1234" and data["bom"] == "sha256:b0" and data["revision"] == sha
    assert data["moving_tags"] == [cell, "latest"]
    assert (data["base_image"], data["base_digest"]) == (f"base:1@{BASE_DIGEST}", BASE_DIGEST)
    assert data["sboms"] == {"reference": sbom_tag, "digest": DIGEST, "files": files}
    out = capsys.readouterr().out
    assert f"digest {DIGEST}" in out and f"sboms {sbom_tag} (digest {DIGEST})" in out


@pytest.mark.parametrize(
    ("setting", "message", "code"),
    [
        (("FAKE_IMAGE", "none"), "no image neuron-torch:{cell} on this Docker engine: build it first with "
         "`neuron-torch --matrix {matrix} build image --cell {cell}`", 2),
        (("FAKE_RELEASE", "neuron-2.32.0"), "was built for release neuron-2.32.0", 2),
        (("FAKE_BASE", "ubuntu:26.04"), "neuron-torch:{cell} was built on the base image 'ubuntu:26.04', not pinned "
         "by digest: a release image names the base it was built on by digest. Pin it: base_image = ", 2),
        (("FAKE_BASE_DIGEST", DIGEST), "was built on the base image 'base:1@sha256:baba", 2),
        (("FAKE_PUSH_ERROR", "unauthorized: authentication required"), "refused the credentials", 1),
    ],
)  # fmt: skip
def test_publish_failures_are_one_line_and_write_nothing(
    site: Site,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    setting: tuple[str, str],
    message: str,
    code: int,
) -> None:
    committed, fake_docker, listening = site.matrix, site.pushes, site.registry
    monkeypatch.setenv(*setting)
    record = tmp_path / "record.json"
    assert run_publish(committed, listening, record) == code
    error = capsys.readouterr().err.strip()
    assert message.format(cell=committed.release.default_cell, matrix=committed.path) in error
    assert len(error.splitlines()) == 1 and not record.exists()
    assert not fake_docker.exists(), "nothing pushed"


def test_ctrl_c_during_a_push_is_one_line_and_leaves_no_temporary_file(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_INTERRUPT", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    record = tmp_path / "record.json"
    assert run_publish(site.matrix, site.registry, record) == EXIT_INTERRUPTED
    assert "interrupted (Ctrl-C)" in capsys.readouterr().err
    assert not record.exists()
    assert list((tmp_path / "var-tmp").iterdir()) == [], "skopeo wrote the image to /var/tmp, where nobody removes it"
    assert list((tmp_path / "tmp").iterdir()) == [], "the push's own folder (and skopeo's file in it) is removed"


def test_an_immutable_tag_is_never_moved_and_a_second_publish_moves_only_the_moving_tags(
    site: Site,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    committed, fake_docker, listening = site.matrix, site.pushes, site.registry
    manifest = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:1234"}})
    digest = "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()
    monkeypatch.setenv("FAKE_PUBLISHED", manifest)
    monkeypatch.setenv("FAKE_DIGEST", digest)
    assert run_publish(committed, listening, tmp_path / "again.json") == 0
    sources = [line.split()[-2] for line in fake_docker.read_text().splitlines()]
    assert sources[:2] == [f"docker://{listening}/neuron-torch@{digest}"] * 2, "no layer is read again"
    assert sources[2].startswith("dir:") and len(sources) == 3, "the SBOMs pushed again (the same bytes)"
    assert json.loads((tmp_path / "again.json").read_text())["digest"] == digest

    monkeypatch.setenv("FAKE_PUBLISHED", manifest.replace("sha256:1234", "sha256:5678"))
    assert run_publish(committed, listening, tmp_path / "other.json") == 1
    error = capsys.readouterr().err
    assert (
        "is published already, as another image (sha256:5678, not sha256:1234): an immutable tag is never moved"
        in error
    )
    assert not (tmp_path / "other.json").exists()


def test_an_unknown_cell_and_an_unreachable_registry_are_refused(
    committed: Matrix, fake_docker: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--matrix", str(committed.path), "publish", "image", "--registry", "127.0.0.1:1"]
    assert main([*argv, "--cell", "9.99-py3.11-debian12"]) == 2
    assert "9.99" in capsys.readouterr().err
    assert main([*argv, "--cell", committed.release.default_cell, "--record", str(tmp_path / "r.json")]) == 1
    error = capsys.readouterr().err
    assert "registry 127.0.0.1:1 is unreachable" in error and not (tmp_path / "r.json").exists()


def test_signing_takes_a_fingerprint_and_a_registries_d_folder(tmp_path: Path) -> None:
    fingerprint = "89028D16B2A201329C5732376EE6FFB984330729"
    assert signing_options(None, None) == ()
    assert signing_options(fingerprint, tmp_path) == ("--sign-by", fingerprint, "--registries.d", str(tmp_path))
    with pytest.raises(NeuronTorchError, match="is not a GPG key fingerprint"):
        signing_options("release@example.com", None)
    with pytest.raises(NeuronTorchError, match=r"is not a folder of registries\.d YAML files"):
        signing_options(fingerprint, tmp_path / "none")


def test_sboms_that_are_not_the_files_sha256sums_names_are_not_pushed(
    committed: Matrix, fake_docker: Path, listening: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bom" / "sbom-apt.cdx.json").write_bytes(b'{"components": [2]}\n')
    assert run_publish(committed, listening, tmp_path / "record.json") == 1
    error = capsys.readouterr().err
    assert "/etc/neuron-torch/bom/sbom-apt.cdx.json is not the file its SHA256SUMS names" in error
    assert not fake_docker.exists() and not (tmp_path / "record.json").exists(), "nothing pushed, nothing written"
