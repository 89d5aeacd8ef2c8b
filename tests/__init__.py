"""neuron-torch's own tests. `load_module` is their one way of importing a file that is not on sys.path (an Ansible
filter plugin, the simulated device's builder, the testinfra suite's conftest)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_module(path: Path, name: str) -> ModuleType:
    """The module in `path`, imported under `name` (not added to sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
