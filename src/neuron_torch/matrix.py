"""The release matrix: `constraints/matrix.toml` read into typed, validated data.

Every other part of the toolkit reads the release through `load_matrix`; nothing else parses the TOML.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_torch.errors import MatrixError, NeuronTorchError, UnsupportedError
from neuron_torch.files import read_text
from neuron_torch.lockgate import canonical_name as canonical_name  # re-exported: the name every module uses
from neuron_torch.lockgate import forbidden_reason

SCHEMA = 1
DEFAULT_MATRIX = Path("constraints") / "matrix.toml"
PROJECT_ENV = "NEURON_TORCH_PROJECT"
_VERSION = re.compile(r"^\d+(\.\d+)*(\.\*)?(\+[a-z0-9.]+)?$")
_PYTHON = re.compile(r"^3\.\d+$")
_CELL_ID = re.compile(r"^(?P<family>[^-]+)-py(?P<python>[^-]+)-(?P<os>.+)$")


@dataclass(frozen=True)
class Release:
    name: str
    version: str
    date: str
    notes: str
    default_cell: str


@dataclass(frozen=True)
class Family:
    name: str
    torch: str
    torch_local: str
    torch_neuronx: str
    pythons: tuple[str, ...]

    @property
    def torch_pin(self) -> str:
        """The torch version as the lock must hold it, e.g. `2.14.0+cpu` from the PyTorch CPU index."""
        return f"{self.torch}+{self.torch_local}" if self.torch_local else self.torch


@dataclass(frozen=True)
class OperatingSystem:
    id: str
    distro: str
    version: str
    codename: str
    default_python: str
    glibc: str
    lock_platform: str
    base_image: str
    source_ami_name: str
    source_ami_owner: str
    wheels_available: bool
    wheels_note: str
    pythons: tuple[str, ...] | None


@dataclass(frozen=True)
class PythonInstall:
    uv: str
    uv_sha256: str  # of uv's manylinux x86_64 wheel on PyPI: uv is installed with --require-hashes
    route_default: str
    route_other: str
    # Where `uv python install` finds interpreters: empty = uv's built-in python-build-standalone metadata and URLs;
    # set from mirror settings ([python] in docs/mirrors.md), passed on as UV_PYTHON_DOWNLOADS_JSON_URL and
    # UV_PYTHON_INSTALL_MIRROR.
    downloads_json_url: str = ""
    install_mirror: str = ""


@dataclass(frozen=True)
class InstanceFamily:
    name: str
    arch: str
    lnc_default: int


@dataclass(frozen=True)
class Instance:
    type: str
    family: str
    chips: int
    logical_devices: int
    note: str

    @property
    def expected_devices(self) -> int | None:
        """Logical devices at the default LNC, or None where the release does not document it."""
        return self.logical_devices or None


@dataclass(frozen=True)
class AptPackage:
    name: str
    version: str
    scope: str

    @property
    def apt_pin(self) -> str:
        # The repository's versions carry a build-hash suffix (2.35.30.0-1a2b3c4d5), hence the trailing '*'.
        return f"{self.name}={self.version}*"


@dataclass(frozen=True)
class AptRepo:
    url: str
    key_url: str
    key_fingerprint: str
    keyring: str
    component: str
    packages: tuple[AptPackage, ...]

    def scoped(self, scope: str) -> tuple[AptPackage, ...]:
        return tuple(p for p in self.packages if p.scope == scope)


@dataclass(frozen=True)
class Index:
    name: str
    url: str
    serves: tuple[str, ...]

    @property
    def is_default(self) -> bool:
        return "*" in self.serves


@dataclass(frozen=True)
class VendoredManifest:
    """AWS's release manifest as kept in the checkout, with the digest it must have."""

    path: Path
    sha256: str


@dataclass(frozen=True)
class Unsupported:
    instance_families: Mapping[str, str]
    os: Mapping[str, str]
    python: Mapping[str, str]
    arch: Mapping[str, str]


