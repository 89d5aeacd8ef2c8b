"""Reading the matrix TOML into the data model: every value checked, every error naming the file and dotted key."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from neuron_torch.errors import MatrixError
from neuron_torch.model import (
    PRECISIONS,
    AptPackage,
    AptRepo,
    AptScope,
    Cell,
    Compiler,
    Fabric,
    Family,
    Index,
    Instance,
    InstanceFamily,
    Matrix,
    OperatingSystem,
    PythonInstall,
    PythonRoute,
    Release,
    Unsupported,
    VendoredManifest,
)

SCHEMA = 1
_VERSION = re.compile(r"^\d+(\.\d+)*(\.\*)?(\+[a-z0-9.]+)?$")
_PYTHON = re.compile(r"^3\.\d+$")
FieldReader = Callable[["Reader", Mapping[str, Any], str, str], Any]


class Reader:
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

    def optional(self, data: Mapping[str, Any], key: str, prefix: str = "") -> str:
        return self.text(data, key, prefix, "")

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

    def python_at(self, data: Mapping[str, Any], key: str, prefix: str = "") -> str:
        return self.python(data.get(key), f"{prefix}{key}")

    def route(self, data: Mapping[str, Any], key: str, prefix: str = "") -> PythonRoute:
        value = self.text(data, key, prefix)
        routes = [route.value for route in PythonRoute]
        if value not in routes:
            raise self.fail(f"{prefix}{key}", f"must be {' or '.join(repr(r) for r in routes)}, not '{value}'")
        return PythonRoute(value)

    def entries(self, data: Mapping[str, Any], key: str, prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
        """The named tables of a table ([families.X], [os.Y], ...), each checked to be a table."""
        for name, entry in self.table(data, key, prefix).items():
            if not isinstance(entry, Mapping):
                raise self.fail(f"{prefix}{key}.{name}", "must be a table")
            yield name, entry

    def record(self, data: Mapping[str, Any], prefix: str, fields: Mapping[str, FieldReader]) -> dict[str, Any]:
        """The values of a record's fields, read in order (the first bad one is the one reported)."""
        return {name: read(self, data, name, prefix) for name, read in fields.items()}

    def str_map(self, data: Mapping[str, Any], key: str, prefix: str = "") -> dict[str, str]:
        table = self.table(data, key, prefix)
        for name, value in table.items():
            if not isinstance(value, str):
                raise self.fail(f"{prefix}{key}.{name}", f"must be a string, not {value!r}")
        return dict(table)


# The fields of each record read from a table of the same shape, in the order they are checked.
RELEASE: dict[str, FieldReader] = {
    "name": Reader.text,
    "version": Reader.version,
    "date": Reader.text,
    "notes": Reader.optional,
    "default_cell": Reader.text,
}
OS: dict[str, FieldReader] = {
    "distro": Reader.text,
    "version": Reader.text,
    "codename": Reader.text,
    "default_python": Reader.python_at,
    "glibc": Reader.text,
    "lock_platform": Reader.text,
    "base_image": Reader.text,
    "source_ami_name": Reader.optional,
    "source_ami_owner": Reader.optional,
    "wheels_available": Reader.flag,
    "wheels_note": Reader.optional,
}
PYTHON_INSTALL: dict[str, FieldReader] = {
    "uv": Reader.version,
    "uv_sha256": Reader.sha256,
    "route_default": Reader.route,
    "route_other": Reader.route,
}
INSTANCE: dict[str, FieldReader] = {
    "chips": Reader.whole,
    "logical_devices": Reader.whole,
    "note": Reader.optional,
}
# Optional per instance type: absent is 0, "not documented".
INSTANCE_OPTIONAL: dict[str, FieldReader] = {"efa_devices": Reader.whole}
FABRIC: dict[str, FieldReader] = {"provider": Reader.text, "note": Reader.optional}
COMPILER: dict[str, FieldReader] = {"default_precision": Reader.text, "note": Reader.optional}
APT: dict[str, FieldReader] = {"url": Reader.text, "key_url": Reader.text}
APT_AFTER_KEY: dict[str, FieldReader] = {"keyring": Reader.text, "component": Reader.text}


