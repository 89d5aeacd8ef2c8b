"""`neuron-torch publish image`: push a cell's built image `neuron-torch:<cell>` to a registry and record its digest.

Tags: `<release>-<cell>-<git sha>` is the immutable one (12 hex digits of the checkout's commit; a release never
moves it); `<cell>`, and `latest` for the release's default cell, are moving tags that follow the newest publish.
All of them name one manifest: the digest, printed and written to a JSON record, is what a platform team pins.

The push is skopeo's, from the Docker engine the image was built in (`docker-daemon:`), with Docker's credentials
(`docker login`, $DOCKER_CONFIG/config.json) and Docker's CA trust (/etc/docker/certs.d/HOST/ca.crt, which skopeo
reads too); it writes gzip at level 1, which every client pulls, several times faster than `docker push`. Each
problem is one line naming the fix: no such cell, image not built (or built for another release or cell), a registry
named without a host, registry unreachable, TLS untrusted, credentials refused. An image built on a base not pinned
by digest is refused before anything is pushed. After the image, its SBOMs are pushed beside it as an OCI artifact
(neuron_torch.sbomartifact: tag `sha256-<digest>.sbom`), signed like its tags, and recorded with their digests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from neuron_cell.boundary import quote
from neuron_torch.baseimage import PIN_HOW, split
from neuron_torch.bom import BOM_DIR, parse_sums, read_file, read_sums
from neuron_torch.bom import LABEL as BOM_LABEL
from neuron_torch.build import IMAGE, docker_binary
from neuron_torch.buildargs import DOCKER_TAG
from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.files import check_output_file, replace_text
from neuron_torch.gitrev import git_revision
from neuron_torch.matrix import Cell, Matrix
from neuron_torch.sbomartifact import SBOM_FILES, sbom_tag, sha256, write_layout

RECORD_SCHEMA = 1
BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"
_HOST = re.compile(r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9-]+)*(?::[0-9]{1,5})?")
# skopeo's words for each failure (containers/image's and the registry's, distribution's error codes among them).
_AUTH = ("unauthorized", "authentication required", "no basic auth credentials", "denied", "403 forbidden")
_TLS = ("x509:", "certificate signed by unknown authority", "tls: ", "server gave http response to https client")
_UNREACHABLE = ("connection refused", "no such host", "i/o timeout", "network is unreachable", "no route to host")


@dataclass(frozen=True)
class Publication:
    """What one publish pushed: the record a platform team audits (written as JSON, schema RECORD_SCHEMA)."""

    schema: int
    cell: str
    release: str
    revision: str
    image: str
    image_id: str
    bom: str | None
    sboms: dict[str, Any]  # the SBOMs pushed beside the image: reference, digest, each file's digest
    base_image: str
    base_digest: str
    signed_by: str | None
    repository: str
    digest: str
    reference: str
    immutable_tag: str
    moving_tags: list[str]
    pushed_at: str


def registry_repository(value: str) -> str:
    """`REG[/PATH]` as the repository `REG[/PATH]/neuron-torch`; a value docker would read otherwise is refused."""
    fix = "give --registry HOST[:PORT][/PATH], e.g. registry.example.com/ml or 127.0.0.1:5000"
    if "://" in value:
        raise NeuronTorchError(f"--registry {quote(value)}: no scheme (docker pushes over https); {fix}")
    host, _, path = value.rstrip("/").partition("/")
    if not _HOST.fullmatch(host) or not ("." in host or ":" in host or host == "localhost"):
        raise NeuronTorchError(
            f"--registry {quote(value)} names no registry host (docker would read {quote(host)} as a Docker Hub "
            f"namespace); {fix}"
        )
    repository = f"{host}/{path}/{IMAGE}" if path else f"{host}/{IMAGE}"
    if not DOCKER_TAG.fullmatch(repository) or "@" in value or path.count(":"):
        raise NeuronTorchError(
            f"--registry {quote(value)}: the path must be lowercase letters, digits and . _ - parts separated by /, "
            f"with no tag or digest; {fix}"
        )
    return repository


def release_tags(matrix: Matrix, cell: Cell, revision: str) -> tuple[str, list[str]]:
    """(the immutable tag, the moving tags) of a cell's image."""
    moving = [cell.id] + (["latest"] if cell.id == matrix.release.default_cell else [])
    return f"{matrix.release.name}-{cell.id}-{revision}", moving


