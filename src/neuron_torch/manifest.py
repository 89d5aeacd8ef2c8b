"""`neuron-torch manifest`: compare the matrix's pins with AWS's machine-readable release manifest.

The manifest (`n2-manifest.json`) lists, per Neuron release, every package with its version, supported instances
and Python versions. This module reads that format and reports where the matrix differs from a release in it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from neuron_cell.pins import satisfies
from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.files import read_json
from neuron_torch.matrix import Matrix, canonical_name


@dataclass(frozen=True)
class ManifestPackage:
    name: str
    version: str
    instances: tuple[str, ...]
    pythons: tuple[str, ...]


class Status(StrEnum):
    """A finding's verdict on one pin (the words `manifest` prints and its --json writes)."""

    SAME = "same"
    DIFFERS = "differs"
    MISSING = "missing"


@dataclass(frozen=True)
class Finding:
    status: Status
    subject: str
    detail: str


def vendored_manifest(matrix: Matrix) -> Path:
    """The checkout's copy of AWS's manifest, after checking that it is the file the matrix names."""
    if matrix.manifest is None:
        raise NeuronTorchError(f"{matrix.path} vendors no manifest ([manifest]): pass the manifest FILE")
    path = matrix.manifest.path
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        raise NeuronTorchError(f"{path}: the vendored manifest named in {matrix.path.name} is missing") from None
    if digest != matrix.manifest.sha256:
        raise NeuronTorchError(
            f"{path}: sha256 {digest} is not the {matrix.manifest.sha256} that {matrix.path.name} records: "
            "the vendored manifest changed; restore it, or update [manifest] sha256 with the new file",
            EXIT_FAILED,
        )
    return path


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest's data, shape checked: a bad field is named by its path (neuron_releases[2].packages[0].name)."""
    data = read_json(path, "manifest file", "pass AWS's n2-manifest.json (or omit FILE for the vendored copy)")
    if not isinstance(data, dict) or not isinstance(data.get("neuron_releases"), list):
        raise NeuronTorchError(f"{path}: not a Neuron release manifest (no 'neuron_releases' list)")
    for r, entry in enumerate(data["neuron_releases"]):
        where = f"neuron_releases[{r}]"
        _expect(path, where, entry, dict, "an object")
        _expect(path, f"{where}.neuron_version", entry.get("neuron_version"), str, "a string")
        _expect(path, f"{where}.packages", entry.get("packages", []), list, "a list")
        for n, package in enumerate(entry.get("packages", [])):
            _check_package(path, f"{where}.packages[{n}]", package)
    return data


def _expect(path: Path, where: str, value: object, kind: type, described: str) -> None:
    if not isinstance(value, kind):
        found = "missing" if value is None else f"{type(value).__name__} {value!r}"[:80]
        raise NeuronTorchError(f"{path}: {where}: must be {described}, not {found}; fix or replace the manifest")


def _check_package(path: Path, where: str, package: object) -> None:
    _expect(path, where, package, dict, "an object")
    assert isinstance(package, dict)
    for key in ("name", "version"):
        _expect(path, f"{where}.{key}", package.get(key), str, "a string")
    for key in ("supported_instances", "supported_python_versions"):
        values = package.get(key, [])
        _expect(path, f"{where}.{key}", values, list, "a list of strings")
        for i, value in enumerate(values):
            _expect(path, f"{where}.{key}[{i}]", value, str, "a string")


def release_packages(data: dict[str, Any], path: Path, release: str | None) -> tuple[str, list[ManifestPackage]]:
    wanted = release or str(data.get("manifest_version", ""))
    versions = [str(r.get("neuron_version")) for r in data["neuron_releases"]]
    for entry in data["neuron_releases"]:
        if str(entry.get("neuron_version")) == wanted:
            packages = [
                ManifestPackage(
                    name=p["name"],
                    version=p["version"],
                    instances=tuple(p.get("supported_instances", [])),
                    pythons=tuple(p.get("supported_python_versions", [])),
                )
                for p in entry.get("packages", [])
            ]
            return wanted, packages
    raise NeuronTorchError(f"{path}: release {wanted!r} is not in the manifest; it holds {', '.join(versions)}")


def compare(matrix: Matrix, packages: list[ManifestPackage], release: str) -> list[Finding]:
    by_name: dict[str, list[ManifestPackage]] = {}
    for package in packages:
        by_name.setdefault(canonical_name(package.name), []).append(package)
    findings: list[Finding] = []

    for family in matrix.families.values():
        subject = f"torch-neuronx {family.torch_neuronx} (family {family.name})"
        held = by_name.get("torch-neuronx", [])
        matching = [p for p in held if satisfies("torch-neuronx", family.torch_neuronx, p.version) is None]
        if matching:
            findings.append(Finding(Status.SAME, subject, f"{release} holds {matching[0].version}"))
            continue
        instead = [
            f"{p.name} {p.version}"
            for p in packages
            if canonical_name(p.name) in ("torch-neuronx", "libtorch-neuronx-lite", "torch-xla")
        ]
        findings.append(
            Finding(
                Status.MISSING,
                subject,
                f"{release} holds no native torch-neuronx {family.name}; instead it holds: "
                + (", ".join(instead) or "no torch-neuronx package at all"),
            )
        )

    pip_pins = dict(matrix.packages)
    apt_pins = {p.name: p.version for p in matrix.apt.packages}
    for name, version in {**pip_pins, **apt_pins}.items():
        held = by_name.get(canonical_name(name), [])
        if not held:
            findings.append(Finding(Status.MISSING, f"{name} {version}", f"{release} does not list {name}"))
        elif any(p.version == version for p in held):
            findings.append(Finding(Status.SAME, f"{name} {version}", f"{release} pins the same version"))
        else:
            findings.append(
                Finding(Status.DIFFERS, f"{name} {version}", f"{release} pins {', '.join(p.version for p in held)}")
            )

    return findings + _compiler_findings(matrix, by_name.get("neuronx-cc", []), release)


def _compiler_findings(matrix: Matrix, compiler: list[ManifestPackage], release: str) -> list[Finding]:
    """The Pythons and instance families the release's neuronx-cc supports, against the matrix's."""
    findings: list[Finding] = []
    if compiler:
        theirs = set(compiler[0].pythons)
        ours = set(matrix.pythons)
        if theirs and ours != theirs:
            findings.append(
                Finding(
                    Status.DIFFERS,
                    "Python versions",
                    f"the matrix has {', '.join(sorted(ours))}; {release}'s neuronx-cc supports "
                    f"{', '.join(sorted(theirs))}",
                )
            )
        missing_instances = sorted(set(matrix.instance_families) - set(compiler[0].instances))
        if missing_instances:
            findings.append(
                Finding(
                    Status.DIFFERS, "instances", f"{release}'s neuronx-cc does not list {', '.join(missing_instances)}"
                )
            )
    return findings


def format_findings(findings: list[Finding], matrix: Matrix, release: str) -> str:
    lines = [f"{matrix.release.name} ({matrix.path.name}) compared with manifest release {release}:"]
    width = max(len(f.subject) for f in findings) if findings else 0
    for finding in findings:
        lines.append(f"  {finding.status:<8} {finding.subject:<{width}}  {finding.detail}")
    differing = sum(1 for f in findings if f.status != Status.SAME)
    lines.append(f"{differing} of {len(findings)} pins differ from or are missing in {release}.")
    return "\n".join(lines)
