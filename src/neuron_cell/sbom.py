"""`python -m neuron_cell.sbom --out DIR`: the bill of materials of an image or a host, standard library only.

Run with the venv's own Python (the image build, the Packer docker build and an AMI run this one module), it writes:

- `sbom-venv.cdx.json`: CycloneDX 1.6 JSON of the venv's installed distributions (importlib.metadata, what pip
  lists), each with its purl and the SHA-256 of its RECORD (the installed files and their own hashes), and the
  sha256s the hash lock accepted for it;
- `sbom-apt.cdx.json`: CycloneDX 1.6 JSON of the installed Debian packages (dpkg), each with its purl;
- `version-info.json`, in the EKS AMI's style: the cell, the release, Python, every pinned version (pip and apt, the
  host's too), the Neuron driver, runtime, collectives and tools where installed, an image's base image and the
  digest it was built on (`--base-image`, `--base-digest`), and on a host (`--host`) the kernel and its dkms
  modules;
- `SHA256SUMS` of the three: its own sha256 is what the image's label `io.neuron-torch.bom` holds.

The output is a function of what is installed: no timestamp unless SOURCE_DATE_EPOCH is set, a serial number derived
from the content. So a rebuild with the same package set writes the same bytes, and a different one says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import sysconfig
import uuid
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote

from neuron_cell import cellrecord
from neuron_cell.locktext import canonical

SPEC_VERSION = "1.6"
VERSION_INFO_SCHEMA = 1
FILES = ("sbom-venv.cdx.json", "sbom-apt.cdx.json", "version-info.json")
SUMS = "SHA256SUMS"
# The Neuron components version-info names, by their Debian package (the driver is a host's, never an image's).
NEURON_PACKAGES = {
    "driver": "aws-neuronx-dkms",
    "runtime": "aws-neuronx-runtime-lib",
    "collectives": "aws-neuronx-collectives",
    "tools": "aws-neuronx-tools",
}
TOOL = {"type": "application", "name": "neuron_cell.sbom", "group": "neuron-torch"}


def _purl_part(value: str) -> str:
    return quote(value, safe="")


def venv_components(lock_hashes: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The distributions installed in this interpreter's site-packages, sorted by name."""
    paths = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    found: dict[str, dict[str, Any]] = {}
    for dist in metadata.distributions(path=paths):
        name = canonical(dist.metadata["Name"])
        record = dist.read_text("RECORD") or ""
        purl = f"pkg:pypi/{_purl_part(name)}@{_purl_part(dist.version)}"
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": purl,
            "name": name,
            "version": dist.version,
            "purl": purl,
            "hashes": [{"alg": "SHA-256", "content": hashlib.sha256(record.encode()).hexdigest()}],
        }
        accepted = lock_hashes.get(name)
        if accepted:
            component["properties"] = [{"name": "neuron-torch:lock-sha256", "value": " ".join(sorted(accepted))}]
        found[name] = component
    return [found[name] for name in sorted(found)]


def dpkg_packages() -> list[tuple[str, str, str]]:
    """(name, version, architecture) of each installed Debian package, sorted."""
    fields = "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fields], capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    # The second letter is the package's state: i, installed (a held package, "hi", is installed too).
    return sorted((name, version, arch) for status, name, version, arch in rows if status[1:2] == "i")


def os_release() -> dict[str, str]:
    values = {}
    for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = value.strip().strip('"')
    return values


