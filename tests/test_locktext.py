"""One lock reader and one name normaliser where the toolkit is not installed (issue 17): verify-device's cell pins,
the testinfra suite and the Ansible filter plugin all read locks through smoke_tests/neuron_smoke/locktext.py, and
agree with the toolkit's own reader (neuron_torch.lockfile) and name normaliser (neuron_torch.matrix): locktext.py
parses nothing itself, it reads through lockgate.py beside it, the toolkit's one lock parser, copied by render."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from neuron_torch.lockfile import read_lock
from neuron_torch.matrix import canonical_name
from tests import load_module

REPO = Path(__file__).resolve().parents[1]
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
def test_every_normaliser_is_the_toolkits(name: str) -> None:
    sys.path.insert(0, str(REPO / "smoke_tests"))
    try:
        from neuron_smoke.locktext import canonical
    finally:
        sys.path.remove(str(REPO / "smoke_tests"))
    assert canonical(name) == canonical_name(name)


def test_the_suite_the_filters_and_the_toolkit_read_a_lock_alike(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text(LOCK)
    conftest = load_module(REPO / "smoke_tests" / "infra" / "conftest.py", "nt17_locktext_conftest")
    filters = load_module(REPO / "ansible" / "filter_plugins" / "neuron_lock.py", "nt17_locktext_filters")
    assert conftest.read_pins(lock) == filters.neuron_lock_versions(LOCK) == WANT
    assert {canonical_name(p.name): p.version for p in read_lock(lock).packages} == WANT
    groups = load_module(REPO / "smoke_tests" / "neuron_smoke" / "locktext.py", "nt17_locktext").groups(LOCK)
    assert [g["url"] for g in groups] == ["http://127.0.0.1:1/simple/pypi/", "http://127.0.0.1:1/simple/neuron/"]


def test_the_testinfra_suite_normalises_names_with_locktext() -> None:
    """smoke_tests/infra keeps no normaliser of its own: its `canonical` fixture is locktext.canonical."""
    for path in (REPO / "smoke_tests" / "infra").glob("*.py"):
        assert "re.sub(" not in path.read_text(), f"{path.name} normalises names itself again"
    conftest = load_module(REPO / "smoke_tests" / "infra" / "conftest.py", "nt17_locktext_infra_conftest")
    assert conftest.canonical.__wrapped__()("Torch_Neuronx") == "torch-neuronx"


def test_locktext_parses_nothing_itself_and_keeps_what_pip_needs() -> None:
    """locktext.py shapes what lockgate.py (the one lock parser) read: no pattern of its own; an entry's marker and
    hashes reach pip as the lock wrote them."""
    source = (REPO / "smoke_tests" / "neuron_smoke" / "locktext.py").read_text()
    assert "import re\n" not in source and "re.compile" not in source
    groups = load_module(REPO / "smoke_tests" / "neuron_smoke" / "locktext.py", "nt17_locktext_markers").groups(LOCK)
    assert groups[0]["requirements"] == (
        "Jinja2==3.1.6 \\\n    --hash=sha256:aa\n"
        'Zope.Interface==7.2 ; python_version >= "3.11" \\\n    --hash=sha256:cc\n'
    )


def test_the_smoke_tests_lock_parser_is_the_toolkits_own_file() -> None:
    """smoke_tests/neuron_smoke/lockgate.py is written by `neuron-torch render` from src/neuron_torch/lockgate.py
    (`render --check` fails when it is stale): one parser, installed where the toolkit is not."""
    copy = (REPO / "smoke_tests" / "neuron_smoke" / "lockgate.py").read_text()
    note, body = copy.split("\n", 1)
    assert note.startswith("# A copy of src/neuron_torch/lockgate.py, written by `neuron-torch render`")
    assert body == (REPO / "src" / "neuron_torch" / "lockgate.py").read_text()
