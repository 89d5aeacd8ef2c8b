"""The lock gate's core: reading a lock and the checks every consumer applies before any work (the lock is for this
cell, sealed and unedited, free of a CUDA torch, the PyPI placeholder and nvidia-*).

Part of neuron_cell (standard library only): the CLI (neuron_torch.lockfile) imports it, and the image build runs it
with the cell's Python before pip installs anything (the Dockerfile's venv stage):

    python -m neuron_cell.lockgate --cell CELL_ID --rules gate.json LOCK   # gate.json: {"forbidden": {PATTERN: WHY}}

Exit 0 when the lock passes, 1 naming every problem.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

SEAL_TITLE = "# neuron-torch seal: sha256 of each package's pin and hashes; `neuron-torch check` verifies it."
# name, operator, version (up to a space or the `;` of a marker: `jinja2==3.1.6; python_version...` is PEP 508), rest
_REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<op>[=<>!~]=?=?)(?P<version>[^\s;]+)\s*(?P<rest>.*)$"
)
_HASH = re.compile(r"--hash=(?P<algo>sha256):(?P<digest>\S+)")
_META = re.compile(r"^# (?P<key>release|cell|offline|resolver|index (?P<index>[\w.-]+)): (?P<value>.+)$")
_SEAL = re.compile(r"^# seal (?P<pin>\S+) (?P<digest>[0-9a-f]{16})$")
_FROM = re.compile(r"^#\s+from (?P<url>\S+)$")


class LockSyntaxError(ValueError):
    """A line of the lock cannot be read."""


def canonical_name(name: str) -> str:
    """PEP 503 normalisation: `Torch_NeuronX` -> `torch-neuronx`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def forbidden_reason(forbidden: Mapping[str, str], package: str, version: str) -> str | None:
    """Why a locked package must never be installed (patterns `NAME` or `NAME==VERSION`, NAME a glob), or None."""
    name = canonical_name(package)
    for pattern, reason in forbidden.items():
        pattern_name, _, pattern_version = pattern.partition("==")
        if fnmatch.fnmatch(name, canonical_name(pattern_name)) and (not pattern_version or version == pattern_version):
            return reason
    return None


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    operator: str
    hashes: tuple[str, ...]
    index_url: str | None
    marker: str = ""  # an environment marker after the pin (`; python_version >= "3.12"`), kept for pip

    @property
    def pin(self) -> str:
        return f"{canonical_name(self.name)}=={self.version}"

    @property
    def requirement(self) -> str:
        """The entry as pip reads it: the pin (and its marker), then each hash on a continued line."""
        head = f"{self.name}{self.operator}{self.version}" + (f" {self.marker}" if self.marker else "")
        return " \\\n    ".join([head, *(f"--hash=sha256:{digest}" for digest in self.hashes)])

    def seal(self) -> str:
        material = "\n".join([self.pin, *sorted(self.hashes)])
        return hashlib.sha256(material.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Lock:
    path: Path
    release: str | None
    cell_id: str | None
    indexes: dict[str, str]
    offline: str | None
    packages: tuple[LockedPackage, ...]
    seals: dict[str, str]
    resolver: str | None = None

    @property
    def sealed(self) -> bool:
        """Written (or sealed) by neuron-torch: it names its cell and seals its packages. pip-compile's are not."""
        return self.cell_id is not None or bool(self.seals)

    def package(self, name: str) -> LockedPackage | None:
        wanted = canonical_name(name)
        return next((p for p in self.packages if canonical_name(p.name) == wanted), None)


def parse_lock(text: str, path: Path) -> Lock:
    """Parse a lock written by `neuron-torch lock` (or any pip-tools/uv lock, without the metadata)."""
    meta: dict[str, str] = {}
    indexes: dict[str, str] = {}
    seals: dict[str, str] = {}
    packages: list[LockedPackage] = []
    current: LockedPackage | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if meta_match := _META.match(line):
                if meta_match["index"]:
                    indexes[meta_match["index"]] = meta_match["value"]
                else:
                    meta[meta_match["key"]] = meta_match["value"]
            elif seal_match := _SEAL.match(line):
                seals[seal_match["pin"]] = seal_match["digest"]
            elif (from_match := _FROM.match(line)) and current is not None:
                current = replace(current, index_url=from_match["url"])
            continue
        if line.startswith("--hash="):
            if current is None:
                raise LockSyntaxError(f"{path}: a --hash line comes before any requirement")
            current = replace(current, hashes=(*current.hashes, *(m["digest"] for m in _HASH.finditer(line))))
            continue
        if line.startswith("-"):
            continue  # pip options such as --index-url are allowed in pip-tools files and carry no pin
        requirement = _REQUIREMENT.match(line.rstrip("\\").strip())
        if not requirement:
            raise LockSyntaxError(f"{path}: cannot read the requirement line {line!r}")
        if current is not None:
            packages.append(current)
        hashes = tuple(m["digest"] for m in _HASH.finditer(requirement["rest"]))
        marker = _HASH.sub("", requirement["rest"]).strip()
        current = LockedPackage(requirement["name"], requirement["version"], requirement["op"], hashes, None, marker)
    if current is not None:
        packages.append(current)
    return Lock(
        path, meta.get("release"), meta.get("cell"), indexes, meta.get("offline"), tuple(packages), seals,
        meta.get("resolver"),
    )  # fmt: skip


def seal_command(where: str, cell_id: str) -> str:
    return f"neuron-torch lock --seal {where} --cell {cell_id}"


def seal_problems(lock: Lock, cell_id: str) -> list[str]:
    """What keeps a sound lock out of the consumers: a lock pip-compile wrote is sound for pip, but until sealed
    nothing records that its hashes were checked against their routed indexes, and no edit would be noticed."""
    if lock.sealed:
        return []
    return [
        f"{lock.path}: not sealed (a plain pip-compile lock?): builds, bundles and the Ansible provisioning take "
        f"only a sealed lock; `{seal_command(str(lock.path), cell_id)}` checks its routing and seals it"
    ]


def package_problems(lock: Lock, cell_id: str, forbidden: Mapping[str, str]) -> list[str]:
    """The cell, pins, hashes, seal and forbidden packages of a lock; an unsealed lock is not checked for its seal."""
    where = str(lock.path)
    problems: list[str] = []
    if lock.sealed and lock.cell_id != cell_id:
        problems.append(
            f"{where}: the lock says it is for cell {lock.cell_id!r}, not {cell_id}: "
            f"pass the lock of {cell_id} (`neuron-torch lock --cell {cell_id}`)"
        )
    if not lock.packages:
        problems.append(f"{where}: the lock holds no packages")
    reseal = f"regenerate it (`neuron-torch lock --cell {cell_id}`) or recheck it (`{seal_command(where, cell_id)}`)"
    for package in lock.packages:
        label = f"{where}: {package.name} {package.version}"
        if package.operator != "==":
            problems.append(f"{label}: pinned with '{package.operator}', a lock must pin with '=='")
        if not package.hashes:
            problems.append(f"{label}: no --hash; `pip install --require-hashes` would refuse the lock")
        problems += [f"{label}: '{d}' is not a sha256 digest" for d in package.hashes if not _is_sha256(d)]
        reason = forbidden_reason(forbidden, package.name, package.version)
        if reason:
            problems.append(f"{label}: forbidden: {reason}")
        if not lock.sealed:
            continue
        expected_seal = lock.seals.get(package.pin)
        if expected_seal is None:
            problems.append(f"{label}: not in the lock's seal; the lock was edited by hand: {reseal}")
        elif expected_seal != package.seal():
            problems.append(f"{label}: its hashes do not match the lock's seal (a hash was edited): {reseal}")
    torch = lock.package("torch")
    if torch and "+" not in torch.version:
        problems.append(f"{where}: torch {torch.version} is not the CPU build (+cpu): a CUDA torch would be installed")
    return problems


def _is_sha256(digest: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{64}", digest) is not None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="neuron-torch's lock gate (the image build runs it before pip)")
    parser.add_argument("--cell", required=True, help="the cell the lock must be for")
    parser.add_argument("--rules", type=Path, required=True, help='JSON: {"forbidden": {PATTERN: REASON}}')
    parser.add_argument("lock", type=Path)
    args = parser.parse_args(argv)
    forbidden = json.loads(args.rules.read_text(encoding="utf-8"))["forbidden"]
    try:
        lock = parse_lock(args.lock.read_text(encoding="utf-8"), args.lock)
    except (OSError, UnicodeDecodeError, LockSyntaxError) as error:
        print(f"lock gate: cannot read the lock: {error}", file=sys.stderr)
        return 1
    problems = seal_problems(lock, args.cell) + package_problems(lock, args.cell, forbidden)
    if problems:
        print(
            f"lock gate: refusing the lock {args.lock} for {args.cell} ({len(problems)} problem(s)):", file=sys.stderr
        )
        print("  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"lock gate: {args.lock} is a sound, sealed lock of {args.cell} ({len(lock.packages)} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
