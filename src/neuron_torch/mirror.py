"""Mirror settings: where the apt repository, its key and the pip indexes live, plus an extra CA and proxies.

One TOML file (see constraints/mirror.example.toml and docs/mirrors.md), named by `--mirror PATH` or the
NEURON_TORCH_MIRROR environment variable. `apply_mirror` folds it into the matrix, so every consumer (lock, bundle,
build image) sees one release whose URLs and base images are the mirror's; routing (which index serves which
package) never changes.

A CA bundle and proxy credentials are secrets of the build machine: they are passed to builders as build secrets
or environment, never written into an image layer, an AMI or a generated file, and `redact` hides credentials in
anything printed.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from neuron_torch.baseimage import mirrored
from neuron_torch.buildargs import DOCKER_REFERENCE
from neuron_torch.choices import MIRROR_ENV_VAR
from neuron_torch.errors import NeuronTorchError
from neuron_torch.files import check_ca_bundle, read_text
from neuron_torch.matrix import Index, Matrix
from neuron_torch.urls import INDEX_SCHEMES, PROXY_SCHEMES, check_url

ENV_VAR = MIRROR_ENV_VAR
_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")


@dataclass(frozen=True)
class Proxy:
    http: str = ""
    https: str = ""
    no_proxy: str = ""

    def env(self) -> dict[str, str]:
        """The proxy variables, both spellings, as curl, apt, pip and uv read them (secret: may hold credentials)."""
        pairs = {"http_proxy": self.http, "https_proxy": self.https, "no_proxy": self.no_proxy}
        return {k: v for name, value in pairs.items() if value for k, v in ((name, value), (name.upper(), value))}

    def describe(self) -> str:
        parts = [f"{name}={redact(value)}" for name, value in self.env().items() if name.islower()]
        return ", ".join(parts) or "none"


@dataclass(frozen=True)
class Mirror:
    path: Path | None = None
    apt_url: str = ""
    apt_key_url: str = ""
    apt_key_fingerprint: str = ""
    indexes: Mapping[str, str] = field(default_factory=dict)
    ca_bundle: Path | None = None
    proxy: Proxy = Proxy()
    python_downloads_json_url: str = ""
    python_install_mirror: str = ""
    images: Mapping[str, str] = field(default_factory=dict)  # a base image of the release -> the reference to use

    def describe(self) -> str:
        """A printable summary with credentials redacted."""
        lines = [f"mirror settings: {self.path or '(none)'}"]
        if self.apt_url:
            lines.append(f"  apt: {redact(self.apt_url)} (key {redact(self.apt_key_url) or 'from the release'})")
        lines += [f"  index {name}: {redact(url)}" for name, url in self.indexes.items()]
        if self.python_downloads_json_url or self.python_install_mirror:
            json_url, mirror = redact(self.python_downloads_json_url), redact(self.python_install_mirror)
            lines.append(f"  python downloads: {json_url or 'uv built-in'} (mirror {mirror or 'none'})")
        lines += [f"  base image {image}: {redact(mirrored)}" for image, mirrored in self.images.items()]
        lines.append(f"  CA bundle: {self.ca_bundle or 'none'}")
        lines.append(f"  proxy: {self.proxy.describe()}")
        return "\n".join(lines)


def redact(url: str) -> str:
    """`http://user:secret@proxy:3128` -> `http://user:***@proxy:3128`; anything without a password is unchanged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _str(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise NeuronTorchError(f"{where}: {key} must be a string, not {value!r}")
    return value


def _url(data: Mapping[str, Any], key: str, where: str, schemes: tuple[str, ...] = INDEX_SCHEMES) -> str:
    """A URL setting: empty when unset, else checked (check_url)."""
    value = _str(data, key, where)
    return check_url(value, f"{where} {key}", schemes) if value else ""


def load_mirror(path: Path | str) -> Mirror:
    """Read mirror settings; relative CA paths are relative to the settings file."""
    source = Path(path)
    text = read_text(source, "mirror settings file", f"fix --mirror or ${ENV_VAR} (see docs/mirrors.md)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise NeuronTorchError(f"{source}: not valid TOML: {error}") from None
    unknown = set(data) - {"apt", "indexes", "ca_bundle", "proxy", "python", "images"}
    if unknown:
        raise NeuronTorchError(f"{source}: unknown key(s) {', '.join(sorted(unknown))}; see docs/mirrors.md")
    apt = data.get("apt", {})
    indexes = data.get("indexes", {})
    proxy = data.get("proxy", {})
    python = data.get("python", {})
    images = data.get("images", {})
    for name, table in (("apt", apt), ("indexes", indexes), ("proxy", proxy), ("python", python), ("images", images)):
        if not isinstance(table, Mapping):
            raise NeuronTorchError(f"{source}: [{name}] must be a table")
    unknown_python = set(python) - {"downloads_json_url", "install_mirror"}
    if unknown_python:
        raise NeuronTorchError(
            f"{source}: [python] has unknown key(s) {', '.join(sorted(unknown_python))}; "
            "it takes downloads_json_url and install_mirror (docs/mirrors.md)"
        )
    fingerprint = _str(apt, "key_fingerprint", f"{source} [apt]").replace(" ", "").upper()
    if fingerprint and not _FINGERPRINT.match(fingerprint):
        raise NeuronTorchError(f"{source}: [apt] key_fingerprint must be 40 hex digits, not {fingerprint!r}")
    ca_text = _str(data, "ca_bundle", str(source))
    ca_bundle = (source.parent / Path(ca_text).expanduser()) if ca_text else None
    if ca_bundle is not None:
        check_ca_bundle(ca_bundle)
    return Mirror(
        path=source,
        apt_url=_url(apt, "url", f"{source} [apt]").rstrip("/"),
        apt_key_url=_url(apt, "key_url", f"{source} [apt]"),
        apt_key_fingerprint=fingerprint,
        indexes={name: _url(indexes, name, f"{source} [indexes]") for name in indexes},
        ca_bundle=ca_bundle,
        proxy=Proxy(
            http=_url(proxy, "http", f"{source} [proxy]", PROXY_SCHEMES),
            https=_url(proxy, "https", f"{source} [proxy]", PROXY_SCHEMES),
            no_proxy=_str(proxy, "no_proxy", f"{source} [proxy]"),
        ),
        python_downloads_json_url=_str(python, "downloads_json_url", f"{source} [python]"),
        python_install_mirror=_str(python, "install_mirror", f"{source} [python]").rstrip("/"),
        images=_images(images, source),
    )


def _images(table: Mapping[str, Any], source: Path) -> dict[str, str]:
    """[images]: "ubuntu:26.04" = "registry.example/docker-remote/ubuntu:26.04"; both sides docker references."""
    images = {}
    for image in table:
        mirrored = _str(table, image, f"{source} [images]")
        for what, reference in (("name", image), ("value", mirrored)):
            if not DOCKER_REFERENCE.fullmatch(reference):
                raise NeuronTorchError(
                    f"{source}: [images] {what} {reference!r} (entry {image!r}) is not a docker image reference: "
                    "[registry[:port]/]name[:tag][@sha256:digest] with lowercase name parts, e.g. "
                    '"ubuntu:26.04" = "registry.example/docker-remote/library/ubuntu:26.04" (docs/mirrors.md)'
                )
        images[image] = mirrored
    return images


def mirror_from_env(environ: Mapping[str, str] | None = None) -> Mirror | None:
    """The mirror named by $NEURON_TORCH_MIRROR, or None when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return load_mirror(value) if value else None


def apply_mirror(matrix: Matrix, mirror: Mirror | None) -> Matrix:
    """The matrix with the mirror's URLs, key fingerprint and base images; index names must be the release's.

    An [images] entry names a base image as the release writes it (`ubuntu:26.04`); one the release does not use is
    left unused (one settings file may serve several releases), and describe() lists every entry.
    """
    if mirror is None:
        return matrix
    names = {index.name for index in matrix.indexes}
    unknown = set(mirror.indexes) - names
    if unknown:
        raise NeuronTorchError(
            f"{mirror.path}: [indexes] names {', '.join(sorted(unknown))}, but the release's indexes are "
            f"{', '.join(sorted(names))}"
        )
    apt = replace(
        matrix.apt,
        url=mirror.apt_url or matrix.apt.url,
        key_url=mirror.apt_key_url or matrix.apt.key_url,
        key_fingerprint=mirror.apt_key_fingerprint or matrix.apt.key_fingerprint,
    )
    indexes = tuple(Index(i.name, mirror.indexes.get(i.name, i.url), i.serves) for i in matrix.indexes)
    python_install = replace(
        matrix.python_install,
        downloads_json_url=mirror.python_downloads_json_url or matrix.python_install.downloads_json_url,
        install_mirror=mirror.python_install_mirror or matrix.python_install.install_mirror,
    )
    systems = {
        key: replace(system, base_image=mirrored(system.base_image, mirror.images)) for key, system in matrix.os.items()
    }
    cells = tuple(replace(cell, os=systems[cell.os.id]) for cell in matrix.cells)
    return replace(matrix, apt=apt, indexes=indexes, python_install=python_install, os=systems, cells=cells)