def apt_components(packages: list[tuple[str, str, str]], system: dict[str, str]) -> list[dict[str, Any]]:
    distro = f"{system.get('ID', 'debian')}-{system.get('VERSION_ID', '')}".rstrip("-")
    vendor = system.get("ID", "debian")
    components = []
    for name, version, arch in packages:
        purl = f"pkg:deb/{vendor}/{_purl_part(name)}@{_purl_part(version)}?arch={arch}&distro={distro}"
        components.append({"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl})
    return components


def bom(subject: dict[str, Any], components: list[dict[str, Any]]) -> dict[str, Any]:
    """A CycloneDX document; its serial number is derived from its content (same content, same document)."""
    metadata_: dict[str, Any] = {"tools": {"components": [TOOL]}, "component": subject}
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        metadata_["timestamp"] = datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"metadata": metadata_, "components": components}
    serial = uuid.uuid5(uuid.NAMESPACE_URL, json.dumps(body, sort_keys=True))
    return {"bomFormat": "CycloneDX", "specVersion": SPEC_VERSION, "serialNumber": f"urn:uuid:{serial}", "version": 1,
            **body}  # fmt: skip


def host_facts() -> dict[str, Any]:
    """The kernel and its dkms modules (`dkms status`: module/version, kernel, arch: installed)."""
    facts: dict[str, Any] = {"kernel": platform.release(), "dkms": []}
    try:
        status = subprocess.run(["dkms", "status"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return facts
    facts["dkms"] = [line.strip() for line in status.splitlines() if line.strip()]
    return facts


def version_info(cell: dict[str, Any], pip: list[dict[str, Any]], apt: list[tuple[str, str, str]],
                 host: bool, base: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    installed_apt = {name: version for name, version, _ in apt}
    pinned_pip = {key: cell[key] for key in ("torch", "torch_neuronx", "neuronx_cc", "nki") if key in cell}
    info: dict[str, Any] = {
        "schema": VERSION_INFO_SCHEMA,
        "cell": cell.get("id"),
        "release": cell.get("release"),
        "family": cell.get("family"),
        "os": cell.get("os"),
        "python": platform.python_version(),
        "pinned": {"pip": pinned_pip, "apt": dict(cell.get("apt", {})), "apt_host": dict(cell.get("apt_host", {}))},
        "locked": dict(cell.get("locked", {})),
        "neuron": {role: installed_apt[name] for role, name in NEURON_PACKAGES.items() if name in installed_apt},
        "packages": {
            "pip": {component["name"]: component["version"] for component in pip},
            "apt": installed_apt,
        },
    }
    if base:  # an image: the base it was built on, as the release names it and by the digest the build checked
        info["base_image"] = base
    if host:
        info.update(host_facts())
    return info


def lock_hashes(path: Path | None) -> dict[str, list[str]]:
    """{canonical name: the sha256s its lock entry accepts} (empty without a lock)."""
    if path is None or not path.is_file():
        return {}
    found: dict[str, list[str]] = {}
    name = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if "==" in stripped and not stripped.startswith(("#", "-")):
            name = canonical(stripped.split("==", 1)[0])
        elif stripped.startswith("--hash=sha256:") and name:
            found.setdefault(name, []).append(stripped.removeprefix("--hash=sha256:").rstrip(" \\"))
    return found


def write(out: Path, cell: dict[str, Any], lock: Path | None, host: bool, base: dict[str, str] | None = None) -> str:
    """Write the three files and SHA256SUMS into `out`; the sha256 of SHA256SUMS."""
    version = f"{cell.get('release')}-{cell.get('id')}"
    pip = venv_components(lock_hashes(lock))
    apt = dpkg_packages()
    kind = "operating-system" if host else "container"
    documents = {
        "sbom-venv.cdx.json": bom(
            {"type": "application", "bom-ref": "venv", "name": "neuron-torch-venv", "version": version}, pip
        ),
        "sbom-apt.cdx.json": bom(
            {"type": kind, "bom-ref": "system", "name": "neuron-torch", "version": version},
            apt_components(apt, os_release()),
        ),
        "version-info.json": version_info(cell, pip, apt, host, base),
    }
    out.mkdir(parents=True, exist_ok=True)
    sums = []
    for name in FILES:
        text = json.dumps(documents[name], indent=2, sort_keys=False) + "\n"
        (out / name).write_text(text, encoding="utf-8")
        sums.append(f"{hashlib.sha256(text.encode()).hexdigest()}  {name}\n")
    (out / SUMS).write_text("".join(sums), encoding="utf-8")
    return hashlib.sha256("".join(sums).encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuron_cell.sbom", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write the files in")
    parser.add_argument("--cell-record", type=Path, default=Path("/etc/neuron-torch/cell.json"))
    parser.add_argument("--lock", type=Path, default=Path("/etc/neuron-torch/lock.txt"))
    parser.add_argument("--host", action="store_true", help="a host (AMI): also the kernel and its dkms modules")
    parser.add_argument("--base-image", default="", help="an image's base, as the release names it")
    parser.add_argument("--base-digest", default="", help="the digest of that base the build was on")
    args = parser.parse_args(argv)
    try:
        cell = cellrecord.load(args.cell_record, what="cell record")
    except cellrecord.RecordError as error:
        print(f"python -m neuron_cell.sbom: {error}", file=sys.stderr)
        return 2
    base = {"reference": args.base_image, "digest": args.base_digest} if args.base_image else None
    digest = write(args.out, cell, args.lock, args.host, base)
    print(f"sha256:{digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