def local_image(docker: str, matrix: Matrix, cell: Cell) -> tuple[str, dict[str, str]]:
    """The built image's id and its labels; refused when there is no image, or it is another release's or cell's
    image."""
    tag = f"{IMAGE}:{cell.id}"
    inspected = subprocess.run(
        [docker, "image", "inspect", "--format", "{{.Id}} {{json .Config.Labels}}", tag],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    build = f"`neuron-torch build image --cell {cell.id}`"
    if inspected.returncode != 0:
        if "No such image" not in inspected.stderr:
            raise NeuronTorchError(f"{docker} cannot reach its engine: {inspected.stderr.strip()}", EXIT_FAILED)
        raise NeuronTorchError(f"no image {tag} on this Docker engine: build it first with {build}")
    image_id, _, labels_json = inspected.stdout.strip().partition(" ")
    labels = json.loads(labels_json) or {}
    built = (labels.get("io.neuron-torch.release"), labels.get("io.neuron-torch.cell"))
    if built != (matrix.release.name, cell.id):
        raise NeuronTorchError(
            f"{tag} was built for release {built[0]}, cell {built[1]}, not {matrix.release.name}, {cell.id}: "
            f"rebuild it with {build}"
        )
    return image_id, labels


def pinned_base(tag: str, cell: Cell, labels: dict[str, str]) -> tuple[str, str]:
    """The release gate on the base: (the base as the release named it, the digest the build was on); refused (exit
    2, before any push) when the image was built on a base not pinned by digest."""
    reference, digest = labels.get(BASE_NAME_LABEL, ""), labels.get(BASE_DIGEST_LABEL, "")
    if split(reference)[1] is None or split(reference)[1] != digest:
        raise NeuronTorchError(
            f"{tag} was built on the base image {quote(reference or '(not recorded)')}, not pinned by digest: a "
            f"release image names the base it was built on by digest. Pin it: {PIN_HOW}. Then rebuild with "
            f"`neuron-torch build image --cell {cell.id} --release` and publish"
        )
    return reference, digest


def check_reachable(repository: str, timeout: float = 10) -> None:
    """The registry's host accepts connections (https: port 443 unless named)."""
    host = repository.split("/", 1)[0]
    name, _, port = host.partition(":")
    try:
        socket.create_connection((name, int(port or 443)), timeout=timeout).close()
    except OSError as error:
        raise NeuronTorchError(
            f"registry {host} is unreachable ({error.strerror or error}): check the name and port in --registry, "
            "and that the registry runs and this machine reaches it",
            EXIT_FAILED,
        ) from None


def push_failure(host: str, output: str) -> NeuronTorchError:
    """A failed push as one line naming the fix."""
    text = output.lower()
    if any(word in text for word in _AUTH):
        return NeuronTorchError(
            f"registry {host} refused the credentials (unauthorized): run `docker login {host}` with an account "
            "allowed to push there, then publish again",
            EXIT_FAILED,
        )
    if any(word in text for word in _TLS):
        return NeuronTorchError(
            f"registry {host}: its TLS certificate is not trusted by Docker: put its CA in "
            f"/etc/docker/certs.d/{host}/ca.crt (no dockerd restart needed), then publish again",
            EXIT_FAILED,
        )
    if any(word in text for word in _UNREACHABLE):
        return NeuronTorchError(f"registry {host} is unreachable: {last_line(output)}", EXIT_FAILED)
    return NeuronTorchError(f"the push to {host} failed: {last_line(output)}", EXIT_FAILED)


def last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def docker_auth_file() -> Path | None:
    """Docker's client configuration, where `docker login` keeps credentials ($DOCKER_CONFIG or ~/.docker)."""
    folder = Path(os.environ["DOCKER_CONFIG"]) if os.environ.get("DOCKER_CONFIG") else Path.home() / ".docker"
    path = folder / "config.json"
    return path if path.is_file() else None


def skopeo_binary() -> str:
    found = shutil.which("skopeo")
    if found is None:
        raise NeuronTorchError(
            "skopeo is not on PATH: install it (Debian/Ubuntu: apt-get install skopeo), then publish"
        )
    return found


def auth_options() -> list[str]:
    auth = docker_auth_file()
    return ["--authfile", str(auth)] if auth else []


def raw_manifest(skopeo: str, reference: str) -> bytes | None:
    """The manifest a reference names, as the registry serves it; None when the registry has no such tag."""
    result = subprocess.run([skopeo, "inspect", "--raw", *auth_options(), f"docker://{reference}"],
                            capture_output=True, check=False, timeout=120)  # fmt: skip
    if result.returncode != 0:
        error = result.stderr.decode(errors="replace")
        if "manifest unknown" in error.lower():
            return None
        raise push_failure(reference.split("/", 1)[0], error)
    return result.stdout


def published(skopeo: str, reference: str) -> tuple[str, str] | None:
    """(its config digest, i.e. the image id; its manifest digest) of the image a tag names already; None when the
    registry has no such tag. Asked before any layer is read, so a refused login or an untrusted CA is named at once."""
    manifest = raw_manifest(skopeo, reference)
    if manifest is None:
        return None
    try:
        config: str = json.loads(manifest)["config"]["digest"]
    except (ValueError, KeyError, TypeError):
        message = f"{reference} names no single image manifest: {manifest[:200]!r}"
        raise NeuronTorchError(message, EXIT_FAILED) from None
    return config, sha256(manifest)


def copy(skopeo: str, source: str, destination: str, *options: str) -> str:
    """One `skopeo copy` with Docker's credentials; the digest of the manifest it pushed. Its temporary files (a
    docker-daemon source is first written out whole, as docker-tar*) go into a folder of ours, not /var/tmp (skopeo
    1.9 ignores TMPDIR): a skopeo stopped by Ctrl-C leaves its file there, and the folder goes with it."""
    with tempfile.TemporaryDirectory(prefix="neuron-torch-publish-") as folder:
        digest_file = Path(folder) / "digest"
        scratch = Path(folder) / "tmp"
        scratch.mkdir()
        command = [skopeo, "--tmpdir", str(scratch), "copy", "--quiet", *options, "--digestfile", str(digest_file)]
        command += auth_options()
        result = subprocess.run([*command, source, destination], capture_output=True, text=True, check=False)
        digest = digest_file.read_text().strip() if digest_file.is_file() else ""
    if result.returncode != 0 or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise push_failure(destination.removeprefix("docker://").split("/", 1)[0], result.stdout + result.stderr)
    return digest


def push(
    source: str, image_id: str, repository: str, immutable: str, moving: list[str], signing: tuple[str, ...] = ()
) -> str:
    """Push the local image as repository:immutable (layers gzip level 1: a 1 GB venv layer compresses several
    times faster than at docker's level 6, and any client pulls it), then point each moving tag at that manifest
    (a registry-side copy: no layer moves); the digest. An immutable tag is never moved: one that names another
    image is refused, one that names this image already is kept (a second publish only moves the moving tags)."""
    skopeo = skopeo_binary()
    target = f"{repository}:{immutable}"
    found = published(skopeo, target)
    if found is not None and found[0] != image_id:
        raise NeuronTorchError(
            f"{target} is published already, as another image ({found[0]}, not {image_id}): an immutable tag is "
            "never moved: commit the change and publish that commit (or pull the published image by its tag)",
            EXIT_FAILED,
        )
    compression = ["--dest-compress-format", "gzip", "--dest-compress-level", "1"]
    if found is None:
        digest = copy(skopeo, f"docker-daemon:{source}", f"docker://{target}", *compression, *signing)
    else:
        digest = found[1]
        if signing:  # a signature for the published image, under its immutable tag's identity
            copy(skopeo, f"docker://{repository}@{digest}", f"docker://{target}", "--preserve-digests", *signing)
    for tag in moving:  # each tag signed for its own identity: a signature of another tag does not pass a policy
        moved = copy(
            skopeo, f"docker://{repository}@{digest}", f"docker://{repository}:{tag}", "--preserve-digests", *signing
        )
        if moved != digest:  # one image, one manifest: a registry that rewrites it is named
            raise NeuronTorchError(f"{repository}:{tag} got digest {moved}, not {digest}", EXIT_FAILED)
    return digest


def read_sboms(docker: str, image: str) -> dict[str, bytes]:
    """The image's SBOMs, each checked to be the file its SHA256SUMS names."""
    sums = parse_sums(read_sums(docker, image))
    files = {name: read_file(docker, image, f"{BOM_DIR}/{name}") for name in SBOM_FILES}
    for name, content in files.items():
        if sha256(content) != f"sha256:{sums.get(name)}":
            raise NeuronTorchError(f"{image}: {BOM_DIR}/{name} is not the file its SHA256SUMS names", EXIT_FAILED)
    return files


def push_sboms(repository: str, digest: str, files: dict[str, bytes], signing: tuple[str, ...]) -> dict[str, Any]:
    """Push the SBOMs beside the image `repository@digest` (neuron_torch.sbomartifact), signed as its tags are;
    what the record keeps of them."""
    skopeo = skopeo_binary()
    subject = raw_manifest(skopeo, f"{repository}@{digest}")
    if subject is None or sha256(subject) != digest:
        raise NeuronTorchError(f"{repository}@{digest} is not in the registry after its push", EXIT_FAILED)
    target = f"{repository}:{sbom_tag(digest)}"
    with tempfile.TemporaryDirectory(prefix="neuron-torch-sbom-") as folder:
        write_layout(Path(folder), files, subject)
        pushed = copy(skopeo, f"dir:{folder}", f"docker://{target}", "--preserve-digests", *signing)
    return {
        "reference": target,
        "digest": pushed,
        "files": {name: sha256(content) for name, content in files.items()},
    }


def default_record(matrix: Matrix, immutable_tag: str) -> Path:
    return matrix.root / "build" / "publish" / f"{immutable_tag}.json"


def signing_options(sign_by: str | None, registries_d: Path | None) -> tuple[str, ...]:
    """skopeo's options that sign each pushed tag (containers-image simple signing with this GPG key), its
    signatures written where the registries.d configuration says (`lookaside-staging`)."""
    if sign_by is None:
        return ()
    if not re.fullmatch(r"[0-9A-Fa-f]{16,40}", sign_by):
        raise NeuronTorchError(
            f"--sign-by {quote(sign_by)} is not a GPG key fingerprint: give the key's 40 hex digits "
            "(`gpg --list-secret-keys --with-colons`, its fpr line)"
        )
    if registries_d is not None and not registries_d.is_dir():
        raise NeuronTorchError(f"--registries-d {registries_d} is not a folder of registries.d YAML files")
    return ("--sign-by", sign_by, *(("--registries.d", str(registries_d)) if registries_d else ()))


def publish_image(
    matrix: Matrix,
    cell: Cell,
    registry: str,
    *,
    record: Path | None = None,
    allow_dirty: bool = False,
    sign_by: str | None = None,
    registries_d: Path | None = None,
) -> tuple[Publication, Path]:
    """Push the cell's image under its tags (the immutable one first) and write the record; (record, its path)."""
    repository = registry_repository(registry)
    signing = signing_options(sign_by, registries_d)
    revision = git_revision(matrix.root, allow_dirty)
    immutable, moving = release_tags(matrix, cell, revision)
    path = record or default_record(matrix, immutable)
    check_output_file(path, "--record")
    docker = docker_binary()
    source = f"{IMAGE}:{cell.id}"
    image_id, labels = local_image(docker, matrix, cell)
    base, base_digest = pinned_base(source, cell, labels)
    sboms = read_sboms(docker, source)
    check_reachable(repository)
    digest = push(source, image_id, repository, immutable, moving, signing)
    pushed_sboms = push_sboms(repository, digest, sboms, signing)
    publication = Publication(
        schema=RECORD_SCHEMA,
        cell=cell.id,
        release=matrix.release.name,
        revision=revision,
        image=source,
        image_id=image_id,
        bom=labels.get(BOM_LABEL),
        sboms=pushed_sboms,
        base_image=base,
        base_digest=base_digest,
        repository=repository,
        digest=digest,
        reference=f"{repository}@{digest}",
        signed_by=sign_by,
        immutable_tag=immutable,
        moving_tags=moving,
        pushed_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    replace_text(path, json.dumps(asdict(publication), indent=2) + "\n")
    return publication, path
