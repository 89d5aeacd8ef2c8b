"""Pins are compared as PEP 440 versions by one function, neuron_cell.pins, over packaging's versions where packaging
is installed and over the copy of packaging's version module vendored beside it where it is not (the image's pin
assertion and verify-device run in venvs that hold only the lock). Both agree with packaging's own specifiers (the
oracle) on one table of cases, and so do the consumers (the image's assertpins, the Ansible lock filter)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from neuron_cell import pins
from tests import REPO_ROOT, load_module

ROOT = REPO_ROOT
SRC = ROOT / "src"

# (pin, version, satisfied)
CASES = [
    ("2.28.7631.0", "2.28.7631.0+f702b353", True),  # AWS's local label, pinned without it (item 2 of issue 11)
    ("2.28.7631.0", "2.28.7631.0", True),
    ("2.28.7631.0", "2.28.7630.0+f702b353", False),
    ("2.28.7631.0+f702b353", "2.28.7631.0+f702b353", True),
    ("2.28.7631.0+f702b353", "2.28.7631.0+F702B353", True),
    ("2.28.7631.0+f702b353", "2.28.7631.0", False),
    ("2.28.7631.0+f702b353", "2.28.7631.0+6f62ff7c", False),
    ("0.7.0", "0.7.0+31049202112.g85070674", True),
    ("0.7.0+31049202112.g85070674", "0.7.0+31049202112-g85070674", True),
    ("0.7.0+1.a", "0.7.0+01.a", True),
    ("0.7.0", "0.7", True),
    ("0.7", "0.7.0", True),
    ("0.7.0", "0.7.0.1", False),
    ("2.13.3.0.*", "2.13.3.0.1871", True),
    ("2.13.3.0.*", "2.13.3.0", True),
    ("2.13.3.0.*", "2.13.3", True),
    ("2.13.3.0.*", "2.13.3.1.1871", False),
    ("2.13.3.0.*", "2.14.3.0.1871", False),
    ("2.13.3.0.*", "2.13.3.0.1871+abc", True),
    ("2.13.3.0.*", "2.13.3.0rc1", True),
    ("2.13.3.0.*", "1!2.13.3.0.1", False),
    ("2.13.0+cpu", "2.13.0+cpu", True),
    ("2.13.0+cpu", "2.13.0", False),
    ("2.13.0", "2.13.0+cpu", True),
    ("2.13.0", "2.13.0rc1", False),
    ("2.13.0rc1", "2.13.0-rc.1", True),
    ("2.13.0.post1", "2.13.0-1", True),
    ("2.13.0.dev0", "2.13.0dev", True),
    ("1!2.13.0", "2.13.0", False),
    ("2.13.0", "v2.13.0", True),
    ("2.13.0", "not-a-version", False),
    ("2.13.*.1", "2.13.0.1", False),  # not a valid pin
    ("", "2.13.0", False),
    ("2.13.0+", "2.13.0", False),
]


def oracle(pin: str, version: str) -> bool:
    """packaging's own answer: `==pin` contains `version` (pre-releases included); a bad pin or version is not."""
    try:
        return SpecifierSet(f"=={pin}").contains(version, prereleases=True)
    except InvalidSpecifier:
        return False


VENDORED_RUN = """
import json, sys
sys.modules["packaging"] = None  # as in a venv that holds only the lock
from neuron_cell import pins
cases = json.loads(sys.argv[1])
print(json.dumps([pins.VERSION_SOURCE, [pins.satisfies("pkg", pin, version) for pin, version, _ in cases]]))
"""


@pytest.mark.parametrize(("pin", "version", "ok"), CASES)
def test_the_table_agrees_with_packagings_specifiers(pin: str, version: str, ok: bool) -> None:
    assert pins.VERSION_SOURCE == "packaging"
    assert oracle(pin, version) is ok  # the table itself is right
    assert (pins.satisfies("pkg", pin, version) is None) is ok


def test_the_vendored_versions_give_the_same_answers() -> None:
    """Without packaging, the same function over the vendored version module: every answer, message for message."""
    done = subprocess.run(
        [sys.executable, "-c", VENDORED_RUN, json.dumps(CASES)], capture_output=True, text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, check=True,
    )  # fmt: skip
    source, answers = json.loads(done.stdout)
    assert source == "vendored"
    assert answers == [pins.satisfies("pkg", pin, version) for pin, version, _ in CASES]


