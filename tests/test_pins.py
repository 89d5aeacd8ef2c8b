"""Pins are compared as PEP 440 versions: neuron_torch.pins (packaging), its standard-library copy in
smoke_tests/neuron_smoke/pins.py, and every consumer of the copy (the image's assert-pins.py, the Ansible lock filter)
agree on one table of cases."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from neuron_torch import pins as canonical
from tests import load_module

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "smoke_tests"))  # as tests/smoke/conftest.py does: this file also runs on its own
from neuron_smoke import pins as vendored  # noqa: E402

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


@pytest.mark.parametrize(("pin", "version", "ok"), CASES)
def test_both_copies_agree_on_the_table(pin: str, version: str, ok: bool) -> None:
    expected = canonical.satisfies("pkg", pin, version)
    assert (expected is None) is ok
    assert vendored.satisfies("pkg", pin, version) == expected


def test_a_refusal_names_the_package_the_pin_and_the_version() -> None:
    problem = canonical.satisfies("neuronx-cc", "2.28.7631.0", "2.28.7630.0+f702b353")
    assert problem == "neuronx-cc 2.28.7630.0+f702b353 does not satisfy the pin neuronx-cc==2.28.7631.0"


def test_bad_pins_and_versions_say_what_is_wrong() -> None:
    assert "is not a PEP 440 version or prefix" in (canonical.satisfies("nki", "0.7.*.1", "0.7.0") or "")
    assert "0.7.x is not a PEP 440 version" in (canonical.satisfies("nki", "0.7.0", "0.7.x") or "")


def _run_assert_pins(pins: str, venv_versions: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run images/docker/assert-pins.py against fake installed distributions (dist-info folders on sys.path)."""
    site = tmp_path / "site"
    for name, version in venv_versions.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    lib = tmp_path / "lib"  # the image's layout: pins.py beside assert-pins.py (see the Dockerfile's venv stage)
    lib.mkdir()
    shutil.copy(ROOT / "images/docker/assert-pins.py", lib)
    shutil.copy(ROOT / "smoke_tests/neuron_smoke/pins.py", lib)
    command = [sys.executable, "-S", str(lib / "assert-pins.py"), pins]
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
