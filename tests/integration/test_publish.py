"""`neuron-torch publish image` against a real registry on loopback (tests/testbed/registry.py: TLS from a throwaway
CA, htpasswd basic auth): the test cell's image (test_image's fixture, so this file is in its lane) is pushed, pulled
back by digest by skopeo into a folder (every blob checked against its digest) and by Docker under a clean tag, and
each tag is read back as the recorded digest. The failures a user meets are checked on the same registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from neuron_torch.bom import SUMS, parse_sums
from neuron_torch.cli import main
from neuron_torch.sbomartifact import SBOM_FILES, check_artifact, write_layout
from tests.integration.test_bom import expected_revision
from tests.integration.test_image import BuiltImage, image  # noqa: F401 (the session's image of the test cell)
from tests.testbed import registry as testbed_registry
from tests.testbed.harness import CELL, DOCKER, TEST_MATRIX, docker, require_docker

PATH = "release-test"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testbed_registry.Registry]:
    require_docker()
    missing = testbed_registry.missing_tools()
    if missing:
        print(f"skipping: install {' '.join(missing)} (scripts/ci-prereqs.sh)")
        pytest.skip(f"the test registry needs {' '.join(missing)} (scripts/ci-prereqs.sh installs them)")
    if os.geteuid() != 0:
        pytest.skip("trusting the registry's CA writes /etc/docker/certs.d (needs root, as in CI)")
    with testbed_registry.running_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


@dataclass(frozen=True)
class Login:
    registry: testbed_registry.Registry
    config: Path  # a DOCKER_CONFIG folder logged in to it


@pytest.fixture(scope="module")
def login(registry: testbed_registry.Registry, tmp_path_factory: pytest.TempPathFactory) -> Login:
    config = tmp_path_factory.mktemp("docker-config")
    registry.login(DOCKER, config)
    return Login(registry, config)


def test_the_registry_is_as_strict_as_a_real_one(registry: testbed_registry.Registry) -> None:
    context = ssl.create_default_context(cafile=str(registry.ca))
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"https://{registry.host}/v2/", context=context, timeout=10)
    assert anonymous.value.code == 401
    with pytest.raises(OSError):  # no plain http beside TLS
        urllib.request.urlopen(f"http://{registry.host}/v2/", timeout=10)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):  # an untrusted CA is refused
        urllib.request.urlopen(f"https://{registry.host}/v2/", context=ssl.create_default_context(), timeout=10)


def publish(tmp_path: Path, config: Path, *extra: str) -> int:
    os.environ["DOCKER_CONFIG"] = str(config)
    try:
        return main(["--matrix", str(TEST_MATRIX), "publish", "image", "--cell", CELL, "--allow-dirty", *extra])
    finally:
        del os.environ["DOCKER_CONFIG"]


def label_of(tag: str, label: str) -> str:
    return docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', tag).stdout.strip()


def raw_manifest_digest(registry: testbed_registry.Registry, reference: str) -> str:
    out = subprocess.run(
        ["skopeo", "inspect", "--raw", "--creds", f"{registry.user}:{registry.password}", f"docker://{reference}"],
        capture_output=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return "sha256:" + hashlib.sha256(out).hexdigest()


def test_publish_pushes_the_tags_and_the_digest_pulls_back_the_same_image(
    image: BuiltImage,  # noqa: F811
    login: Login,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry, logged_in = login.registry, login.config
    record_path = tmp_path / "record.json"
    assert publish(tmp_path, logged_in, "--registry", f"{registry.host}/{PATH}", "--record", str(record_path)) == 0
    out = capsys.readouterr().out
    record = json.loads(record_path.read_text())
    repository = f"{registry.host}/{PATH}/neuron-torch"
    immutable = f"{image.matrix.release.name}-{CELL}-{expected_revision(12)}"
    assert record["repository"] == repository and record["immutable_tag"] == immutable
    assert record["moving_tags"] == [CELL, "latest"], "the test release's default cell also moves latest"
    assert record["bom"] == label_of(image.tag, "io.neuron-torch.bom") and record["bom"].startswith("sha256:")
    digest = record["digest"]
    assert f"digest {digest}" in out and f"pushed {repository}:{immutable}" in out
    for tag in (immutable, CELL, "latest"):
        assert raw_manifest_digest(registry, f"{repository}:{tag}") == digest, tag
    assert record["base_digest"] == label_of(image.tag, "org.opencontainers.image.base.digest")
    assert record["base_image"].endswith(f"@{record['base_digest']}"), "published only on a pinned base"

    # The SBOMs beside it: the recorded artifact, for this digest, each the file the image's SHA256SUMS names.
    sboms = record["sboms"]
    assert sboms["reference"] == f"{repository}:sha256-{digest.removeprefix('sha256:')}.sbom"
    assert raw_manifest_digest(registry, sboms["reference"]) == sboms["digest"] and f"sboms {sboms['reference']}" in out
    artifact = tmp_path / "sboms"
    subprocess.run(["skopeo", "copy", "--quiet", "--src-creds", f"{registry.user}:{registry.password}",
                    f"docker://{sboms['reference']}", f"dir:{artifact}"], check=True, timeout=120)  # fmt: skip
    sums = docker("run", "--rm", "--network", "none", "--entrypoint", "cat", image.tag, SUMS).stdout
    assert check_artifact(artifact, digest, parse_sums(sums)) == sboms["files"]

    # Published again: the immutable tag is kept (no layer is read), the moving tags point at it again.
    again = tmp_path / "again.json"
    assert publish(tmp_path, logged_in, "--registry", f"{registry.host}/{PATH}", "--record", str(again)) == 0
    assert json.loads(again.read_text())["digest"] == digest

    # A clean pull by digest: skopeo into an empty folder, every blob checked against its digest on the way.
    pulled = tmp_path / "pulled"
    creds = f"{registry.user}:{registry.password}"
    subprocess.run(["skopeo", "copy", "--quiet", "--src-creds", creds, f"docker://{repository}@{digest}",
                    f"dir:{pulled}"], check=True, timeout=600)  # fmt: skip
    manifest = (pulled / "manifest.json").read_bytes()
    assert "sha256:" + hashlib.sha256(manifest).hexdigest() == digest
    assert json.loads(manifest)["config"]["digest"] == record["image_id"], "the pushed image is the built one"

    # Docker pulls the digest under a clean tag: the same image.
    clean = f"neuron-torch-publish-test:{os.getpid()}"
    env = {**os.environ, "DOCKER_CONFIG": str(logged_in)}
    try:
        docker("pull", f"{repository}@{digest}", env=env)
        docker("tag", f"{repository}@{digest}", clean)
        assert docker("image", "inspect", "--format", "{{.Id}}", clean).stdout.strip() == record["image_id"]
    finally:
        docker("rmi", clean, f"{repository}@{digest}", check=False)


def test_refused_credentials_and_an_unreachable_registry_are_one_line_each(
    image: BuiltImage,  # noqa: F811
    registry: testbed_registry.Registry,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    anonymous = tmp_path / "no-login"
    anonymous.mkdir()
    record = tmp_path / "record.json"
    assert publish(tmp_path, anonymous, "--registry", registry.host, "--record", str(record)) == 1
    error = capsys.readouterr().err.strip()
    assert f"refused the credentials (unauthorized): run `docker login {registry.host}`" in error
    assert len(error.splitlines()) == 1 and not record.exists()
    assert publish(tmp_path, anonymous, "--registry", "127.0.0.1:1/ml", "--record", str(record)) == 1
    error = capsys.readouterr().err.strip()
    assert "registry 127.0.0.1:1 is unreachable (Connection refused)" in error and len(error.splitlines()) == 1


def make_key(home: Path, name: str) -> tuple[str, Path]:
    """A throwaway GPG signing key in `home`: its fingerprint and its public key (binary, as policy.json reads)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--quiet", "--passphrase", "", "--pinentry-mode", "loopback"]
    subprocess.run([*gpg, "--quick-gen-key", f"{name} <{name}@test.invalid>", "ed25519", "sign", "1d"],
                   env=env, check=True, capture_output=True, timeout=60)  # fmt: skip
    listed = subprocess.run(["gpg", "--list-keys", "--with-colons"], env=env, capture_output=True, text=True).stdout
    fingerprint = next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))
    public = home / "public.gpg"
    public.write_bytes(subprocess.run(["gpg", "--export", fingerprint], env=env, capture_output=True).stdout)
    return fingerprint, public


