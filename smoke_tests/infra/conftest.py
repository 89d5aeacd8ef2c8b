"""Options of the shared testinfra suite (image, host, AMI): what the target should hold, read on the controller.

pytest smoke_tests/infra --hosts=docker://CONTAINER --cell-file cell.json --lock lock.txt --target image --image IMG
pytest smoke_tests/infra --hosts=ansible://HOST --ansible-inventory=INV --cell-file ... --lock ... --target host
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# neuron_cell (the lock reader, the cell record's loader, pin matching), standard library only: the checkout's
# src/neuron_cell on the controller, or /opt/neuron-torch/lib/neuron_cell beside an installed copy of the suite.
_ROOT = Path(__file__).resolve().parents[2]
_LIB = next((p for p in (_ROOT / "src", _ROOT / "lib") if (p / "neuron_cell" / "__init__.py").is_file()), None)
if _LIB is None:
    raise ImportError(
        f"neuron_cell is neither in {_ROOT / 'src'} nor in {_ROOT / 'lib'}: run the suite from a checkout"
    )
if str(_LIB) not in sys.path:
    sys.path.insert(0, str(_LIB))
from neuron_cell import cellrecord, locktext  # noqa: E402  (after the path above)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("neuron-torch infra")
    group.addoption("--cell-file", help="the cell record (JSON) the target should hold; required")
    group.addoption("--lock", help="the hash lock the venv was filled from; required")
    group.addoption("--target", choices=["image", "host"], default="host", help="image or host/AMI (default: host)")
    group.addoption("--image", help="image name or id, for the label checks (image target; docker on the controller)")
    group.addoption("--runtime-user", default="neuron", help="the user that runs workloads (default: neuron)")
    group.addoption(
        "--captured",
        action="store_true",
        help="the target is a build's final state, about to be captured: also run the hygiene checks",
    )


def read_pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` entry of a pip-tools/neuron-torch lock (names canonical)."""
    pins: dict[str, str] = locktext.versions(path.read_text(encoding="utf-8"))
    return pins


@pytest.fixture(scope="session")
def canonical() -> Callable[[str], str]:
    """The one PEP 503 name normaliser of the smoke tests (locktext.canonical), for names the host reports."""
    normalise: Callable[[str], str] = locktext.canonical
    return normalise


def _required(config: pytest.Config, option: str) -> Path:
    value = config.getoption(option)
    if not value:
        pytest.exit(f"smoke_tests/infra needs {option} FILE (see smoke_tests/infra/README.md)", returncode=4)
    path = Path(value)
    if not path.is_file():
        pytest.exit(f"{option} {path}: no such file", returncode=4)
    return path


def read_cell(path: Path) -> dict[str, Any]:
    """The cell record at `path`; a record of another schema version fails each test that reads it, with the reason
    (the checks that need no record still run)."""
    try:
        return cellrecord.load(path, f"--cell-file {path}")
    except cellrecord.RecordError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def cell(pytestconfig: pytest.Config) -> dict[str, Any]:
    return read_cell(_required(pytestconfig, "--cell-file"))


@pytest.fixture(scope="session")
def lock_path(pytestconfig: pytest.Config) -> Path:
    return _required(pytestconfig, "--lock")


@pytest.fixture(scope="session")
def locked(lock_path: Path) -> dict[str, str]:
    return read_pins(lock_path)


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> str:
    return str(pytestconfig.getoption("--target"))


@pytest.fixture(scope="session")
def image_name(pytestconfig: pytest.Config, target: str) -> str:
    if target != "image":
        pytest.skip("labels exist only on images (--target host)")
    name = pytestconfig.getoption("--image")
    if not name:
        pytest.skip("no --image given: the label checks need the image name and docker on the controller")
    return str(name)


@pytest.fixture(scope="session")
def runtime_user(pytestconfig: pytest.Config) -> str:
    return str(pytestconfig.getoption("--runtime-user"))


@pytest.fixture
def image_only(target: str) -> None:
    if target != "image":
        pytest.skip("an image-only check (caches, labels, build toolchain); the target is a host")


@pytest.fixture
def captured_only(pytestconfig: pytest.Config) -> None:
    if not pytestconfig.getoption("--captured"):
        pytest.skip("a hygiene check of a captured build (--captured); a live host has keys, ids and logs")
