"""A real container registry on loopback for the release tests: Debian's `docker-registry` (the CNCF distribution
registry, 2.8) on 127.0.0.1:38443 with TLS from a throwaway CA and htpasswd (bcrypt) basic auth, as a registry a
platform team runs. Nothing is kinder than the real one: plain HTTP is refused, anonymous pushes and pulls are
refused, and Docker trusts the CA only through /etc/docker/certs.d/127.0.0.1:38443/ca.crt (read per connection:
dockerd is not restarted). scripts/ci-prereqs.sh installs docker-registry, apache2-utils (htpasswd) and openssl.

Docker's client credentials go to a folder of the test's own (DOCKER_CONFIG), never to ~/.docker/config.json.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1:38443"
CERTS_D = Path("/etc/docker/certs.d") / HOST
TOOLS = {"docker-registry": "docker-registry", "htpasswd": "apache2-utils", "openssl": "openssl"}

CONFIG = """version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: {host}
  tls:
    certificate: {cert}
    key: {key}
auth:
  htpasswd:
    realm: neuron-torch-test-registry
    path: {htpasswd}
"""


@dataclass(frozen=True)
class Registry:
    host: str
    user: str
    password: str
    ca: Path
    folder: Path

    def login(self, docker: str, config: Path) -> None:
        """`docker login` with the registry's credentials, written to the DOCKER_CONFIG folder `config` only."""
        subprocess.run(
            [docker, "login", "--username", self.user, "--password-stdin", self.host],
            input=self.password, env={**os.environ, "DOCKER_CONFIG": str(config)},
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip


def missing_tools() -> list[str]:
    """The Debian packages to install for the registry (none when every tool is on PATH)."""
    return sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], capture_output=True, check=True, timeout=60)


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it: (ca.crt, server.crt, server.key)."""
    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
             "-subj", "/CN=neuron-torch test registry CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _openssl("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    extensions = folder / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(cert), "-days", "2", "-extfile", str(extensions))  # fmt: skip
    return ca, cert, key


def _listening(host: str) -> bool:
    address, port = host.rsplit(":", 1)
    try:
        with socket.create_connection((address, int(port)), timeout=1):
            return True
    except OSError:
        return False


def _wait_ready(registry: Registry, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until /v2/ answers 401 over TLS with the CA (the registry is up and refuses anonymous clients)."""
    context = ssl.create_default_context(cafile=str(registry.ca))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"https://{registry.host}/v2/", context=context, timeout=2)
        except urllib.error.HTTPError as error:
            if error.code == 401:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"docker-registry did not answer on {registry.host} within 30 s: {log.read_text()[-2000:]}")


@contextmanager
def running_registry(folder: Path, host: str = HOST) -> Iterator[Registry]:
    """The registry, serving until the block ends; its CA trusted by dockerd (certs.d) meanwhile. Needs root (certs.d)
    and the port free: a registry left running by a killed session is named, not reused."""
    if _listening(host):
        raise RuntimeError(f"{host} is in use: a registry left running? (`ss -ltnp | grep {host.rsplit(':')[1]}`)")
    folder.mkdir(parents=True, exist_ok=True)
    ca, cert, key = make_certificates(folder)
    user, password = "neuron-release", secrets.token_urlsafe(18)
    htpasswd = folder / "htpasswd"
    entry = subprocess.run(["htpasswd", "-Bbn", user, password], capture_output=True, text=True, check=True).stdout
    htpasswd.write_text(entry.strip() + "\n")
    config = folder / "config.yml"
    config.write_text(CONFIG.format(root=folder / "storage", host=host, cert=cert, key=key, htpasswd=htpasswd))
    registry = Registry(host=host, user=user, password=password, ca=ca, folder=folder)
    certs_d = Path("/etc/docker/certs.d") / host
    certs_d.mkdir(parents=True, exist_ok=True)
    shutil.copy(ca, certs_d / "ca.crt")
    log = folder / "registry.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["docker-registry", "serve", str(config)], stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_ready(registry, process, log)
        yield registry
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        (certs_d / "ca.crt").unlink(missing_ok=True)
        shutil.rmtree(certs_d, ignore_errors=True)