def parse(data: Mapping[str, Any], path: Path, root: Path) -> Matrix:
    r = Reader(path)
    schema = data.get("schema")
    if schema != SCHEMA:
        raise r.fail("schema", f"must be {SCHEMA} (this neuron-torch reads schema {SCHEMA}), not {schema!r}")
    paths = data.get("paths", {})
    generated_dir = root / r.text(paths, "generated", "paths.", "constraints/generated")
    locks_dir = root / r.text(paths, "locks", "paths.", "constraints/locks")
    release = Release(**r.record(r.table(data, "release"), "release.", RELEASE))
    packages = r.str_map(data, "packages")
    for name in packages:
        r.version(packages, name, "packages.")
    table = r.table(data, "unsupported")
    groups = ("instance_families", "os", "python", "arch")
    unsupported = Unsupported(**{group: r.str_map(table, group, "unsupported.") for group in groups})
    families = _families(r, data, unsupported)
    systems = _systems(r, data, unsupported)
    python_install = PythonInstall(**r.record(r.table(data, "python_install"), "python_install.", PYTHON_INSTALL))
    instance_families, instances = _instances(r, data, unsupported)
    routes = (python_install.route_default, python_install.route_other)
    cells = tuple(
        Cell(family, python, system, generated_dir, locks_dir, packages, routes)
        for family in families.values()
        for python in family.pythons
        for system in systems.values()
        if system.pythons is None or python in system.pythons
    )
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
        apt=_apt(r, data),
        indexes=_parse_indexes(r, data),
        forbidden=r.str_map(data, "forbidden"),
        unsupported=unsupported,
        generated_dir=generated_dir,
        locks_dir=locks_dir,
        manifest=_manifest(r, data, root),
        cells=cells,
        fabric=_fabric(r, data),
        compiler=_compiler(r, data),
    )
    if release.default_cell not in {c.id for c in cells}:
        raise r.fail("release.default_cell", f"'{release.default_cell}' is not one of the matrix's cells")
    return matrix


def _families(r: Reader, data: Mapping[str, Any], unsupported: Unsupported) -> dict[str, Family]:
    families = {}
    for name, fam in r.entries(data, "families"):
        prefix = f"families.{name}."
        family = Family(
            name=name,
            torch=r.version(fam, "torch", prefix),
            torch_local=r.optional(fam, "torch_local", prefix),
            torch_neuronx=r.version(fam, "torch_neuronx", prefix),
            pythons=tuple(r.python(p, f"{prefix}python") for p in r.str_list(fam, "python", prefix)),
        )
        _check_family_pairing(r, family, prefix)
        for python in family.pythons:
            if python in unsupported.python:
                raise r.fail(f"{prefix}python", f"{python} is listed under [unsupported.python] too")
        families[name] = family
    return families


def _systems(r: Reader, data: Mapping[str, Any], unsupported: Unsupported) -> dict[str, OperatingSystem]:
    systems = {}
    for os_id, osd in r.entries(data, "os"):
        prefix = f"os.{os_id}."
        if os_id in unsupported.os:
            raise r.fail(f"os.{os_id}", "is listed under [unsupported.os] too")
        fields = r.record(osd, prefix, OS)
        pythons = None
        if osd.get("python") is not None:
            pythons = tuple(r.python(p, f"{prefix}python") for p in r.str_list(osd, "python", prefix))
        systems[os_id] = OperatingSystem(id=os_id, **fields, pythons=pythons)
    return systems


def _instances(
    r: Reader, data: Mapping[str, Any], unsupported: Unsupported
) -> tuple[dict[str, InstanceFamily], dict[str, Instance]]:
    families = {}
    for name, fam in r.entries(data, "instance_families"):
        prefix = f"instance_families.{name}."
        families[name] = InstanceFamily(
            name,
            r.text(fam, "arch", prefix),
            r.whole(fam, "lnc_default", prefix),
            _peak_tflops(r, fam, prefix),
            r.whole(fam, "physical_cores_per_chip", prefix) if "physical_cores_per_chip" in fam else 0,
        )
        if families[name].arch in unsupported.arch:
            raise r.fail(f"{prefix}arch", f"{families[name].arch} is listed under [unsupported.arch]")
    instances = {}
    for itype, inst in r.entries(data, "instances"):
        prefix = f"instances.{itype}."
        family = r.text(inst, "family", prefix)
        if family not in families:
            raise r.fail(f"{prefix}family", f"'{family}' is not one of {', '.join(families)}")
        optional = {name: read for name, read in INSTANCE_OPTIONAL.items() if name in inst}
        fields = {**r.record(inst, prefix, INSTANCE), **r.record(inst, prefix, optional)}
        instances[itype] = Instance(type=itype, family=family, **fields)
    return families, instances


