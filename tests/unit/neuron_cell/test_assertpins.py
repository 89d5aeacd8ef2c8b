"""neuron_cell.assertpins, in process: each pin the environment's installed distributions do not satisfy is one
problem naming the package (not installed, or the version found against the pin); main() exits 0 printing the
pins, 1 naming every wrong one, 2 on a bad command line. (test_pins.py runs it as the image does, in a subprocess.)"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version

import pytest

from neuron_cell import assertpins
from neuron_cell.pins import satisfies

VENV = {"torch-neuronx": "2.14.3.0.1871", "torch": "2.14.0+cpu", "neuronx-cc": "2.28.7631.0+f702b353"}


@pytest.fixture
def venv(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The installed distributions, as importlib.metadata.version reports them."""

    def version(name: str) -> str:
        if name not in VENV:
            raise PackageNotFoundError(name)
        return VENV[name]

    monkeypatch.setattr(assertpins, "version", version)
    return VENV


def pins_problems(pins: list[str]) -> str:
    return "; ".join(assertpins.wrong_pins(pins))


def test_the_installed_pins_pass(venv: dict[str, str]) -> None:
    assert assertpins.wrong_pins(["torch-neuronx==2.14.3.0.*", "torch==2.14.0+cpu", "neuronx-cc==2.28.7631.0"]) == []
    assert assertpins.wrong_pins([]) == []


def test_each_wrong_pin_is_named(venv: dict[str, str]) -> None:
    pins = ["torch-neuronx==2.13.3.0.*", "torch==2.14.0+cpu", "nki==0.7.0", "torch==2.14.0+cu121"]
    assert assertpins.wrong_pins(pins) == [
        satisfies("torch-neuronx", "2.13.3.0.*", venv["torch-neuronx"]),
        "nki is not installed (pinned nki==0.7.0)",
        satisfies("torch", "2.14.0+cu121", venv["torch"]),
    ]
    assert "torch-neuronx 2.14.3.0.1871 does not satisfy the pin torch-neuronx==2.13.3.0.*" in pins_problems(pins)


def test_the_real_environment_is_read() -> None:
    """Without the stand-in: the running Python's own distributions (pytest is installed wherever this runs)."""
    found = installed_version("pytest")
    assert assertpins.wrong_pins([f"pytest=={found}"]) == []
    assert assertpins.wrong_pins(["pytest==0.0.1"]) == [f"pytest {found} does not satisfy the pin pytest==0.0.1"]


def test_main_exit_codes(venv: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert assertpins.main(["torch==2.14.0+cpu neuronx-cc==2.28.7631.0"]) == 0
    assert capsys.readouterr().out == "pins installed: torch==2.14.0+cpu neuronx-cc==2.28.7631.0\n"
    assert assertpins.main(["torch==2.13.0+cpu nki==0.7.0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pinned versions not installed: torch 2.14.0+cpu does not satisfy the pin torch==2.13.0+cpu")
    assert err.rstrip().endswith("; nki is not installed (pinned nki==0.7.0)")
    for argv in ([], ["  "], ["torch==2.14.0+cpu", "nki==0.7.0"]):
        assert assertpins.main(argv) == 2
        assert capsys.readouterr().err.startswith("usage: python -m neuron_cell.assertpins")
