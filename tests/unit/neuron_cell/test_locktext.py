"""One lock parser and one name normaliser everywhere: verify-device's cell pins, the testinfra suite, the Ansible
filter plugin and the toolkit (neuron_torch.lockfile, neuron_torch.matrix) all read locks through neuron_cell
(locktext over lockgate, the one parser), and normalise names with the one function, neuron_cell.lockgate's."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_cell import lockgate, locktext
from neuron_torch.lockfile import read_lock
from neuron_torch.matrix import canonical_name
from tests import REPO_ROOT, load_module

REPO = REPO_ROOT
LOCK = """# neuron-torch lock
# index pypi: http://127.0.0.1:1/simple/pypi/
Jinja2==3.1.6 \\
    --hash=sha256:aa
    # from http://127.0.0.1:1/simple/pypi/
torch_neuronx==2.13.3.0.1871 \\
    --hash=sha256:bb
    # from http://127.0.0.1:1/simple/neuron/
Zope.Interface==7.2 ; python_version >= "3.11" \\
    --hash=sha256:cc
    # from http://127.0.0.1:1/simple/pypi/
"""
WANT = {"jinja2": "3.1.6", "torch-neuronx": "2.13.3.0.1871", "zope-interface": "7.2"}


@pytest.mark.parametrize("name", ["Torch_Neuronx", "torch.neuronx", "TORCH--neuronx", "zope.interface", "nki"])
def test_every_normaliser_is_the_one_function(name: str) -> None:
    assert locktext.canonical is canonical_name is lockgate.canonical_name
    assert canonical_name(name) == {"nki": "nki", "zope.interface": "zope-interface"}.get(name, "torch-neuronx")


def test_the_suite_the_filters_and_the_toolkit_read_a_lock_alike(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text(LOCK)
    conftest = load_module(REPO / "smoke_tests" / "infra" / "conftest.py", "nt17_locktext_conftest")
    filters = load_module(REPO / "ansible" / "filter_plugins" / "neuron_lock.py", "nt17_locktext_filters")
    assert conftest.read_pins(lock) == filters.neuron_lock_versions(LOCK) == WANT
    assert {canonical_name(p.name): p.version for p in read_lock(lock).packages} == WANT
    groups = locktext.groups(LOCK)
    assert [g["url"] for g in groups] == ["http://127.0.0.1:1/simple/pypi/", "http://127.0.0.1:1/simple/neuron/"]


def test_the_testinfra_suite_normalises_names_with_the_one_function() -> None:
    """smoke_tests/infra keeps no normaliser of its own: its `canonical` fixture is neuron_cell's."""
    conftest = load_module(REPO / "smoke_tests" / "infra" / "conftest.py", "nt17_locktext_infra_conftest")
    assert conftest.canonical.__wrapped__() is canonical_name


def test_locktext_keeps_what_pip_needs() -> None:
    """An entry's marker and hashes reach pip as the lock wrote them, grouped by the index each came from."""
    groups = locktext.groups(LOCK)
    assert groups[0]["requirements"] == (
        "Jinja2==3.1.6 \\\n    --hash=sha256:aa\n"
        'Zope.Interface==7.2 ; python_version >= "3.11" \\\n    --hash=sha256:cc\n'
    )
    with pytest.raises(ValueError, match="name no index of the lock"):
        locktext.groups(LOCK, {"warez": "http://mirror.example/simple/"})