PEAK_DTYPES = ("bfloat16", "float32")


def _peak_tflops(r: Reader, family: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """A family's optional `peak_tflops = { bfloat16 = X, float32 = Y }`: dense TFLOP/s per chip, each > 0."""
    if "peak_tflops" not in family:
        return {}
    table = r.table(family, "peak_tflops", prefix)
    peaks = {}
    for dtype, value in table.items():
        key = f"{prefix}peak_tflops.{dtype}"
        if dtype not in PEAK_DTYPES:
            raise r.fail(key, f"'{dtype}' is not one of {', '.join(PEAK_DTYPES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise r.fail(key, f"must be a number of TFLOP/s > 0, not {value!r}")
        peaks[dtype] = float(value)
    if peaks and "physical_cores_per_chip" not in family:
        raise r.fail(f"{prefix}physical_cores_per_chip", "missing value (a chip's peak is shared by its cores)")
    return peaks


def _fabric(r: Reader, data: Mapping[str, Any]) -> Fabric:
    if "fabric" not in data:
        return Fabric()
    fabric = Fabric(**r.record(r.table(data, "fabric"), "fabric.", FABRIC))
    if not re.fullmatch(r"[a-z][a-z0-9_]*(;[a-z][a-z0-9_]*)*", fabric.provider):
        raise r.fail("fabric.provider", f"'{fabric.provider}' is not a libfabric provider name (such as efa or tcp)")
    return fabric


def _compiler(r: Reader, data: Mapping[str, Any]) -> Compiler:
    if "compiler" not in data:
        return Compiler()
    compiler = Compiler(**r.record(r.table(data, "compiler"), "compiler.", COMPILER))
    if compiler.default_precision not in PRECISIONS:
        raise r.fail(
            "compiler.default_precision", f"'{compiler.default_precision}' is not one of {', '.join(PRECISIONS)}"
        )
    return compiler


def _apt(r: Reader, data: Mapping[str, Any]) -> AptRepo:
    table = r.table(data, "apt")
    packages = []
    for name, pkg in r.entries(table, "packages", "apt."):
        prefix = f"apt.packages.{name}."
        scope = r.text(pkg, "scope", prefix)
        scopes = [s.value for s in AptScope]
        if scope not in scopes:
            raise r.fail(f"{prefix}scope", f"must be {' or '.join(repr(s) for s in scopes)}, not '{scope}'")
        packages.append(AptPackage(name, r.version(pkg, "version", prefix), AptScope(scope)))
    fingerprint = r.optional(table, "key_fingerprint", "apt.").replace(" ", "").upper()
    if fingerprint and not re.fullmatch(r"[0-9A-F]{40}", fingerprint):
        raise r.fail("apt.key_fingerprint", "must be a 40-hex-digit OpenPGP fingerprint (or empty: not pinned)")
    return AptRepo(
        **r.record(table, "apt.", APT),
        key_fingerprint=fingerprint,
        **r.record(table, "apt.", APT_AFTER_KEY),
        packages=tuple(packages),
    )


def _manifest(r: Reader, data: Mapping[str, Any], root: Path) -> VendoredManifest | None:
    if "manifest" not in data:
        return None
    table = r.table(data, "manifest")
    digest = r.text(table, "sha256", "manifest.")
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise r.fail("manifest.sha256", "must be 64 lower-case hex digits")
    return VendoredManifest(root / r.text(table, "path", "manifest."), digest)


def _check_family_pairing(r: Reader, family: Family, prefix: str) -> None:
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


def _parse_indexes(r: Reader, data: Mapping[str, Any]) -> tuple[Index, ...]:
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