def test_the_vendored_module_is_packagings_own() -> None:
    """vendor/packaging_version.py is packaging's version module of the release vendor/README.md names, byte for
    byte: the vendored parser is packaging's, not a second implementation."""
    import packaging
    import packaging.version

    vendor = SRC / "neuron_cell" / "vendor"
    release = re.search(r"of packaging (\S+) \(PyPI\)", (vendor / "README.md").read_text(encoding="utf-8"))
    assert release, "vendor/README.md names no packaging release"
    assert {"LICENSE", "LICENSE.APACHE", "LICENSE.BSD"} <= {p.name for p in vendor.iterdir()}
    if packaging.__version__ != release[1]:
        pytest.skip(f"this venv holds packaging {packaging.__version__}, not the vendored {release[1]}: not compared")
    vendored = (vendor / "packaging_version.py").read_bytes()
    assert vendored == Path(packaging.version.__file__).read_bytes()


def test_a_refusal_names_the_package_the_pin_and_the_version() -> None:
    problem = pins.satisfies("neuronx-cc", "2.28.7631.0", "2.28.7630.0+f702b353")
    assert problem == "neuronx-cc 2.28.7630.0+f702b353 does not satisfy the pin neuronx-cc==2.28.7631.0"


def test_bad_pins_and_versions_say_what_is_wrong() -> None:
    assert "is not a PEP 440 version or prefix" in (pins.satisfies("nki", "0.7.*.1", "0.7.0") or "")
    assert "0.7.x is not a PEP 440 version" in (pins.satisfies("nki", "0.7.0", "0.7.x") or "")


def _run_assert_pins(pins: str, venv_versions: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run neuron_cell.assertpins against fake installed distributions (dist-info folders on sys.path), from a copy
    of neuron_cell as the image holds it (/opt/neuron-torch/lib), with no site-packages (-S: no packaging)."""
    site = tmp_path / "site"
    for name, version in venv_versions.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lib = tmp_path / "lib"
    shutil.copytree(SRC / "neuron_cell", lib / "neuron_cell", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PYTHONPATH": f"{site}:{lib}", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-S", "-m", "neuron_cell.assertpins", pins]
    return subprocess.run(command, capture_output=True, text=True, env=env)


def test_assert_pins_accepts_labelled_versions(tmp_path: Path) -> None:
    versions = {"neuronx-cc": "2.28.7631.0+f702b353", "nki": "0.7.0+31049202112.g85070674"}
    done = _run_assert_pins("neuronx-cc==2.28.7631.0 nki==0.7.0", versions, tmp_path)
    assert done.returncode == 0, done.stderr


def test_assert_pins_refuses_another_version_naming_the_package(tmp_path: Path) -> None:
    done = _run_assert_pins("neuronx-cc==2.28.7631.0 nki==0.7.0", {"neuronx-cc": "2.28.7630.0+f702b353"}, tmp_path)
    assert done.returncode == 1
    assert "neuronx-cc 2.28.7630.0+f702b353 does not satisfy the pin neuronx-cc==2.28.7631.0" in done.stderr
    assert "nki is not installed" in done.stderr


def _lock_filter() -> ModuleType:
    return load_module(ROOT / "ansible/filter_plugins/neuron_lock.py", "neuron_lock")


def test_ansible_filter_compares_installed_with_locked_versions_by_pep440() -> None:
    lock = "neuronx-cc==2.28.7631.0+f702b353 \\\n    --hash=sha256:00\nnki==0.7.0 \\\n    --hash=sha256:11\n"
    missing = _lock_filter().neuron_lock_missing
    installed = [{"name": "neuronx_cc", "version": "2.28.7631.0+F702B353"}, {"name": "nki", "version": "0.7"}]
    assert missing(lock, installed) == []
    installed = [{"name": "neuronx-cc", "version": "2.28.7631.0"}]
    assert missing(lock, installed) == ["neuronx-cc==2.28.7631.0+f702b353", "nki==0.7.0"]
