"""The release matrix: `constraints/matrix.toml` read into typed, validated data.

Every other part of the toolkit reads the release through `load_matrix`; nothing else parses the TOML. The records
are neuron_torch.model's (re-exported here, where every module imports them from); the reading and checking is
neuron_torch.matrix_schema's.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from neuron_cell.lockgate import canonical_name as canonical_name  # re-exported: the name every module uses
from neuron_torch.errors import MatrixError, NeuronTorchError
from neuron_torch.files import read_text
from neuron_torch.matrix_schema import SCHEMA as SCHEMA
from neuron_torch.matrix_schema import parse
from neuron_torch.model import AptPackage as AptPackage
from neuron_torch.model import AptRepo as AptRepo
from neuron_torch.model import AptScope as AptScope
from neuron_torch.model import Cell as Cell
from neuron_torch.model import Family as Family
from neuron_torch.model import Index as Index
from neuron_torch.model import Instance as Instance
from neuron_torch.model import InstanceFamily as InstanceFamily
from neuron_torch.model import Matrix as Matrix
from neuron_torch.model import OperatingSystem as OperatingSystem
from neuron_torch.model import PythonInstall as PythonInstall
from neuron_torch.model import PythonRoute as PythonRoute
from neuron_torch.model import Release as Release
from neuron_torch.model import Unsupported as Unsupported
from neuron_torch.model import VendoredManifest as VendoredManifest

DEFAULT_MATRIX = Path("constraints") / "matrix.toml"
PROJECT_ENV = "NEURON_TORCH_PROJECT"


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
    option = "$NEURON_TORCH_MATRIX" if named is not None and not path else "--matrix PATH"
    text = read_text(matrix_path, "matrix file", f"pass {option} (a release matrix, e.g. constraints/matrix.toml)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise MatrixError(matrix_path, "(syntax)", str(error)) from None
    return parse(data, matrix_path, root)


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
