"""A CA passed as a build secret never reaches an image layer; the scan that shows it would catch a leak."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from tests.testbed.harness import BASE, built_testbed, docker, require_docker, scan_image

GOOD = f"""FROM {BASE}
# The build reads the CA (as pip/apt would through PIP_CERT or Acquire::https::CAInfo); only its size persists.
RUN --mount=type=secret,id=ca,required=true test -s /run/secrets/ca && wc -c < /run/secrets/ca > /ca-size
"""
BAD = f"""FROM {BASE}
COPY ca.pem /usr/local/share/ca-certificates/corp.crt
"""


def _fake_ca() -> bytes:
    # Unique bytes per run, shaped like a PEM certificate: the scan looks for exactly these bytes.
    body = secrets.token_hex(48)
    return f"-----BEGIN CERTIFICATE-----\nneuron-torch-secret-{body}\n-----END CERTIFICATE-----\n".encode()


def _build(context: Path, tag: str, *extra: str) -> None:
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    docker("build", "--no-cache", "--progress", "plain", "-t", tag, *extra, str(context), env=env)


def test_a_ca_build_secret_is_absent_from_every_layer(tmp_path: Path) -> None:
    require_docker()
    built_testbed()
    ca = _fake_ca()
    secret = tmp_path / "secret" / "ca.pem"
    secret.parent.mkdir()
    secret.write_bytes(ca)
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (good / "Dockerfile").write_text(GOOD)
    (bad / "Dockerfile").write_text(BAD)
    (bad / "ca.pem").write_bytes(ca)
    try:
        _build(good, "neuron-torch-secret-good", "--secret", f"id=ca,src={secret}")
        _build(bad, "neuron-torch-secret-bad")
        assert scan_image("neuron-torch-secret-good", ca) == []
        # The same scan finds the CA in the deliberately bad image: it is a real check, not a vacuous one.
        assert scan_image("neuron-torch-secret-bad", ca), "the scan failed to find a CA that was COPYed in"
    finally:
        docker("rmi", "-f", "neuron-torch-secret-good", "neuron-torch-secret-bad", check=False)