@dataclass(frozen=True)
class Cell:
    """One supported combination: a torch-neuronx family, a Python and an operating system."""

    family: Family
    python: str
    os: OperatingSystem
    packages: Mapping[str, str]
    generated_dir: Path
    locks_dir: Path

    @property
    def id(self) -> str:
        return f"{self.family.name}-py{self.python}-{self.os.id}"

    @property
    def pins(self) -> dict[str, str]:
        """The direct pins of the cell, in install order: name -> version (or family pattern)."""
        return {
            "torch-neuronx": self.family.torch_neuronx,
            "torch": self.family.torch_pin,
            **dict(self.packages),
        }

    @property
    def constraints_path(self) -> Path:
        return self.generated_dir / f"{self.id}.txt"

    @property
    def lock_path(self) -> Path:
        return self.locks_dir / f"{self.id}.txt"

    @property
    def python_route(self) -> str:
        return "distro" if self.python == self.os.default_python else "uv-standalone"


@dataclass(frozen=True)
class Matrix:
    path: Path
    root: Path
    release: Release
    packages: Mapping[str, str]
    families: Mapping[str, Family]
    os: Mapping[str, OperatingSystem]
    python_install: PythonInstall
    instance_families: Mapping[str, InstanceFamily]
    instances: Mapping[str, Instance]
    apt: AptRepo
    indexes: tuple[Index, ...]
    forbidden: Mapping[str, str]
    unsupported: Unsupported
    generated_dir: Path
    locks_dir: Path
    manifest: VendoredManifest | None = None
    cells: tuple[Cell, ...] = field(default=())

    @property
    def pythons(self) -> tuple[str, ...]:
        return tuple(sorted({p for f in self.families.values() for p in f.pythons}, key=_python_key))

    def cell(self, cell_id: str) -> Cell:
        """The cell with this id; an unsupported or unknown id raises with the reason and what is supported."""
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        match = _CELL_ID.match(cell_id)
        if not match:
            raise NeuronTorchError(
                f"'{cell_id}' is not a cell id: the form is FAMILY-pyPYTHON-OS, e.g. {self.release.default_cell}. "
                f"Supported cells: {', '.join(c.id for c in self.cells)}"
            )
        self.family(match["family"])
        self.require_python(match["python"])
        os_id, _, arch = match["os"].rpartition("-")
        if os_id and arch in self.unsupported.arch:  # e.g. ...-ubuntu26.04-arm64
            self.require_arch(arch)
        self.operating_system(match["os"])
        raise UnsupportedError(
            f"cell '{cell_id}' is not in {self.release.name}. Supported cells: {', '.join(c.id for c in self.cells)}"
        )

    def family(self, name: str) -> Family:
        if name in self.families:
            return self.families[name]
        raise UnsupportedError(
            f"torch-neuronx family '{name}' is not in {self.release.name}; supported: "
            + ", ".join(f"{f.name} (torch {f.torch}, torch-neuronx {f.torch_neuronx})" for f in self.families.values())
        )

    def require_python(self, python: str) -> str:
        supported = ", ".join(self.pythons)
        if python in self.pythons:
            return python
        reason = self.unsupported.python.get(python)
        if reason:
            raise UnsupportedError(f"Python {python} is not supported: {reason}. Supported: {supported}")
        raise UnsupportedError(f"Python '{python}' is not in {self.release.name}. Supported: {supported}")

    def operating_system(self, os_id: str) -> OperatingSystem:
        supported = ", ".join(self.os)
        if os_id in self.os:
            return self.os[os_id]
        reason = self.unsupported.os.get(os_id)
        if reason:
            raise UnsupportedError(f"{os_id} is not supported: {reason}. Supported: {supported}")
        raise UnsupportedError(f"operating system '{os_id}' is not in {self.release.name}. Supported: {supported}")

    def instance(self, instance_type: str) -> Instance:
        if instance_type in self.instances:
            return self.instances[instance_type]
        known = ", ".join(self.instances)
        family = instance_type.split(".", 1)[0]
        reason = self.unsupported.instance_families.get(family)
        if reason:
            raise UnsupportedError(f"instance type {instance_type} is not supported: {reason}. Supported: {known}")
        if family in self.instance_families:
            # A size the release does not list (e.g. trn3.3xlarge): its family is supported, its device count unknown.
            note = f"{instance_type} is not listed in {self.release.name}: its device count is not documented there"
            return Instance(instance_type, family, 0, 0, note)
        raise UnsupportedError(
            f"instance type '{instance_type}' is not supported; supported families: "
            f"{', '.join(self.instance_families)} (known types: {known})"
        )

    def require_arch(self, arch: str) -> str:
        arches = sorted({f.arch for f in self.instance_families.values()})
        if arch in arches:
            return arch
        reason = self.unsupported.arch.get(arch, f"{self.release.name} supports {', '.join(arches)} only")
        raise UnsupportedError(f"architecture {arch} is not supported: {reason}. Supported: {', '.join(arches)}")

    def index_for(self, package: str) -> Index:
        """The index a package must come from: the one that lists it, else the default index."""
        name = canonical_name(package)
        for index in self.indexes:
            if any(fnmatch.fnmatch(name, canonical_name(p)) for p in index.serves if p != "*"):
                return index
        return next(i for i in self.indexes if i.is_default)

    def forbidden_reason(self, package: str, version: str) -> str | None:
        """Why a locked package must never be installed, or None when it may be."""
        return forbidden_reason(self.forbidden, package, version)


