"""Every trait listed in tests/testbed/traits.toml is read back from what the test bed built, so the list and the
twin cannot drift apart; each trait names its source."""

from __future__ import annotations

import email.parser
import zipfile
from pathlib import Path

import pytest

from tests.testbed import traits
from tests.testbed.harness import built_testbed
from tests.testbed.index import REAL_TORCH_DIR


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def _requires(wheel: Path) -> list[str]:
    return [r.replace(" ", "") for r in _metadata(wheel).get_all("Requires-Dist") or [] if "extra ==" not in r]


def test_every_trait_names_its_source() -> None:
    for section in ("wheels",):
        for name, trait in traits.traits()[section].items():
            assert trait.get("source", "").strip(), f"traits.toml [{section}.{name}] names no source"


def test_torch_requires_are_the_real_wheels() -> None:
    real = sorted(REAL_TORCH_DIR.glob("torch-2.13.0+cpu-cp*.whl"))
    if not real:
        reason = f"no real torch 2.13.0 CPU wheel in {REAL_TORCH_DIR} to compare traits.toml [wheels.torch] with"
        print(f"skipping: {reason}")
        pytest.skip(reason)
    assert list(traits.requires("torch")) == _requires(real[0])


def test_the_served_wheels_carry_the_listed_traits() -> None:
    www = built_testbed().www / "simple"
    for name, trait in traits.traits()["wheels"].items():
        index = "pytorch-cpu" if name == "torch" else "neuron"
        wheels = sorted((www / index / name).glob("*-py3-none-any.whl"))  # the fixtures, not the real cp311 torch
        assert wheels, f"the test bed serves no fixture {name} on its {index} index"
        for wheel in wheels:
            metadata = _metadata(wheel)
            if label := trait.get("local_label"):
                assert metadata["Version"].endswith(f"+{label}"), f"{wheel.name}: no local label +{label}"
            assert _requires(wheel) == list(trait["requires"]), f"{wheel.name}: Requires-Dist differs from traits.toml"