def policy(path: Path, host: str, key: Path) -> Path:
    rule = {"type": "signedBy", "keyType": "GPGKeys", "keyPath": str(key)}
    path.write_text(json.dumps({"default": [{"type": "reject"}], "transports": {"docker": {host: [rule]}}}))
    return path


def test_signed_tags_verify_and_a_wrong_key_an_unsigned_image_and_a_moved_tag_are_refused(
    image: BuiltImage,  # noqa: F811
    login: Login,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry, logged_in = login.registry, login.config
    fingerprint, public = make_key(tmp_path / "gnupg", "release")
    _, other = make_key(tmp_path / "other-gnupg", "other")
    monkeypatch.setenv("GNUPGHOME", str(tmp_path / "gnupg"))
    monkeypatch.setenv("DOCKER_CONFIG", str(logged_in))
    signatures = tmp_path / "signatures"
    registries_d = tmp_path / "registries.d"
    registries_d.mkdir()
    (registries_d / "test.yaml").write_text(
        f"docker:\n  {registry.host}:\n    sigstore: file://{signatures}\n    sigstore-staging: file://{signatures}\n"
    )
    try:
        argv = ["--matrix", str(TEST_MATRIX), "publish", "image", "--cell", CELL, "--allow-dirty"]
        record = tmp_path / "record.json"
        assert main([*argv, "--registry", f"{registry.host}/{PATH}", "--record", str(record),
                     "--sign-by", fingerprint, "--registries-d", str(registries_d)]) == 0  # fmt: skip
        published = json.loads(record.read_text())
        assert published["signed_by"] == fingerprint
        repository, digest = published["repository"], published["digest"]
        capsys.readouterr()
        good = policy(tmp_path / "good.json", registry.host, public)
        verify = ["verify-image", "--registries-d", str(registries_d), "--policy"]
        assert main([*verify, str(good), f"{repository}@{digest}"]) == 0
        out = capsys.readouterr().out
        assert f"digest {digest}" in out and f"bill of materials: {published['bom']}, its SBOMs list the image's" in out
        assert f"SBOMs beside it: {repository}@{published['sboms']['digest']}, the image's own" in out

        # SBOMs replaced beside the signed image (any bytes, unsigned) are refused before they are read.
        creds = f"{registry.user}:{registry.password}"
        subject = subprocess.run(["skopeo", "inspect", "--raw", "--creds", creds, f"docker://{repository}@{digest}"],
                                 capture_output=True, check=True).stdout  # fmt: skip
        tampered = tmp_path / "tampered"
        tampered.mkdir()
        write_layout(tampered, dict.fromkeys(SBOM_FILES, b'{"components": []}\n'), subject)
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-creds", creds, "--preserve-digests", f"dir:{tampered}",
                        f"docker://{published['sboms']['reference']}"], check=True)  # fmt: skip
        assert main([*verify, str(good), f"{repository}@{digest}"]) == 1
        error = capsys.readouterr().err
        assert f"{published['sboms']['reference']} is refused by {good}: " in error, error

        # A moved tag (the same manifest under a tag nobody signed) and an unsigned image are refused, quickly.
        for target in (f"{repository}:moved", f"{registry.host}/unsigned/neuron-torch:{CELL}"):
            subprocess.run(["skopeo", "copy", "--quiet", "--src-creds", creds, "--dest-creds", creds,
                            f"docker://{repository}@{digest}", f"docker://{target}"], check=True)  # fmt: skip
            assert main([*verify, str(good), target]) == 1
            error = capsys.readouterr().err
            assert f"{target} is refused by {good}: " in error and len(error.strip().splitlines()) == 1, error
        assert main([*verify, str(policy(tmp_path / "other.json", registry.host, other)), f"{repository}:{CELL}"]) == 1
        assert "is refused by" in capsys.readouterr().err
    finally:
        for home in ("gnupg", "other-gnupg"):
            env = {**os.environ, "GNUPGHOME": str(tmp_path / home)}
            subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