def _python_key(python: str) -> tuple[int, ...]:
    return tuple(int(p) for p in python.split("."))


class _Reader:
    """Reads typed values out of the parsed TOML, naming the file and the dotted key in every error."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> MatrixError:
        return MatrixError(self.path, key, problem)

    def table(self, data: Mapping[str, Any], key: str, prefix: str = "") -> Mapping[str, Any]:
        full = f"{prefix}{key}"
        if key not in data:
            raise self.fail(full, "missing table")
        value = data[key]
        if not isinstance(value, Mapping):
            raise self.fail(full, f"must be a table, not {type(value).__name__}")
        return value

    def text(self, data: Mapping[str, Any], key: str, prefix: str = "", default: str | None = None) -> str:
        full = f"{prefix}{key}"
        if key not in data:
            if default is not None:
                return default
            raise self.fail(full, "missing value")
        value = data[key]
        if not isinstance(value, str):
            raise self.fail(full, f"must be a string, not {type(value).__name__} {value!r}")
        return value

    def version(self, data: Mapping[str, Any], key: str, prefix: str = "") -> str:
        value = self.text(data, key, prefix)
        if not _VERSION.match(value):
            raise self.fail(f"{prefix}{key}", f"'{value}' is not an exact version (or a `X.Y.*` family pattern)")
        return value

    def sha256(self, data: Mapping[str, Any], key: str, prefix: str = "") -> str:
        value = self.text(data, key, prefix)
        if not re.fullmatch(r"[0-9a-f]{64}", value):
            raise self.fail(f"{prefix}{key}", f"'{value}' is not a sha256 (64 lowercase hex digits)")
        return value

    def python(self, value: object, key: str) -> str:
        if not isinstance(value, str) or not _PYTHON.match(value):
            raise self.fail(key, f'{value!r} is not a Python version like "3.12"')
        return value

    def flag(self, data: Mapping[str, Any], key: str, prefix: str = "") -> bool:
        value = data.get(key)
        if not isinstance(value, bool):
            raise self.fail(f"{prefix}{key}", f"must be true or false, not {value!r}")
        return value

    def whole(self, data: Mapping[str, Any], key: str, prefix: str = "") -> int:
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.fail(f"{prefix}{key}", f"must be a whole number >= 0, not {value!r}")
        return value

    def str_list(self, data: Mapping[str, Any], key: str, prefix: str = "") -> tuple[str, ...]:
        value = data.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{prefix}{key}", f"must be a non-empty list of strings, not {value!r}")
        return tuple(value)

    def str_map(self, data: Mapping[str, Any], key: str, prefix: str = "") -> dict[str, str]:
        table = self.table(data, key, prefix)
        for name, value in table.items():
            if not isinstance(value, str):
                raise self.fail(f"{prefix}{key}.{name}", f"must be a string, not {value!r}")
        return dict(table)


def load_matrix(path: Path | str | None = None, project: Path | None = None) -> Matrix:
    """Read and validate a matrix file (default: $NEURON_TORCH_MATRIX or constraints/matrix.toml of the project).

    Generated files, locks and builds live in the project (`project_root`): --project / $NEURON_TORCH_PROJECT when
    given, else, for a matrix named by path, the checkout it sits in (`<checkout>/constraints/<name>.toml`) or, for a
    matrix elsewhere, its own folder.
    """
    named = (
        Path(path)
        if path
        else (Path(os.environ["NEURON_TORCH_MATRIX"]) if os.environ.get("NEURON_TORCH_MATRIX") else None)
    )
    if named is None or project is not None or os.environ.get(PROJECT_ENV):
        root = project_root(project)
    else:
        root = _layout_root(named)
    matrix_path = named or root / DEFAULT_MATRIX
    text = read_text(matrix_path, "matrix file", "pass --matrix PATH (a release matrix, e.g. constraints/matrix.toml)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise MatrixError(matrix_path, "(syntax)", str(error)) from None
    return _parse(data, matrix_path, root)


def _layout_root(matrix_path: Path) -> Path:
    folder = matrix_path.resolve().parent
    return folder.parent if folder.name == "constraints" else folder


def project_root(explicit: Path | None = None) -> Path:
    """The neuron-torch project (a checkout: constraints/, Dockerfile, images/, ansible/) the command works in."""
    chosen = explicit or (Path(os.environ[PROJECT_ENV]) if os.environ.get(PROJECT_ENV) else None)
    if chosen is not None:
        if not (chosen / DEFAULT_MATRIX).is_file():
            raise NeuronTorchError(
                f"{chosen}: not a neuron-torch project (no {DEFAULT_MATRIX}); --project DIR and ${PROJECT_ENV} name "
                "a checkout of neuron-torch"
            )
        return chosen.resolve()
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / DEFAULT_MATRIX).is_file():
            return folder
    package_checkout = Path(__file__).resolve().parents[2]  # an editable install: the checkout it came from
    if (package_checkout / DEFAULT_MATRIX).is_file():
        return package_checkout
    raise NeuronTorchError(
        f"no neuron-torch project here: run inside a checkout of neuron-torch, or pass --project DIR (a checkout) "
        f"or set ${PROJECT_ENV}"
    )


def _parse(data: Mapping[str, Any], path: Path, root: Path) -> Matrix:
    r = _Reader(path)
    schema = data.get("schema")
    if schema != SCHEMA:
        raise r.fail("schema", f"must be {SCHEMA} (this neuron-torch reads schema {SCHEMA}), not {schema!r}")
    paths = data.get("paths", {})
    generated_dir = root / r.text(paths, "generated", "paths.", "constraints/generated")
    locks_dir = root / r.text(paths, "locks", "paths.", "constraints/locks")

    rel = r.table(data, "release")
    release = Release(
        name=r.text(rel, "name", "release."),
        version=r.version(rel, "version", "release."),
        date=r.text(rel, "date", "release."),
        notes=r.text(rel, "notes", "release.", ""),
        default_cell=r.text(rel, "default_cell", "release."),
    )
    packages = r.str_map(data, "packages")
    for name in packages:
        r.version(packages, name, "packages.")

    unsupported_table = r.table(data, "unsupported")
    unsupported = Unsupported(
        instance_families=r.str_map(unsupported_table, "instance_families", "unsupported."),
        os=r.str_map(unsupported_table, "os", "unsupported."),
        python=r.str_map(unsupported_table, "python", "unsupported."),
        arch=r.str_map(unsupported_table, "arch", "unsupported."),
    )

    families = {}
    for name, fam in r.table(data, "families").items():
        prefix = f"families.{name}."
        if not isinstance(fam, Mapping):
            raise r.fail(f"families.{name}", "must be a table")
        family = Family(
            name=name,
            torch=r.version(fam, "torch", prefix),
            torch_local=r.text(fam, "torch_local", prefix, ""),
            torch_neuronx=r.version(fam, "torch_neuronx", prefix),
            pythons=tuple(r.python(p, f"{prefix}python") for p in r.str_list(fam, "python", prefix)),
        )
        _check_family_pairing(r, family, prefix)
        for python in family.pythons:
            if python in unsupported.python:
                raise r.fail(f"{prefix}python", f"{python} is listed under [unsupported.python] too")
        families[name] = family

    systems = {}
    for os_id, osd in r.table(data, "os").items():
        prefix = f"os.{os_id}."
        if not isinstance(osd, Mapping):
            raise r.fail(f"os.{os_id}", "must be a table")
        if os_id in unsupported.os:
            raise r.fail(f"os.{os_id}", "is listed under [unsupported.os] too")
        pythons = osd.get("python")
        systems[os_id] = OperatingSystem(
            id=os_id,
            distro=r.text(osd, "distro", prefix),
            version=r.text(osd, "version", prefix),
            codename=r.text(osd, "codename", prefix),
            default_python=r.python(osd.get("default_python"), f"{prefix}default_python"),
            glibc=r.text(osd, "glibc", prefix),
            lock_platform=r.text(osd, "lock_platform", prefix),
            base_image=r.text(osd, "base_image", prefix),
            source_ami_name=r.text(osd, "source_ami_name", prefix, ""),
            source_ami_owner=r.text(osd, "source_ami_owner", prefix, ""),
            wheels_available=r.flag(osd, "wheels_available", prefix),
            wheels_note=r.text(osd, "wheels_note", prefix, ""),
            pythons=None
            if pythons is None
            else tuple(r.python(p, f"{prefix}python") for p in r.str_list(osd, "python", prefix)),
        )

    pyi = r.table(data, "python_install")
    python_install = PythonInstall(
        uv=r.version(pyi, "uv", "python_install."),
        uv_sha256=r.sha256(pyi, "uv_sha256", "python_install."),
        route_default=r.text(pyi, "route_default", "python_install."),
        route_other=r.text(pyi, "route_other", "python_install."),
    )

    instance_families = {}
    for name, fam in r.table(data, "instance_families").items():
        prefix = f"instance_families.{name}."
        instance_families[name] = InstanceFamily(name, r.text(fam, "arch", prefix), r.whole(fam, "lnc_default", prefix))
        if instance_families[name].arch in unsupported.arch:
            raise r.fail(f"{prefix}arch", f"{instance_families[name].arch} is listed under [unsupported.arch]")
    instances = {}
    for itype, inst in r.table(data, "instances").items():
        prefix = f"instances.{itype}."
        family_name = r.text(inst, "family", prefix)
        if family_name not in instance_families:
            raise r.fail(f"{prefix}family", f"'{family_name}' is not one of {', '.join(instance_families)}")
        instances[itype] = Instance(
            type=itype,
            family=family_name,
            chips=r.whole(inst, "chips", prefix),
            logical_devices=r.whole(inst, "logical_devices", prefix),
            note=r.text(inst, "note", prefix, ""),
        )

    apt_table = r.table(data, "apt")
    apt_packages = []
    for name, pkg in r.table(apt_table, "packages", "apt.").items():
        prefix = f"apt.packages.{name}."
        scope = r.text(pkg, "scope", prefix)
        if scope not in ("host", "image"):
            raise r.fail(f"{prefix}scope", f"must be 'host' or 'image', not '{scope}'")
        apt_packages.append(AptPackage(name, r.version(pkg, "version", prefix), scope))
    fingerprint = r.text(apt_table, "key_fingerprint", "apt.", "").replace(" ", "").upper()
    if fingerprint and not re.fullmatch(r"[0-9A-F]{40}", fingerprint):
        raise r.fail("apt.key_fingerprint", "must be a 40-hex-digit OpenPGP fingerprint (or empty: not pinned)")
    apt = AptRepo(
        url=r.text(apt_table, "url", "apt."),
        key_url=r.text(apt_table, "key_url", "apt."),
        key_fingerprint=fingerprint,
        keyring=r.text(apt_table, "keyring", "apt."),
        component=r.text(apt_table, "component", "apt."),
        packages=tuple(apt_packages),
    )

    indexes = _parse_indexes(r, data)
    forbidden = r.str_map(data, "forbidden")
    manifest = None
    if "manifest" in data:
        table = r.table(data, "manifest")
        digest = r.text(table, "sha256", "manifest.")
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise r.fail("manifest.sha256", "must be 64 lower-case hex digits")
        manifest = VendoredManifest(root / r.text(table, "path", "manifest."), digest)

    matrix = Matrix(
        path=path,
        root=root,
        release=release,
        packages=packages,
        families=families,
        os=systems,
        python_install=python_install,
        instance_families=instance_families,
        instances=instances,
        apt=apt,
        indexes=indexes,
        forbidden=forbidden,
        unsupported=unsupported,
        generated_dir=generated_dir,
        locks_dir=locks_dir,
        manifest=manifest,
    )
    cells = tuple(
        Cell(family, python, system, packages, generated_dir, locks_dir)
        for family in families.values()
        for python in family.pythons
        for system in systems.values()
        if system.pythons is None or python in system.pythons
    )
    matrix = Matrix(**{**matrix.__dict__, "cells": cells})
    if release.default_cell not in {c.id for c in cells}:
        raise r.fail("release.default_cell", f"'{release.default_cell}' is not one of the matrix's cells")
    return matrix


def _check_family_pairing(r: _Reader, family: Family, prefix: str) -> None:
    """torch-neuronx X.Y.* is built for torch X.Y: a family that pairs them otherwise is a typo that breaks installs."""
    torch_minor = ".".join(family.torch.split(".")[:2])
    neuronx_minor = ".".join(family.torch_neuronx.split(".")[:2])
    if family.name != torch_minor:
        raise r.fail(f"{prefix}torch", f"torch {family.torch} does not belong to family {family.name}")
    if neuronx_minor != torch_minor:
        raise r.fail(
            f"{prefix}torch_neuronx",
            f"torch-neuronx {family.torch_neuronx} is built for torch {neuronx_minor}, not torch {family.torch}",
        )


def _parse_indexes(r: _Reader, data: Mapping[str, Any]) -> tuple[Index, ...]:
    raw = data.get("indexes")
    if not isinstance(raw, list) or not raw:
        raise r.fail("indexes", "must be a non-empty array of [[indexes]] tables")
    indexes = []
    claimed: dict[str, str] = {}
    for position, entry in enumerate(raw):
        prefix = f"indexes[{position}]."
        index = Index(r.text(entry, "name", prefix), r.text(entry, "url", prefix), r.str_list(entry, "serves", prefix))
        for package in index.serves:
            if package in claimed:
                raise r.fail(f"{prefix}serves", f"'{package}' is already served by index '{claimed[package]}'")
            claimed[package] = index.name
        indexes.append(index)
    defaults = [i for i in indexes if i.is_default]
    if len(defaults) != 1:
        raise r.fail("indexes", 'exactly one index must serve "*" (the default for all other packages)')
    if len({i.name for i in indexes}) != len(indexes):
        raise r.fail("indexes", "index names must be unique")
    return tuple(indexes)
