"""What the toolkit says about a cell: its record (for JSON and for installed hosts) and its install route."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from neuron_torch.cellrecord import schema_version
from neuron_torch.matrix import AptScope, Cell, Matrix, PythonRoute


def relative(path: Path, matrix: Matrix) -> str:
    try:
        return str(path.relative_to(matrix.root))
    except ValueError:
        return str(path)


def cell_record(matrix: Matrix, cell: Cell) -> dict[str, Any]:
    """The cell as data (cell.schema.json). Images and hosts install it as /etc/neuron-torch/cell.json."""
    return {
        "schema": schema_version(),
        "id": cell.id,
        "release": matrix.release.name,
        "family": cell.family.name,
        "python": cell.python,
        "os": cell.os.id,
        "distro": cell.os.distro,
        "ubuntu": cell.os.version if cell.os.distro == "ubuntu" else None,
        "codename": cell.os.codename,
        "torch": cell.family.torch_pin,
        "torch_neuronx": cell.family.torch_neuronx,
        "neuronx_cc": cell.packages.get("neuronx-cc"),
        "nki": cell.packages.get("nki"),
        "wheels_available": cell.os.wheels_available,
        "python_route": cell.python_route,
        "base_image": cell.os.base_image,
        "constraints": relative(cell.constraints_path, matrix),
        "lock": relative(cell.lock_path, matrix),
        "apt": {p.name: p.version for p in matrix.apt.packages if p.scope == AptScope.IMAGE},
        "apt_host": {p.name: p.version for p in matrix.apt.packages if p.scope == AptScope.HOST},
    }


_DLAMI_FAMILY = re.compile(r'DLAMI "[^"]*torch-neuronx (\d+\.\d+)')


def caveats(matrix: Matrix, cell: Cell) -> list[str]:
    notes = []
    if not cell.os.wheels_available:
        notes.append(cell.os.wheels_note)
        dlami = _DLAMI_FAMILY.search(cell.os.wheels_note)
        if dlami and dlami[1] != cell.family.name:
            notes.append(
                f"The DLAMI named above carries torch-neuronx {dlami[1]}, not this cell's {cell.family.name}: for "
                f"torch-neuronx {cell.family.name} on {cell.os.id}, build it from source, or pick the cell "
                f"{cell.family.name}-py{cell.python}-<an OS with wheels> (`neuron-torch matrix` lists them)."
            )
    if cell.python_route != PythonRoute.DISTRO:
        notes.append(
            f"Python {cell.python} is not {cell.os.id}'s own ({cell.os.default_python}): it is installed as a "
            f"standalone CPython by uv {matrix.python_install.uv} (`uv python install {cell.python}`)."
        )
    if "*" in cell.family.torch_neuronx:
        notes.append(
            f"torch-neuronx is pinned to the family {cell.family.torch_neuronx}: the release does not publish the "
            f"exact build number; the cell's hash lock ({relative(cell.lock_path, matrix)}) fixes it."
        )
    return notes


def install_route(matrix: Matrix, cell: Cell) -> list[str]:
    """The steps that install the cell on a host, as a user would type them."""
    apt = matrix.apt
    image_pins = " ".join(p.apt_pin for p in apt.packages if p.scope == AptScope.IMAGE)
    host_pins = " ".join(p.apt_pin for p in apt.packages if p.scope == AptScope.HOST)
    python = f"python{cell.python}" if cell.python_route == PythonRoute.DISTRO else f"uv python install {cell.python}"
    indexes = " ".join(f"--extra-index-url {i.url}" for i in matrix.indexes if not i.is_default)
    return [
        f"apt repository: deb [signed-by={apt.keyring}] {apt.url} {cell.os.codename} {apt.component}",
        f"apt (host only): linux-headers-$(uname -r) {host_pins}",
        f"apt (host and image): {image_pins}",
        f"python: {python}; venv; pip install --require-hashes -r {relative(cell.lock_path, matrix)}",
        f"without a lock: pip install -c {relative(cell.constraints_path, matrix)} torch-neuronx torch neuronx-cc "
        f"nki {indexes}",
    ]
