"""The release's data model: the typed records `load_matrix` (neuron_torch.matrix) builds from the matrix TOML.

String-valued enums keep their TOML spellings: they compare equal to, format and serialise as those strings.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from neuron_cell.boundary import quote
from neuron_cell.instances import InstanceTable, UnsupportedInstance, judge
from neuron_cell.lockgate import canonical_name, forbidden_reason
from neuron_torch.errors import NeuronTorchError, UnsupportedError

_CELL_ID = re.compile(r"^(?P<family>[^-]+)-py(?P<python>[^-]+)-(?P<os>.+)$")


class PythonRoute(StrEnum):
    """How a cell gets its Python: the OS's own interpreter, or uv's python-build-standalone."""

    DISTRO = "distro"
    UV_STANDALONE = "uv-standalone"


class AptScope(StrEnum):
    """Where an apt package is installed: on the host only (the DKMS driver), or in images and on hosts."""

    HOST = "host"
    IMAGE = "image"


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
    route_default: PythonRoute  # the route of a cell whose Python is the OS's default Python
    route_other: PythonRoute  # the route of every other cell
    # Where `uv python install` finds interpreters: empty = uv's built-in python-build-standalone metadata and URLs;
    # set from mirror settings ([python] in docs/mirrors.md), passed on as UV_PYTHON_DOWNLOADS_JSON_URL and
    # UV_PYTHON_INSTALL_MIRROR.
    downloads_json_url: str = ""
    install_mirror: str = ""


@dataclass(frozen=True)
class InstanceFamily:
    """An instance family of the release ([instance_families]): its CPU architecture and the logical NeuronCore
    size its instances start with (NEURON_LOGICAL_NC_CONFIG's default)."""

    name: str
    arch: str
    lnc_default: int
    # Dense peak TFLOP/s of one chip per dtype ("bfloat16", "float32") and its physical NeuronCores; empty and 0
    # where the release does not document them. verify-device's throughput floor is a share of a logical device's
    # part (lnc / physical_cores_per_chip of a chip).
    peak_tflops: Mapping[str, float] = field(default_factory=dict)
    physical_cores_per_chip: int = 0

    def core_peak_tflops(self) -> dict[str, float]:
        """Peak TFLOP/s of one physical NeuronCore per dtype; empty where not documented."""
        if not self.physical_cores_per_chip:
            return {}
        return {dtype: chip / self.physical_cores_per_chip for dtype, chip in self.peak_tflops.items()}


@dataclass(frozen=True)
class Instance:
    type: str
    family: str
    chips: int
    logical_devices: int
    note: str
    efa_devices: int = 0  # EFA devices the instance type documents; 0: not documented (presence only is checked)

    @property
    def expected_devices(self) -> int | None:
        """Logical devices at the default LNC, or None where the release does not document it."""
        return self.logical_devices or None


def apt_pin(name: str, version: str) -> str:
    """apt's `name=version*`: the repository's versions carry a build-hash suffix (2.35.30.0-1a2b3c4d5)."""
    return f"{name}={version}*"


@dataclass(frozen=True)
class AptPackage:
    name: str
    version: str
    scope: AptScope

    @property
    def apt_pin(self) -> str:
        return apt_pin(self.name, self.version)


@dataclass(frozen=True)
class AptRepo:
    url: str
    key_url: str
    key_fingerprint: str
    keyring: str
    component: str
    packages: tuple[AptPackage, ...]

    def scoped(self, scope: AptScope) -> tuple[AptPackage, ...]:
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
    generated_dir: Path  # the matrix's folders: the cell's rendered files and its lock are named by its id there
    locks_dir: Path
    packages: Mapping[str, str]
    python_routes: tuple[PythonRoute, PythonRoute]  # [python_install] route_default, route_other

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
    def record_path(self) -> Path:
        """The cell record (cell.schema.json) that `neuron-torch render` writes."""
        return self.generated_dir / f"{self.id}.json"

    @property
    def lock_path(self) -> Path:
        return self.locks_dir / f"{self.id}.txt"

    @property
    def python_route(self) -> PythonRoute:
        default, other = self.python_routes
        return default if self.python == self.os.default_python else other


@dataclass(frozen=True)
class Fabric:
    """The libfabric provider the release's collectives use between nodes (`efa` on AWS); "" when not named."""

    provider: str = ""
    note: str = ""


# The precisions verify-device's model evaluation can compare at (--precision): float32 throughout, float32 matmuls
# at bfloat16 input precision (neuronx-cc's --auto-cast matmult --auto-cast-type bf16), or torch.autocast(bfloat16).
PRECISIONS = ("fp32", "bf16-matmul", "bf16-autocast")


@dataclass(frozen=True)
class Compiler:
    """How the release's compiler computes float32 by default (one of PRECISIONS); "" when not named."""

    default_precision: str = ""
    note: str = ""


@dataclass(frozen=True)
class Matrix:
    """The release as constraints/matrix.toml states it, checked (matrix_schema.py), with the folders it names
    resolved against its checkout (`root`)."""

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
    fabric: Fabric = field(default=Fabric())
    compiler: Compiler = field(default=Compiler())

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
                f"{quote(cell_id)} is not a cell id: the form is FAMILY-pyPYTHON-OS, e.g. {self.release.default_cell}. "
                f"Supported cells: {', '.join(c.id for c in self.cells)}"
            )
        self.family(match["family"])
        self.require_python(match["python"])
        os_id, _, arch = match["os"].rpartition("-")
        if os_id and arch in self.unsupported.arch:  # e.g. ...-ubuntu26.04-arm64
            self.require_arch(arch)
        self.operating_system(match["os"])
        raise UnsupportedError(
            f"cell {quote(cell_id)} is not in {self.release.name}. "
            f"Supported cells: {', '.join(c.id for c in self.cells)}"
        )

    def family(self, name: str) -> Family:
        if name in self.families:
            return self.families[name]
        raise UnsupportedError(
            f"torch-neuronx family {quote(name)} is not in {self.release.name}; supported: "
            + ", ".join(f"{f.name} (torch {f.torch}, torch-neuronx {f.torch_neuronx})" for f in self.families.values())
        )

    def require_python(self, python: str) -> str:
        supported = ", ".join(self.pythons)
        if python in self.pythons:
            return python
        reason = self.unsupported.python.get(python)
        if reason:
            raise UnsupportedError(f"Python {python} is not supported: {reason}. Supported: {supported}")
        raise UnsupportedError(f"Python {quote(python)} is not in {self.release.name}. Supported: {supported}")

    def operating_system(self, os_id: str) -> OperatingSystem:
        supported = ", ".join(self.os)
        if os_id in self.os:
            return self.os[os_id]
        reason = self.unsupported.os.get(os_id)
        if reason:
            raise UnsupportedError(f"{os_id} is not supported: {reason}. Supported: {supported}")
        raise UnsupportedError(f"operating system {quote(os_id)} is not in {self.release.name}. Supported: {supported}")

    def instance_table(self) -> InstanceTable:
        """What the release knows of instance types, for neuron_cell.instances.judge (and verify-device's facts)."""
        return InstanceTable(
            release=self.release.name,
            known={i.type: i.family for i in self.instances.values()},
            families=list(self.instance_families),
            unsupported=dict(self.unsupported.instance_families),
        )

    def instance(self, instance_type: str) -> Instance:
        try:
            judged = judge(self.instance_table(), instance_type)
        except UnsupportedInstance as exc:
            raise UnsupportedError(str(exc)) from None
        if judged.listed:
            return self.instances[instance_type]
        # A size the release does not list (e.g. trn3.3xlarge): its family is supported, its device count unknown.
        note = f"{instance_type} is not listed in {self.release.name}: its device count is not documented there"
        return Instance(instance_type, judged.family, 0, 0, note)

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
