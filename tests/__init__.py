"""neuron-torch's own tests: tests/unit (one module each, no Docker, no network), tests/integration, and their shared
support (tests/testbed, tests/simdevice). `REPO_ROOT` is the checkout. `load_module` is their one way of importing a
file that is not on sys.path (an Ansible
filter plugin, the simulated device's builder, the testinfra suite's conftest). `written` makes an input file for a
test of bad input, or leaves it missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout, wherever a test file sits below tests/


def load_module(path: Path, name: str) -> ModuleType:
    """The module in `path`, imported under `name` (not added to sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def written(path: Path, content: str | bytes | None) -> Path:
    """`path` holding `content` (text or bytes), or left missing where `content` is None."""
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    return path
